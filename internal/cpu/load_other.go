//go:build !linux

package cpu

// Runnable is unknown off Linux: ConfirmTimeout is used as it is.
func Runnable() (int, bool) { return 0, false }

// Lately is unknown off Linux.
func Lately() (int, bool) { return 0, false }
