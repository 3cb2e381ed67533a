//go:build !linux

package reduce

// threadCPU is 0 where the thread's CPU time is not read.
func threadCPU() int64 { return 0 }
