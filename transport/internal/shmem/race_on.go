//go:build race

package shmem

import (
	"runtime"
	"unsafe"
)

// The race detector cannot see synchronisation through shared memory that
// each rank maps at its own address (or that another process writes), so
// it would take a rank's sender reading a buffer and the same rank later
// receiving into it, after the peer has answered through the ring, for a
// race. Publishing a record releases, and taking one acquires, a token of
// the process: the order the rings really impose. Frames sent and received
// over TCP do the same, for rings whose causality runs partly through TCP
// (a ring of ranks on two hosts).
var raceToken byte

func RaceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&raceToken)) }
func RaceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&raceToken)) }
