package ps

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestBSPMatchesReference: sum mode and SGD mode under BSP against a naive
// computation, for random workers, lengths and sample counts.
func TestBSPMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		workers, n, rounds := 1+rng.IntN(6), rng.IntN(20), 1+rng.IntN(5)
		mode := UpdateMode(rng.IntN(2))
		lr, mom := 0.1, 0.9*rng.Float64()
		tb := NewTable(workers)
		if err := tb.Declare("w", KeyConfig{Len: n, Update: mode, LR: lr, Momentum: mom}); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n)
		vel := make([]float64, n)
		for c := range rounds {
			sum := make([]float64, n)
			samples := 0
			// Pushes arrive in a random worker order.
			for _, w := range rng.Perm(workers) {
				g := make([]float64, n)
				for i := range g {
					g[i] = rng.NormFloat64()
				}
				s := 1 + rng.IntN(64)
				if err := tb.Push("w", w, c, g, s); err != nil {
					t.Fatal(err)
				}
				for i := range g {
					if mode == SGD {
						sum[i] += float64(s) * g[i]
					} else {
						sum[i] += g[i]
					}
				}
				samples += s
			}
			for i := range want {
				if mode == SGD {
					vel[i] = mom*vel[i] + sum[i]/float64(samples)
					want[i] -= lr * vel[i]
				} else {
					want[i] += sum[i]
				}
			}
			for w := range workers {
				got, ready, stale, err := tb.Pull("w", w, c+1)
				if err != nil || !ready || stale != 0 {
					t.Fatalf("iter %d: pull after round %d: ready %v stale %d err %v", iter, c, ready, stale, err)
				}
				for i := range want {
					if math.Abs(got[i]-want[i]) > 1e-9 {
						t.Fatalf("iter %d mode %d round %d: [%d] = %v, want %v", iter, mode, c, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// simulate runs workers that alternate push(c) and pull(c+1) in a random
// order; a worker whose pull is not ready retries later. slow picks how
// rarely worker 0 gets a turn (1 = like the others). Each push is a one-hot
// vector, so a pull's value says exactly which updates it saw. It checks
// every served pull against the staleness bound and returns per-worker
// progress and how many pulls had to wait.
func simulate(t *testing.T, rng *rand.Rand, workers, clocks, staleness, slow, steps int) (done []int, waits int) {
	t.Helper()
	tb := NewTable(workers)
	if err := tb.Declare("k", KeyConfig{Len: workers * clocks, Staleness: staleness}); err != nil {
		t.Fatal(err)
	}
	next := make([]int, workers)     // next clock to push
	pulling := make([]bool, workers) // pushed next-1, now waiting to pull clock next
	for range steps {
		w := rng.IntN(workers)
		if w == 0 && slow > 1 && rng.IntN(slow) != 0 {
			continue
		}
		if next[w] == clocks && !pulling[w] {
			continue
		}
		if !pulling[w] {
			g := make([]float64, workers*clocks)
			g[w*clocks+next[w]] = 1
			if err := tb.Push("k", w, next[w], g, 1); err != nil {
				t.Fatal(err)
			}
			next[w]++
			pulling[w] = true
			continue
		}
		c := next[w]
		v, ready, stale, err := tb.Pull("k", w, c)
		if err != nil {
			t.Fatal(err)
		}
		if !ready {
			if staleness == Async {
				t.Fatalf("an ASP pull waited")
			}
			waits++
			continue
		}
		if staleness != Async && stale > staleness {
			t.Fatalf("served a pull %d clocks stale with bound %d", stale, staleness)
		}
		// The bound: every update from clocks <= c-s-1 is in the value.
		if staleness != Async {
			for q := range workers {
				for cc := 0; cc <= c-staleness-1 && cc < clocks; cc++ {
					if v[q*clocks+cc] != 1 {
						t.Fatalf("s=%d: worker %d's pull at clock %d misses worker %d's clock %d", staleness, w, c, q, cc)
					}
				}
			}
		}
		for i, x := range v {
			if x != 0 && x != 1 {
				t.Fatalf("update %d applied %v times", i, x)
			}
		}
		pulling[w] = false
	}
	return next, waits
}

// TestSSPBoundUnderRandomDelays: no pull ever breaks its mode's bound, and
// nobody deadlocks.
func TestSSPBoundUnderRandomDelays(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		workers, clocks := 1+rng.IntN(5), 1+rng.IntN(12)
		s := []int{0, 1, 2, 3, Async}[rng.IntN(5)]
		done, _ := simulate(t, rng, workers, clocks, s, 1+rng.IntN(4), 100000)
		for w, d := range done {
			if d != clocks {
				t.Fatalf("iter %d (s=%d): worker %d stuck at clock %d of %d", iter, s, w, d, clocks)
			}
		}
	}
}

// TestASPProgressWithStraggler: with worker 0 ten times slower, ASP never
// waits and the others finish far ahead; BSP makes them wait.
func TestASPProgressWithStraggler(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	done, waits := simulate(t, rng, 4, 200, Async, 10, 2000)
	if waits != 0 {
		t.Fatalf("ASP waited %d times", waits)
	}
	for w := 1; w < 4; w++ {
		if done[w] < 3*done[0] {
			t.Fatalf("fast worker %d at clock %d, straggler at %d: ASP should let it run ahead", w, done[w], done[0])
		}
	}
	done, waits = simulate(t, rng, 4, 200, 0, 10, 2000)
	if waits == 0 || done[1] > done[0]+1 {
		t.Fatalf("BSP let worker 1 run ahead of the straggler: %v (waits %d)", done, waits)
	}
}

// TestElasticRound: a worker removed mid-round no longer holds it back; the
// SGD step uses the mean over the samples actually pushed.
func TestElasticRound(t *testing.T) {
	tb := NewTable(3)
	if err := tb.Declare("w", KeyConfig{Len: 1, Update: SGD, LR: 1}); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tb.Push("w", 0, 0, []float64{1}, 10))
	must(tb.Push("w", 1, 0, []float64{4}, 30))
	if _, ready, _, _ := tb.Pull("w", 0, 1); ready {
		t.Fatal("round served before worker 2 pushed")
	}
	must(tb.Remove(2))
	v, ready, _, err := tb.Pull("w", 0, 1)
	if err != nil || !ready {
		t.Fatalf("round not completed after removing worker 2: %v", err)
	}
	if want := -(1*10 + 4*30) / 40.0; v[0] != want {
		t.Fatalf("value %v, want %v (sample-weighted mean over survivors)", v[0], want)
	}
	if err := tb.Push("w", 2, 0, []float64{1}, 1); !errors.Is(err, ErrWorker) {
		t.Fatalf("a removed worker pushed: %v", err)
	}
	if tb.Live() != 2 {
		t.Fatalf("live %d", tb.Live())
	}
}

func TestTableErrors(t *testing.T) {
	tb := NewTable(2)
	if err := tb.Declare("k", KeyConfig{Len: 3}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Declare("k", KeyConfig{Len: 3}); err != nil {
		t.Fatalf("re-declaring the same key: %v", err)
	}
	cases := []struct {
		err  error
		want error
	}{
		{tb.Declare("k", KeyConfig{Len: 4}), ErrShape},
		{tb.Push("nope", 0, 0, make([]float64, 3), 1), ErrUnknownKey},
		{tb.Push("k", 0, 0, make([]float64, 2), 1), ErrShape},
		{tb.Push("k", 0, 1, make([]float64, 3), 1), ErrClock},
		{tb.Push("k", 7, 0, make([]float64, 3), 1), ErrWorker},
	}
	for i, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("case %d: got %v, want %v", i, c.err, c.want)
		}
	}
	if err := tb.Push("k", 0, 0, make([]float64, 3), 0); err == nil {
		t.Error("a push of 0 samples accepted")
	}
	if err := tb.Declare("bad", KeyConfig{Len: 2, Init: []float64{1}}); err == nil {
		t.Error("init of the wrong length accepted")
	}
	for _, kc := range []KeyConfig{{Len: 1, Update: 7}, {Len: 1, Update: SGD, LR: math.NaN()}, {Len: 1, Update: SGD, LR: 1, Momentum: 1}, {Len: 1, Update: SGD, LR: -1}} {
		if err := tb.Declare("bad", kc); err == nil {
			t.Errorf("%+v accepted", kc)
		}
	}
}

// TestSharesFollowSpeed: an artificially slowed worker's share converges to
// its speed ratio, and shares always add up to the global batch.
func TestSharesFollowSpeed(t *testing.T) {
	rates := []float64{1000, 1000, 1000, 250} // worker 3 is 4x slower
	est := make([]Speed, len(rates))
	total := 512
	shares, err := Shares(total, make([]float64, len(rates)))
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		speeds := make([]float64, len(rates))
		for i := range rates {
			d := time.Duration(float64(shares[i]) / rates[i] * float64(time.Second))
			est[i].Observe(shares[i], d)
			speeds[i] = est[i].Rate()
		}
		if shares, err = Shares(total, speeds); err != nil {
			t.Fatal(err)
		}
	}
	sum := 0
	for _, s := range shares {
		sum += s
	}
	if sum != total {
		t.Fatalf("shares %v add up to %d, want %d", shares, sum, total)
	}
	want := float64(total) * 250 / 3250
	if math.Abs(float64(shares[3])-want) > 1 {
		t.Fatalf("slow worker's share %d, want about %.1f (shares %v)", shares[3], want, shares)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 1000 {
		n := 1 + rng.IntN(8)
		sp := make([]float64, n)
		for i := range sp {
			sp[i] = rng.Float64() * 100
		}
		x := rng.IntN(1000)
		s, err := Shares(x, sp)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, v := range s {
			got += v
			if v < 0 || x >= n && v == 0 {
				t.Fatalf("Shares(%d, %v) = %v", x, sp, s)
			}
		}
		if got != x {
			t.Fatalf("Shares(%d, %v) = %v adds up to %d", x, sp, s, got)
		}
	}
	if _, err := Shares(10, []float64{1, math.NaN()}); err == nil {
		t.Fatal("NaN speed accepted")
	}
}

// TestPlace: partitions cover every key exactly, in order, placement is
// deterministic and balanced to within one partition, and K=1 puts
// everything on hub 0.
func TestPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	if _, err := NewPlacement(0, 4); err == nil {
		t.Fatal("no hubs accepted")
	}
	for range 300 {
		var names []string
		lens := map[string]int{}
		for i := range 1 + rng.IntN(6) {
			k := string(rune('a' + i))
			names = append(names, k)
			lens[k] = rng.IntN(5000)
		}
		part, hubs := 1+rng.IntN(1024), 1+rng.IntN(5)
		p1, _ := NewPlacement(hubs, part)
		p2, _ := NewPlacement(hubs, part)
		load := make([]int, hubs)
		for _, k := range names {
			a, b := p1.Add(k, lens[k]), p2.Add(k, lens[k])
			covered := 0
			for i, p := range a {
				if p != b[i] {
					t.Fatal("placement is not deterministic")
				}
				if p.Key != k || p.Off != covered || p.Len > part || p.Hub < 0 || p.Hub >= hubs || hubs == 1 && p.Hub != 0 {
					t.Fatalf("bad partition %+v", p)
				}
				covered += p.Len
				load[p.Hub] += p.Len
			}
			if covered != lens[k] || len(a) == 0 {
				t.Fatalf("key %s: %d of %d elements placed in %d partitions", k, covered, lens[k], len(a))
			}
		}
		if !slices.Equal(load, p1.Loads()) {
			t.Fatalf("Loads %v, partitions add up to %v", p1.Loads(), load)
		}
		lo, hi := slices.Min(load), slices.Max(load)
		if hi-lo > part {
			t.Fatalf("hub loads %v differ by more than a partition (%d)", load, part)
		}
	}
}
