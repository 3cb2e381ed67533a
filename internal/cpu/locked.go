package cpu

import "context"

// lockedKey marks a context whose caller runs on a goroutine locked to
// its OS thread.
type lockedKey struct{}

// WithLockedThread returns ctx marked as carried by a goroutine locked to
// its OS thread: a call from C (a cgo callback) or after
// runtime.LockOSThread. A wait on such a goroutine calls runtime.Gosched
// between polls seldom: for a locked goroutine a Gosched hands the P to
// another thread and takes it back, two thread switches (tens of
// microseconds on a VM) instead of a few nanoseconds.
func WithLockedThread(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockedKey{}, true)
}

// Unlocked returns ctx without the mark, for a goroutine that a marked
// caller starts: that goroutine is not locked.
func Unlocked(ctx context.Context) context.Context {
	if !LockedThread(ctx) {
		return ctx
	}
	return context.WithValue(ctx, lockedKey{}, false)
}

// LockedThread reports whether ctx was marked by WithLockedThread.
func LockedThread(ctx context.Context) bool {
	v, _ := ctx.Value(lockedKey{}).(bool)
	return v
}
