//go:build !linux

package transport

import (
	"errors"
	"sync/atomic"
	"time"
)

const shmSupported = false

func futexWait(*atomic.Uint32, uint32, time.Duration) { time.Sleep(50 * time.Microsecond) }
func futexWake(*atomic.Uint32)                        {}

func createSegment(string, int, func(int, int64) error) ([]byte, error) { return nil, errNoShm }
func attachSegment(string, int) ([]byte, error)                         { return nil, errNoShm }
func unmapSegment([]byte) error                                         { return nil }
func bootID() string                                                    { return "" }
