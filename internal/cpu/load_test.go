package cpu

import (
	"testing"
	"time"
)

// TestBusyToSpin: a wait stops spinning past 16 runnable tasks per CPU,
// and a look at the host's load holds for loadRefresh: a second look
// right after it says the same without reading the count again.
func TestBusyToSpin(t *testing.T) {
	for _, c := range []struct {
		runnable, cpus int
		want           bool
	}{
		{0, 2, false}, {16, 2, false}, {32, 2, false}, {33, 2, true}, {64, 2, true},
		{16, 1, false}, {17, 1, true}, {17, 0, true}, {127, 8, false}, {129, 8, true},
	} {
		if got := busyToSpin(c.runnable, c.cpus); got != c.want {
			t.Errorf("busyToSpin(%d runnable, %d cpus) = %v, want %v", c.runnable, c.cpus, got, c.want)
		}
	}
	loadCache.at.Store(0)
	first := TooBusyToSpin()
	at := loadCache.at.Load()
	if at == 0 {
		t.Fatal("the look was not recorded")
	}
	// A look recorded as just taken (stamped ahead of the clock, so that
	// a slow machine cannot let it expire) is what the next call says.
	at = time.Now().Add(time.Hour).UnixNano()
	loadCache.at.Store(at)
	loadCache.busy.Store(!first)
	if got := TooBusyToSpin(); got != !first || loadCache.at.Load() != at {
		t.Fatalf("a look within %v read the load again (busy %v, stamp %d then %d)", loadRefresh, got, at, loadCache.at.Load())
	}
	loadCache.at.Store(0)
}
