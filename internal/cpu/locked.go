package cpu

import "context"

// lockedKey marks a context whose caller runs on a goroutine locked to
// its OS thread.
type lockedKey struct{}

// WithLockedThread returns ctx marked as carried by a goroutine locked to
// its OS thread: a call from C (a cgo callback) or after
// runtime.LockOSThread. A wait on such a goroutine does not call
// runtime.Gosched between polls: for a locked goroutine a Gosched hands
// the P to another thread and takes it back, two thread switches (tens of
// microseconds on a VM) instead of a few nanoseconds.
func WithLockedThread(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockedKey{}, true)
}

// LockedThread reports whether ctx was marked by WithLockedThread.
func LockedThread(ctx context.Context) bool {
	v, _ := ctx.Value(lockedKey{}).(bool)
	return v
}
