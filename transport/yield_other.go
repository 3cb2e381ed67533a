//go:build !linux

package transport

import "runtime"

// osYield lets other goroutines run; elsewhere than Linux there is no
// portable way to give the core to another process.
func osYield() { runtime.Gosched() }
