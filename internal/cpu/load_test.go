package cpu

import (
	"runtime"
	"testing"
	"time"
)

// TestModeFor: a wait polls keeping its core, however many tasks besides
// the ranks want a CPU, up to 16 runnable tasks per CPU, and parks at
// once past that; a look at the host's load holds for loadRefresh: a second look
// right after it says the same without reading the count again.
func TestModeFor(t *testing.T) {
	for _, c := range []struct {
		runnable, cpus int
		want           Mode
	}{
		{0, 2, Spin}, {2, 2, Spin}, {3, 2, Spin}, {4, 2, Spin}, {16, 2, Spin}, {32, 2, Spin},
		{33, 2, Park}, {64, 2, Park}, {1, 1, Spin}, {2, 1, Spin}, {3, 1, Spin}, {16, 1, Spin},
		{17, 1, Park}, {17, 0, Park}, {2, 0, Spin}, {9, 8, Spin}, {10, 8, Spin}, {128, 8, Spin}, {129, 8, Park},
	} {
		if got := ModeFor(c.runnable, c.cpus); got != c.want {
			t.Errorf("ModeFor(%d runnable, %d cpus) = %v, want %v", c.runnable, c.cpus, got, c.want)
		}
	}
	loadCache.at.Store(0)
	first := Now()
	at := loadCache.at.Load()
	if at == 0 {
		t.Fatal("the look was not recorded")
	}
	// A look recorded as just taken (stamped ahead of the clock, so that
	// a slow machine cannot let it expire) is what the next call says.
	at = time.Now().Add(time.Hour).UnixNano()
	loadCache.at.Store(at)
	other := (first + 1) % 3
	loadCache.mode.Store(uint32(other))
	if got := Now(); got != other || loadCache.at.Load() != at {
		t.Fatalf("a look within %v read the load again (mode %v, stamp %d then %d)", loadRefresh, got, at, loadCache.at.Load())
	}
	loadCache.at.Store(0)
}

// TestHost checks that the host's load comes with the CPU count when it
// can be read, and is all zero when it cannot.
func TestHost(t *testing.T) {
	n, cpus := Host()
	_, ok := Lately()
	switch {
	case ok && cpus != runtime.NumCPU():
		t.Errorf("Host() = %d, %d CPUs; want %d CPUs", n, cpus, runtime.NumCPU())
	case ok && n < 0:
		t.Errorf("Host() = %d runnable", n)
	case !ok && (n != 0 || cpus != 0):
		t.Errorf("Host() = %d, %d where the load cannot be read; want 0, 0", n, cpus)
	}
}
