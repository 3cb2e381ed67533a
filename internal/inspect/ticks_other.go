//go:build !amd64

package inspect

func tscUsable() bool { return false }

func ticks() int64 { return 0 }
