//go:build !linux

package cpu

// Yield does nothing elsewhere than Linux: there is no portable way to
// give the core to another process, and the spin loop already lets the
// rank's own goroutines run (runtime.Gosched) before it calls Yield.
func Yield() {}

// Current says false elsewhere than Linux.
func Current() (int, bool) { return 0, false }

// MoveOff does nothing elsewhere than Linux.
func MoveOff(int) bool { return false }
