package transport

import "sync/atomic"

// WaitMeter adds up the time Recv spends blocked for a peer's data (a
// Recv whose frame is already there adds nothing), on a clock of the
// caller's: every Recv of a transport once SetWaitMeter gave it one, in
// whatever goroutine. A collective's share of it is the difference of
// Total before and after.
type WaitMeter struct {
	Now   func() int64 // the clock; any unit
	total atomic.Int64
}

// NewWaitMeter returns a meter that reads now.
func NewWaitMeter(now func() int64) *WaitMeter { return &WaitMeter{Now: now} }

// Total is the time waited so far, in the clock's unit.
func (m *WaitMeter) Total() int64 { return m.total.Load() }

// AddSince adds the time from t0, on the meter's clock, to now: for
// implementations of Transport.
func (m *WaitMeter) AddSince(t0 int64) { m.total.Add(m.Now() - t0) }
