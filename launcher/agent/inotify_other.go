//go:build !linux

package agent

import (
	"errors"
	"os"
)

// watchDirs has no inotify here; watchSingletons then only polls.
func watchDirs(string, chan<- struct{}) (*os.File, error) {
	return nil, errors.New("no inotify on this system")
}
