//go:build !amd64

package tick

func tscUsable() bool { return false }

func rdtsc() uint64 { return 0 }
