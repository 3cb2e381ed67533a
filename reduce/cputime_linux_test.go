package reduce

import "golang.org/x/sys/unix"

// threadCPU is the calling thread's CPU time in nanoseconds, or 0.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
