//go:build !linux

package shmem

import (
	"sync/atomic"
	"syscall"
	"time"
)

// Supported says whether this platform has shared memory segments.
const Supported = false

// pollSleep stands in for a futex sleep where there is none: a short
// nap between polls. No segment is ever made on these platforms (see
// Supported), so it is never used in a job.
const pollSleep = 50 * time.Microsecond

func FutexWait(*atomic.Uint32, uint32, time.Duration) { time.Sleep(pollSleep) }
func FutexWake(*atomic.Uint32)                        {}

func createSegment(string, int, func(int, int64) error) ([]byte, error) { return nil, errNoShm }
func attachSegment(string, int) ([]byte, error)                         { return nil, errNoShm }
func Unmap([]byte) error                                                { return nil }
func bootID() string                                                    { return "" }

func makeBells(string) (*Bells, error)       { return nil, errNoShm }
func openBells(string, bool) (*Bells, error) { return nil, errNoShm }
func RingBell(syscall.RawConn)               {}
