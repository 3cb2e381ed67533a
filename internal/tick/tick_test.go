package tick

import (
	"testing"
	"time"
)

// Readings convert to the wall clock: a stretch timed in ticks comes out
// as long as the wall clock says, and a reading lands between the wall
// clock's readings around it.
func TestUnixNano(t *testing.T) {
	b := NewBase()
	before := time.Now()
	t0 := Now()
	time.Sleep(30 * time.Millisecond)
	t1 := Now()
	after := time.Now()
	at, dur := b.UnixNano()
	if t1 <= t0 {
		t.Fatalf("clock went back: %d then %d", t0, t1)
	}
	slack := 2 * time.Millisecond
	if got := at(t0); got < before.UnixNano()-int64(slack) || got > after.UnixNano() {
		t.Errorf("reading at %v, want between %v and %v", time.Unix(0, got), before, after)
	}
	if d := dur(t1 - t0); d < 30*time.Millisecond-slack || d > after.Sub(before)+slack {
		t.Errorf("30 ms sleep measured as %v (wall %v)", d, after.Sub(before))
	}
}

func BenchmarkNow(b *testing.B) {
	var s int64
	for i := 0; i < b.N; i++ {
		s += Now()
	}
	_ = s
}
