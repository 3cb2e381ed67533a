//go:build !linux

package transport

import (
	"sync/atomic"
	"syscall"
	"time"
)

const shmSupported = false

// pollSleep stands in for a futex sleep where there is none: a short
// nap between polls. No segment is ever made on these platforms (see
// shmSupported), so it is never used in a job.
const pollSleep = 50 * time.Microsecond

func futexWait(*atomic.Uint32, uint32, time.Duration) { time.Sleep(pollSleep) }
func futexWake(*atomic.Uint32)                        {}

func createSegment(string, int, func(int, int64) error) ([]byte, error) { return nil, errNoShm }
func attachSegment(string, int) ([]byte, error)                         { return nil, errNoShm }
func unmapSegment([]byte) error                                         { return nil }
func bootID() string                                                    { return "" }

func makeBells(string) (*bells, error)       { return nil, errNoShm }
func openBells(string, bool) (*bells, error) { return nil, errNoShm }
func ring(syscall.RawConn)                   {}
