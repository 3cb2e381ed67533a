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
	expired := -int64(time.Hour)
	loadCache.at.Store(expired)
	first := Now(0)
	at := loadCache.at.Load()
	if at == expired {
		t.Fatal("the look was not recorded")
	}
	// A look recorded as just taken (stamped ahead of the clock, so that
	// a slow machine cannot let it expire) is what the next call says.
	at = int64(time.Since(loadEpoch) + time.Hour)
	loadCache.at.Store(at)
	other := (first + 1) % 3
	loadCache.mode.Store(uint32(other))
	if got := Now(0); got != other || loadCache.at.Load() != at {
		t.Fatalf("a look within %v read the load again (mode %v, stamp %d then %d)", loadRefresh, got, at, loadCache.at.Load())
	}
	loadCache.at.Store(expired)
}

// TestGauge: ranks that have a core each spin whatever else runs (up to
// ModeFor's overload); ranks that outnumber the cores spin while the
// runnable count, averaged over samples taken spinning, stays within
// otherWork of them, park for parkHold once it exceeds that, and look
// again after; a stray sample does not make them park, a load that stays
// does, within a few samples.
func TestGauge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type sample struct {
		at       time.Duration // since t0
		runnable int
		want     Mode
	}
	for _, c := range []struct {
		name        string
		cpus, ranks int
		samples     []sample
	}{
		{"a core each", 2, 2, []sample{{0, 2, Spin}, {50 * ms, 12, Spin}, {100 * ms, 30, Spin}, {150 * ms, 33, Park}, {200 * ms, 6, Spin}}},
		{"ranks unknown", 2, 0, []sample{{0, 9, Spin}, {50 * ms, 9, Spin}, {100 * ms, 9, Spin}}},
		{"alone", 2, 4, []sample{{0, 4, Spin}, {50 * ms, 4, Spin}, {100 * ms, 5, Spin}, {150 * ms, 4, Spin}, {200 * ms, 4, Spin}}},
		{"a stray sample", 2, 4, []sample{{0, 4, Spin}, {50 * ms, 7, Spin}, {100 * ms, 4, Spin}, {150 * ms, 4, Spin}}},
		{"a busy start", 2, 4, []sample{{0, 8, Spin}, {50 * ms, 4, Spin}, {100 * ms, 3, Spin}, {150 * ms, 6, Spin}, {200 * ms, 5, Spin}, {250 * ms, 4, Spin}}},
		{"beside two", 2, 4, []sample{{0, 6, Spin}, {50 * ms, 6, Spin}, {100 * ms, 6, Spin}, {150 * ms, 6, Spin}, {200 * ms, 6, Park},
			// Parked: samples taken then do not count.
			{250 * ms, 2, Park}, {2150 * ms, 3, Park},
			// Past the hold the ranks spin, and the first look (the
			// others still waking: it reads low) is not a sample; the
			// next finds the load still there.
			{2250 * ms, 3, Spin}, {2300 * ms, 6, Park}, {2350 * ms, 6, Park}}},
		{"beside four", 2, 4, []sample{{0, 8, Spin}, {50 * ms, 8, Park}}},
		{"work that ends", 2, 4, []sample{{0, 8, Spin}, {50 * ms, 8, Park},
			{2050 * ms, 8, Spin}, {2100 * ms, 4, Spin}, {2150 * ms, 4, Spin}, {2200 * ms, 4, Spin}, {2250 * ms, 4, Spin}}},
		// After a hold the next sample decides alone: a stray one parks
		// again, a quiet one does not.
		{"a stray sample after a hold", 2, 4, []sample{{0, 8, Spin}, {50 * ms, 8, Park},
			{2050 * ms, 4, Spin}, {2100 * ms, 7, Park}, {4050 * ms, 4, Park},
			{4100 * ms, 4, Spin}, {4150 * ms, 5, Spin}, {4200 * ms, 4, Spin}, {4250 * ms, 6, Spin}}},
		{"overload", 2, 64, []sample{{0, 40, Park}, {50 * ms, 30, Spin}}},
	} {
		var g Gauge
		for i, s := range c.samples {
			if got := g.Observe(t0.Add(s.at), s.runnable, c.cpus, c.ranks); got != s.want {
				t.Errorf("%s: sample %d (%d runnable at %v, %d ranks on %d cpus) = %v, want %v", c.name, i, s.runnable, s.at, c.ranks, c.cpus, got, s.want)
			}
		}
	}
}

const ms = time.Millisecond

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

// TestContended: the host is contended when the runnable count, averaged
// over its samples, exceeds both the CPUs and the job's ranks on the host
// by otherWork: two ranks polling on 2 CPUs are not, two busy processes
// beside them are found within a few samples and their end as soon; a
// stray sample changes nothing; four ranks on 2 CPUs are contended only
// with other work beside them.
func TestContended(t *testing.T) {
	for _, c := range []struct {
		avg         float64
		cpus, ranks int
		want        bool
	}{
		{2, 2, 2, false}, {3, 2, 2, false}, {3.5, 2, 2, false}, {3.6, 2, 2, true}, {6, 2, 2, true},
		{5, 2, 4, false}, {5.5, 2, 4, false}, {5.6, 2, 4, true}, {9, 8, 0, false}, {9.6, 8, 2, true},
		{2.6, 0, 0, true}, {2.4, 1, 0, false},
	} {
		if got := ContendedFor(c.avg, c.cpus, c.ranks); got != c.want {
			t.Errorf("ContendedFor(%v, %d cpus, %d ranks) = %v, want %v", c.avg, c.cpus, c.ranks, got, c.want)
		}
	}
	var l Load
	contended := func(runnable int) bool { return ContendedFor(l.Observe(runnable), 2, 2) }
	for i := range 20 {
		if contended(2 + i%2) {
			t.Fatalf("sample %d: two ranks polling alone read as contended (average %v)", i, l.avg)
		}
	}
	if contended(7) {
		t.Fatalf("one stray sample of 7 read as contended (average %v)", l.avg)
	}
	n := 0
	for !contended(5) {
		if n++; n > 8 {
			t.Fatalf("two busy processes (5 runnable) not found in 8 samples (average %v)", l.avg)
		}
	}
	n = 0
	for contended(3) {
		if n++; n > 8 {
			t.Fatalf("their end not found in 8 samples (average %v)", l.avg)
		}
	}
	if l.Observe(4) <= 3 {
		t.Fatalf("the average does not follow its samples: %v", l.avg)
	}
	var fresh Load
	if got := fresh.Observe(6); got != 6 {
		t.Fatalf("a first sample of 6 averages %v", got)
	}
}
