// Package tick is a cheap clock for timing collectives: the CPU's
// time-stamp counter where it runs at a constant rate and does not stop
// (amd64 with constant_tsc and nonstop_tsc: one instruction, about 10 ns
// on a VM), else the monotonic clock in nanoseconds since the process
// started. Readings are only comparable within one process; a Base taken
// early and one taken later turn them into unix nanoseconds.
package tick

import "time"

var (
	tsc   = tscUsable()
	start = time.Now()
)

// Now is a reading of the clock, in ticks.
func Now() int64 {
	if tsc {
		return int64(rdtsc())
	}
	return int64(time.Since(start))
}

// Base pairs a reading with the wall clock, to convert readings later.
type Base struct {
	t    time.Time
	tick int64
}

// NewBase takes a Base now.
func NewBase() Base { return Base{t: time.Now(), tick: Now()} }

// UnixNano returns a function that turns readings into unix nanoseconds,
// and one that turns a number of ticks into a duration. With the
// time-stamp counter its rate is measured from b to now, over at least
// 20 ms (UnixNano sleeps for what is missing).
func (b Base) UnixNano() (at func(int64) int64, dur func(int64) time.Duration) {
	base := b.t.UnixNano()
	if !tsc {
		return func(v int64) int64 { return base + v - b.tick }, func(d int64) time.Duration { return time.Duration(d) }
	}
	if d := time.Since(b.t); d < 20*time.Millisecond {
		time.Sleep(20*time.Millisecond - d)
	}
	el, dt := time.Since(b.t), Now()-b.tick
	perTick := float64(el) / float64(max(dt, 1))
	return func(v int64) int64 { return base + int64(float64(v-b.tick)*perTick) },
		func(d int64) time.Duration { return time.Duration(float64(d) * perTick) }
}
