//go:build !linux

package transport

// runnableTasks is unknown off Linux: ConfirmTimeout is used as it is.
func runnableTasks() (int, bool) { return 0, false }
