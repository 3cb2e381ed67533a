//go:build !(linux && amd64)

package pmilib

import "os"

var library []byte

// Open returns ErrNone: this build has no library.
func Open() (*os.File, error) { return nil, ErrNone }
