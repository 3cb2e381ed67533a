package ps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/assign"
)

// naiveFit is the reference for costFit: it keeps every observation and
// solves the weighted least-squares normal equations from scratch at each
// step, with observation k steps old weighing fitForget^k.
type naiveFit struct {
	xs, ys    []float64
	fixed     float64
	separated bool
}

func (f *naiveFit) observe(samples int, d time.Duration) {
	if samples <= 0 || d <= 0 {
		return
	}
	f.xs = append(f.xs, float64(samples))
	f.ys = append(f.ys, d.Seconds())
	s0, s1, s2, t1, t2 := f.sums()
	mx, my := s1/s0, t1/s0
	variance := s2/s0 - mx*mx
	if !(variance > 0 && variance >= (fitSpread*mx)*(fitSpread*mx)) {
		return
	}
	// [s0 s1; s1 s2]·[a b]ᵀ = [t1 t2]ᵀ
	det := s0*s2 - s1*s1
	b := (s0*t2 - s1*t1) / det
	a := (t1 - b*s1) / s0
	f.fixed = min(max(a, 0), (1-fitMinPerSample)*my)
	f.separated = true
}

// sums are Σw, Σwx, Σwx², Σwy and Σwxy over the observations.
func (f *naiveFit) sums() (s0, s1, s2, t1, t2 float64) {
	n := len(f.xs)
	for j := range f.xs {
		w := math.Pow(fitForget, float64(n-1-j))
		x, y := f.xs[j], f.ys[j]
		s0 += w
		s1 += w * x
		s2 += w * x * x
		t1 += w * y
		t2 += w * x * y
	}
	return
}

// model is costFit.model's contract, from the sums.
func (f *naiveFit) model(rate float64) (speed, fixed float64) {
	if !f.separated {
		return rate, 0
	}
	s0, s1, _, t1, _ := f.sums()
	mx, my := s1/s0, t1/s0
	fixed = min(max(f.fixed, 0), (1-fitMinPerSample)*my)
	return mx / (my - fixed), fixed
}

// series is one kind of (samples, compute) history for the fit.
type series struct {
	name string
	gen  func(rng *rand.Rand, k int) (int, time.Duration)
	// truth, when the series is exactly affine (up to the nanosecond):
	// fixed seconds and seconds per sample the fit must recover once it
	// separates them.
	fixed, perSample float64
	exact            bool
}

func seriesKinds(rng *rand.Rand) []series {
	F := 0.0005 + 0.05*rng.Float64()
	C := 0.0001 + 0.002*rng.Float64()
	share := 1 + rng.IntN(300)
	affine := func(x int, noise float64) time.Duration {
		return time.Duration((F + C*float64(x)) * (1 + noise) * 1e9)
	}
	return []series{
		{"constant share, noisy time", func(rng *rand.Rand, k int) (int, time.Duration) {
			return share, affine(share, 0.3*(rng.Float64()-0.5))
		}, 0, 0, false},
		{"exact affine", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(200)
			return x, affine(x, 0)
		}, F, C, true},
		{"noisy affine", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(200)
			return x, affine(x, 0.4*(rng.Float64()-0.5))
		}, 0, 0, false},
		{"fixed cost dominates", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 10 + rng.IntN(90)
			return x, time.Duration((1 + 0.001*float64(x)) * 1e9)
		}, 1, 0.001, true},
		{"no fixed cost", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(500)
			return x, time.Duration(C * float64(x) * 1e9)
		}, 0, C, true},
		{"convex: the line's intercept is negative", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(100)
			return x, time.Duration(C * float64(x*x) * 1e9)
		}, 0, 0, false},
		{"time falls with the share", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(100)
			return x, time.Duration((0.2 - 0.001*float64(x)) * 1e9)
		}, 0, 0, false},
		{"varied, then settled", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := share
			if k < 4 {
				x = 1 + rng.IntN(2*share+10)
			}
			return x, affine(x, 0)
		}, F, C, true},
		{"small shares", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := 1 + rng.IntN(3)
			return x, affine(x, 0)
		}, F, C, true},
		{"with empty iterations", func(rng *rand.Rand, k int) (int, time.Duration) {
			x := rng.IntN(40) - 5 // some ≤ 0: not observed
			d := affine(x, 0)
			if rng.IntN(5) == 0 {
				d = -d
			}
			return x, d
		}, F, C, true},
	}
}

// TestCostFitMatchesNaive: on random (samples, time) series of every
// kind and length 0, 1, 2, primes, the incremental fit gives the model
// the naive least squares gives, step by step: the proportional estimate
// until the shares vary enough, then the fit, clamped, and its fixed part
// held while they do not. Exactly affine series are recovered.
func TestCostFitMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 9))
	// Every path must be taken: the proportional fallback, a fit, a fixed
	// part held while the shares do not vary, and each clamp.
	var fallback, fitted, held, atZero, atTop int
	for trial := range 40 {
		for _, s := range seriesKinds(rng) {
			for _, n := range []int{0, 1, 2, 3, 5, 7, 13, 31, 61} {
				var got costFit
				var ref naiveFit
				rate := 1 + 1000*rng.Float64() // what Speed would say: passed through
				for k := range n {
					x, d := s.gen(rng, k)
					got.observe(x, d)
					ref.observe(x, d)
					gs, gf := got.model(rate)
					rs, rf := ref.model(rate)
					where := func() string {
						return fmt.Sprintf("%s: trial %d, step %d of %d", s.name, trial, k, n)
					}
					if got.separated != ref.separated {
						t.Fatalf("%s: separated %v, the reference %v", where(), got.separated, ref.separated)
					}
					if !got.separated {
						fallback++
						if gs != rate || gf != 0 {
							t.Fatalf("%s: not separated, the model is %v/s + %vs, want the proportional %v/s + 0", where(), gs, gf, rate)
						}
						continue
					}
					_, my := ref.means()
					if math.Abs(gf-rf) > 1e-9*my || math.Abs(gs-rs) > 1e-9*rs {
						t.Fatalf("%s: model %v/s + %vs, the reference %v/s + %vs", where(), gs, gf, rs, rf)
					}
					if gf < 0 || gf > (1-fitMinPerSample)*my*(1+1e-12) || !(gs > 0) || math.IsInf(gs, 0) {
						t.Fatalf("%s: model %v/s + %vs out of its clamps (mean time %vs)", where(), gs, gf, my)
					}
					switch {
					case !got.spread():
						held++
					case gf == 0:
						atZero++
					case gf >= (1-fitMinPerSample)*my*(1-1e-12):
						atTop++
					default:
						fitted++
					}
					if s.exact {
						// Durations are whole nanoseconds: the data are
						// affine to 1e-9 s.
						if math.Abs(gf-s.fixed) > 1e-6 || math.Abs(1/gs-s.perSample) > 1e-6*s.perSample+1e-8 {
							t.Fatalf("%s: fitted %vs + %vs a sample, the series is %vs + %vs", where(), gf, 1/gs, s.fixed, s.perSample)
						}
					}
				}
				if s.name == "constant share, noisy time" && got.separated {
					t.Fatalf("%s: the fit separated a fixed part from one share", s.name)
				}
			}
		}
	}
	if fallback == 0 || fitted == 0 || held == 0 || atZero == 0 || atTop == 0 {
		t.Errorf("paths taken: fallback %d, fitted %d, held %d, clamped at 0 %d, clamped at the top %d: want every one", fallback, fitted, held, atZero, atTop)
	}
}

func (f *naiveFit) means() (mx, my float64) {
	s0, s1, _, t1, _ := f.sums()
	return s1 / s0, t1 / s0
}

// affineWorker is a simulated worker whose compute for a share of x
// samples is fixed + perSample·x seconds (reported, never slept).
type affineWorker struct{ fixed, perSample float64 }

func (w affineWorker) compute(x int) time.Duration {
	return time.Duration((w.fixed + w.perSample*float64(x)) * 1e9)
}

// bruteAffine enumerates every split of total with 1 ≤ x_i ≤ cap_i (0: no
// cap) and, with a deadline, t_i ≤ deadline (assign's tolerance), where
// t_i = cost_i·x_i + over_i as assign computes it, and returns the
// smallest makespan, or ok false if no split qualifies.
func bruteAffine(total int, cost, over []float64, caps []int, deadline float64) (best float64, ok bool) {
	n := len(cost)
	x := make([]int, n)
	best = math.Inf(1)
	var rec func(i, left int)
	rec = func(i, left int) {
		lo, hi := 1, left-(n-1-i)
		if i == n-1 {
			lo = left
		}
		if len(caps) > 0 && caps[i] > 0 {
			hi = min(hi, caps[i])
		}
		for k := lo; k <= hi; k++ {
			t := cost[i]*float64(k) + over[i]
			if deadline > 0 && t > deadline*(1+1e-9) {
				break
			}
			x[i] = k
			if i < n-1 {
				rec(i+1, left-k)
				continue
			}
			T := 0.0
			for j := range n {
				T = max(T, cost[j]*float64(x[j])+over[j])
			}
			if T < best {
				best, ok = T, true
			}
		}
	}
	if total >= n {
		rec(0, total)
	}
	return best, ok
}

// TestOptimalFittedBruteForce: hub 0's optimal rule on the models its
// fits hold (some workers fitted, some still at the proportional
// estimate, some not yet measured) gives the smallest makespan of every
// split under those models, within caps, overheads and a deadline, and
// fails exactly when no split exists. Split with the fixed parts added to
// Overhead (the offline use the doc names) finds the same makespan.
func TestOptimalFittedBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 10))
	var fitted, proportional, unmeasured, infeasible int
	for trial := range 1500 {
		n := 1 + rng.IntN(4)
		total := n + rng.IntN(14)
		cfg := ShareConfig{Rule: ShareOptimal}
		if rng.IntN(2) == 0 {
			cfg.Overhead = make([]time.Duration, n)
			for i := range cfg.Overhead {
				cfg.Overhead[i] = time.Duration(rng.IntN(4)) * 250 * time.Millisecond
			}
		}
		if rng.IntN(2) == 0 {
			cfg.Cap = make([]int, n)
			for i := range cfg.Cap {
				cfg.Cap[i] = rng.IntN(total/n + 3)
			}
		}
		if rng.IntN(3) == 0 {
			cfg.Deadline = time.Duration(500+rng.IntN(4000)) * time.Millisecond
		}
		if err := cfg.validate(n); err != nil {
			t.Fatal(err)
		}
		speeds, fixed := make([]float64, n), make([]float64, n)
		for i := range n {
			w := affineWorker{fixed: float64(rng.IntN(5)) * 0.25, perSample: 1 / float64(1+rng.IntN(20))}
			var sp Speed
			var fit costFit
			switch rng.IntN(4) {
			case 0: // not measured yet
				unmeasured++
			case 1: // one share so far: the proportional estimate
				x := 1 + rng.IntN(10)
				for range 1 + rng.IntN(3) {
					sp.Observe(x, w.compute(x))
					fit.observe(x, w.compute(x))
				}
				proportional++
			default: // varied shares: fitted
				for _, x := range []int{1 + rng.IntN(3), 9 + rng.IntN(5), 1 + rng.IntN(12)} {
					sp.Observe(x, w.compute(x))
					fit.observe(x, w.compute(x))
				}
				if !fit.separated {
					t.Fatalf("trial %d: shares that vary did not separate the fit", trial)
				}
				fitted++
			}
			speeds[i], fixed[i] = fit.model(sp.Rate())
		}
		// The models as the solver takes them: a worker with no estimate
		// counts at the mean speed and mean fixed part of the others; with
		// none, the round is split evenly (no overheads, no deadline).
		known, sum, sumF := 0, 0.0, 0.0
		for i := range n {
			if speeds[i] > 0 {
				known++
				sum += speeds[i]
				sumF += fixed[i]
			}
		}
		cost, over := make([]float64, n), make([]float64, n)
		deadline := cfg.Deadline.Seconds()
		for i := range n {
			s, f := speeds[i], fixed[i]
			if known == 0 {
				s, f = 1, 0
				deadline = 0
			} else if s == 0 {
				s, f = sum/float64(known), sumF/float64(known)
			}
			cost[i] = 1 / s
			if known > 0 {
				if cfg.Overhead != nil {
					over[i] = cfg.Overhead[i].Seconds()
				}
				over[i] += f
			}
		}
		want, ok := bruteAffine(total, cost, over, cfg.Cap, deadline)
		got, err := cfg.optimal(total, speeds, fixed, nil)
		name := fmt.Sprintf("trial %d: %d samples, speeds %v, fixed %v, %v", trial, total, speeds, fixed, cfg)
		if !ok {
			if err == nil {
				t.Fatalf("%s: got %v; brute force finds no split", name, got)
			}
			infeasible++
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkSplit(t, got, total, cfg.Cap)
		T := 0.0
		for i, x := range got {
			T = max(T, cost[i]*float64(x)+over[i])
		}
		if math.Abs(T-want) > 1e-9*want {
			t.Fatalf("%s: %v has makespan %v, brute force %v", name, got, T, want)
		}
		if known < n {
			continue // Split's fill knows no fixed parts
		}
		// Offline: the fixed parts (whole nanoseconds) added to Overhead.
		off := cfg.clone()
		off.Overhead = make([]time.Duration, n)
		fixedNs := make([]float64, n)
		for i := range n {
			d := time.Duration(math.Round(fixed[i] * 1e9))
			if cfg.Overhead != nil {
				off.Overhead[i] = cfg.Overhead[i]
			}
			off.Overhead[i] += d
			fixedNs[i] = d.Seconds()
		}
		viaSplit, err1 := off.Split(total, speeds, nil)
		viaModel, err2 := cfg.optimal(total, speeds, fixedNs, nil)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: offline Split: %v; hub's rule: %v", name, err1, err2)
		}
		ms := func(x []int) float64 {
			T := 0.0
			for i := range x {
				o := fixedNs[i]
				if cfg.Overhead != nil {
					o += cfg.Overhead[i].Seconds()
				}
				T = max(T, cost[i]*float64(x[i])+o)
			}
			return T
		}
		if a, b := ms(viaSplit), ms(viaModel); math.Abs(a-b) > 1e-9*b {
			t.Fatalf("%s: offline Split %v (makespan %v), the hub's rule %v (%v)", name, viaSplit, a, viaModel, b)
		}
	}
	if fitted == 0 || proportional == 0 || unmeasured == 0 || infeasible == 0 {
		t.Errorf("workers fitted %d, proportional %d, unmeasured %d; infeasible rounds %d: want every kind", fitted, proportional, unmeasured, infeasible)
	}
}

// shareRun runs rounds of LB-BSP against a real hub with the share rule
// share: every worker reports its last share's compute time from its
// model (computed, not slept) and asks for its next share. It returns
// every round's shares, up to the first round that failed and its error.
func shareRun(t *testing.T, workers []affineWorker, total, rounds int, share ShareConfig) ([][]int, error) {
	t.Helper()
	out, _, _, err := shareRunWith(t, len(workers), total, rounds, share, func(_, w, x int) time.Duration { return workers[w].compute(x) })
	return out, err
}

// shareRunWith is shareRun with each report's compute time from
// compute(round, worker, share); it also returns the clients and the hub.
func shareRunWith(t *testing.T, n, total, rounds int, share ShareConfig, compute func(round, w, x int) time.Duration) ([][]int, []*Client, *Hub, error) {
	t.Helper()
	cfg := DefaultHubConfig()
	cfg.Workers, cfg.JobID, cfg.Secret, cfg.ListenAddr = n, "job", []byte(testSecret), "127.0.0.1:0"
	cfg.Share = share
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	cs := dialAll(t, n, []string{h.Addr().String()}, 1<<10)
	shares := make([]int, n) // nothing to report before the first round
	var out [][]int
	for round := range rounds {
		next := make([]int, n)
		err := each(n, func(w int) error {
			var d time.Duration
			if shares[w] > 0 {
				d = compute(round, w, shares[w])
			}
			var err error
			next[w], err = cs[w].Share(t.Context(), total, shares[w], d)
			return err
		})
		if err != nil {
			return out, cs, h, fmt.Errorf("round %d: %w", round, err)
		}
		shares = next
		out = append(out, next)
	}
	return out, cs, h, nil
}

// TestHubSharesDeadlineMiss: a deadline 10 % above the optimum, met at the
// workers' true costs, and a slow spell of worker 1 (three times its cost
// for a few rounds) that no split can meet it through. Under MissFail the
// job's share request fails with the deadline's error; under MissRelax
// (the default) every round is answered, the spell's rounds are split for
// the least makespan and counted the same on every worker
// (Client.DeadlineRelaxed), and once the spell has passed the split meets
// the deadline again.
func TestHubSharesDeadlineMiss(t *testing.T) {
	ms := time.Millisecond
	workers := []affineWorker{{fixed: 0.002, perSample: 0.0002}, {fixed: 0.004, perSample: 0.0008}, {fixed: 0.001, perSample: 0.0004}}
	const total, rounds, spellFrom, spellTo = 120, 40, 15, 19
	cost, fixed := make([]float64, 3), make([]float64, 3)
	for i, w := range workers {
		cost[i], fixed[i] = w.perSample, w.fixed
	}
	best, ok := bruteAffine(total, cost, fixed, nil, 0)
	if !ok {
		t.Fatal("no split")
	}
	compute := func(round, w, x int) time.Duration {
		d := workers[w].compute(x)
		if w == 1 && round >= spellFrom && round <= spellTo {
			d *= 3
		}
		return d
	}
	makespan := func(x []int) float64 {
		T := 0.0
		for i := range x {
			T = max(T, cost[i]*float64(x[i])+fixed[i])
		}
		return T
	}
	share := ShareConfig{Rule: ShareOptimal, Deadline: time.Duration(best * 1.1 * 1e9), Miss: MissFail}
	if _, _, _, err := shareRunWith(t, 3, total, rounds, share, compute); err == nil || !strings.Contains(err.Error(), "infeasible: deadline") {
		t.Fatalf("miss=fail: %v, want the deadline's error", err)
	}
	share.Miss = MissRelax
	out, cs, hub, err := shareRunWith(t, 3, total, rounds, share, compute)
	if err != nil {
		t.Fatalf("miss=relax: %v", err)
	}
	relaxed := cs[0].DeadlineRelaxed()
	if hs := hub.Stats().DeadlineRelaxed; hs != relaxed {
		t.Fatalf("the hub counted %d relaxed rounds, worker 0 %d", hs, relaxed)
	}
	for w, c := range cs {
		if c.DeadlineRelaxed() != relaxed {
			t.Fatalf("worker %d counted %d relaxed rounds, worker 0 %d", w, c.DeadlineRelaxed(), relaxed)
		}
	}
	if relaxed == 0 || relaxed > rounds-spellFrom {
		t.Fatalf("%d relaxed rounds for a spell of %d: %v", relaxed, spellTo-spellFrom+1, out)
	}
	for _, X := range out[rounds-5:] {
		checkSplit(t, X, total, nil)
		if T := makespan(X); T > share.Deadline.Seconds() {
			t.Fatalf("after the spell: %v takes %v, deadline %v (rounds %v)", X, time.Duration(T*1e9).Round(ms/100), share.Deadline, out)
		}
	}
	t.Logf("best %.2fms, deadline %v, %d rounds relaxed, last split %v", best*1e3, share.Deadline, relaxed, out[rounds-1])
}

// TestHubSharesFixedCost: workers whose compute is a fixed part plus a
// per-sample part, some of them also paying a declared overhead outside
// it, run LB-BSP against real hubs. With the optimal rule the shares
// settle, and stay, on a split whose makespan under the workers' true
// costs is the optimum (brute force) and at most the proportional rule's
// settled split's plus one sample's time; and given a deadline between
// the two, every round is answered and the settled split meets it, where
// the proportional split misses it.
func TestHubSharesFixedCost(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		workers []affineWorker
		over    []time.Duration
		total   int
	}{
		{"two stragglers with a declared overhead",
			[]affineWorker{{0.001, 0.00015}, {0.001, 0.00015}, {0.002, 0.0006}, {0.002, 0.0006}},
			[]time.Duration{0, 0, 2 * ms, 2 * ms}, 64},
		{"a worker whose fixed cost dominates",
			[]affineWorker{{0.001, 0.0002}, {0.001, 0.0002}, {0.02, 0.00005}},
			[]time.Duration{0, 0, 0}, 200},
		{"the straggler as the study has it: 4x in both parts, on 2 ranks",
			[]affineWorker{{0.0005, 0.00013}, {0.002, 0.00052}},
			[]time.Duration{0, 5 * ms}, 64},
	}
	rng := rand.New(rand.NewPCG(37, 11))
	for k := range 16 {
		n := 2 + rng.IntN(4)
		c := struct {
			name    string
			workers []affineWorker
			over    []time.Duration
			total   int
		}{name: fmt.Sprintf("random %d", k), total: 2*n + rng.IntN(100)}
		for range n {
			c.workers = append(c.workers, affineWorker{0.005 * rng.Float64(), 0.00005 + 0.001*rng.Float64()})
			c.over = append(c.over, time.Duration(rng.IntN(3))*ms)
		}
		cases = append(cases, c)
	}
	const rounds = 40
	deadlines := 0
	for _, tc := range cases {
		n := len(tc.workers)
		cost, fixed := make([]float64, n), make([]float64, n)
		oneSample := 0.0
		for i, w := range tc.workers {
			cost[i], fixed[i] = w.perSample, w.fixed+tc.over[i].Seconds()
			oneSample = max(oneSample, w.perSample)
		}
		// The true makespan, with the overheads paid.
		makespan := func(x []int) float64 {
			T := 0.0
			for i := range x {
				T = max(T, cost[i]*float64(x[i])+fixed[i])
			}
			return T
		}
		best, ok := bruteAffine(tc.total, cost, fixed, nil, 0)
		if !ok {
			t.Fatalf("%s: no split", tc.name)
		}

		prop, err := shareRun(t, tc.workers, tc.total, rounds, ShareConfig{})
		if err != nil {
			t.Fatalf("%s: proportional: %v", tc.name, err)
		}
		P := prop[rounds-1]
		opt, err := shareRun(t, tc.workers, tc.total, rounds, ShareConfig{Rule: ShareOptimal, Overhead: tc.over})
		if err != nil {
			t.Fatalf("%s: optimal: %v", tc.name, err)
		}
		// Settled, and staying there: each of the last rounds is within
		// one sample's time of the optimum (a worker whose share never
		// moved enough keeps the proportional estimate, which may cost a
		// sample's placement; ties may alternate).
		for _, O := range opt[rounds-10:] {
			checkSplit(t, O, tc.total, nil)
			if T := makespan(O); T > best+oneSample || T > makespan(P)+oneSample {
				t.Fatalf("%s: the optimal rule's last rounds %v: %v has makespan %vs; the optimum is %vs, the proportional rule's %v %vs", tc.name, opt[rounds-10:], O, T, best, P, makespan(P))
			}
		}

		// The deadline lies between the optimum and the proportional
		// split, and is one the first measured round can meet: that round
		// has one report a worker, from the even split, and is judged on
		// the proportional estimates as Split judges them (a later round
		// the models cannot meet probes instead, see splitHub).
		share := ShareConfig{Rule: ShareOptimal, Overhead: tc.over}
		even, err := share.Split(tc.total, make([]float64, n), nil)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]float64, n)
		for i, x := range even {
			var sp Speed
			sp.Observe(x, tc.workers[i].compute(x))
			first[i] = sp.Rate()
		}
		x1, err := share.Split(tc.total, first, nil)
		if err != nil {
			t.Fatal(err)
		}
		T1 := 0.0
		for i, x := range x1 {
			T1 = max(T1, float64(x)/first[i]+tc.over[i].Seconds())
		}
		D := max((best+makespan(P))/2, T1*(1+1e-6))
		if makespan(P) <= D {
			continue // the proportional split is optimal too, or meets what the first round needs
		}
		deadlines++
		share.Deadline = time.Duration(D * 1e9)
		dl, err := shareRun(t, tc.workers, tc.total, rounds, share)
		if err != nil {
			t.Fatalf("%s: deadline %v: %v (shares %v)", tc.name, share.Deadline, err, dl)
		}
		for _, X := range dl[rounds-10:] {
			if T := makespan(X); T > share.Deadline.Seconds() || T > makespan(P)+oneSample {
				t.Fatalf("%s: deadline %v: the optimal rule's last rounds %v: %v takes %vs; the proportional split %v %vs", tc.name, share.Deadline, dl[rounds-10:], X, T, P, makespan(P))
			}
		}
	}
	if deadlines < 6 {
		t.Errorf("only %d cases had a deadline between the optimum and the proportional split", deadlines)
	}
}

// TestProbeShare: the probe's share is the nearest that separates the
// fit, above from first, as a scan over every share finds it.
func TestProbeShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 12))
	found := [2]int{}
	for trial := range 3000 {
		var f costFit
		base := 1 + rng.IntN(200)
		for range rng.IntN(6) {
			x := base
			if rng.IntN(3) == 0 {
				x = max(1, base+rng.IntN(9)-4)
			}
			f.observe(x, time.Duration(1+rng.IntN(1e6)))
		}
		hi := 1 + rng.IntN(400)
		from := 1 + rng.IntN(hi)
		want, wok := 0, false
		for u := from + 1; u <= hi && !wok; u++ {
			if f.separatesWith(u) {
				want, wok = u, true
			}
		}
		for u := from - 1; u >= 1 && !wok; u-- {
			if f.separatesWith(u) {
				want, wok = u, true
			}
		}
		if f.w == 0 {
			wok = false
		}
		got, ok := f.probeShare(from, hi)
		if got != want || ok != wok {
			t.Fatalf("trial %d: probeShare(%d, %d) = %d, %v; the scan finds %d, %v (fit %+v)", trial, from, hi, got, ok, want, wok, f)
		}
		if ok {
			found[b2i(got > from)]++
		}
	}
	if found[0] == 0 || found[1] == 0 {
		t.Errorf("probes below %d, above %d: want both", found[0], found[1])
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCoreDeadlineProbe: a round whose deadline the hub's models cannot
// meet fails, as Split fails on the same speeds, unless some worker's fit
// is probing (unfitted after two reports): the round is then a probe,
// split without the deadline so that one more fit separates once its
// shares are reported. So probes are at most one per worker, and a
// failure comes only when no fit is probing. Random affine workers and
// deadlines from 0.9 to 1.3 times the true optimum, some workers near
// copies of each other (their shares barely move).
func TestCoreDeadlineProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 13))
	var probes, failures, answered int
	for trial := range 300 {
		n := 1 + rng.IntN(6)
		total := n + rng.IntN(200)
		ws := make([]affineWorker, n)
		cost, fixed := make([]float64, n), make([]float64, n)
		clones := rng.IntN(2) == 0 // near copies of one worker, whose shares barely move
		base := affineWorker{0.005 * rng.Float64(), 0.00005 + 0.001*rng.Float64()}
		for i := range ws {
			ws[i] = affineWorker{0.005 * rng.Float64(), 0.00005 + 0.001*rng.Float64()}
			if clones && i > 0 {
				ws[i] = affineWorker{base.fixed * (0.97 + 0.06*rng.Float64()), base.perSample * (0.97 + 0.06*rng.Float64())}
			}
			cost[i], fixed[i] = ws[i].perSample, ws[i].fixed
		}
		best, _ := bruteAffineGreedy(total, cost, fixed)
		c := newCore(n, false, 0.3)
		c.split = ShareConfig{Rule: ShareOptimal, Deadline: time.Duration(best * (0.9 + 0.4*rng.Float64()) * 1e9), Miss: MissFail}
		joinAll(t, c)
		shares := make([]int, n)
		probed := 0
		for clock := range n + 8 {
			var got map[int]message
			for w := range n {
				var d time.Duration
				if shares[w] > 0 {
					d = ws[w].compute(shares[w])
				}
				out, _ := c.request(w, &message{Type: msgShare, ID: uint32(w), Clock: uint32(clock), Count: uint64(total), Samples: uint32(shares[w]), Nanos: int64(d)})
				if w == n-1 {
					got = byWorker(t, out)
				}
			}
			probing := false
			for i := range n {
				probing = probing || c.fits[i].probing()
			}
			if err := errOf(got[0]); err != nil {
				if clock == 0 || !strings.Contains(err.Error(), "deadline") || probing {
					t.Fatalf("trial %d: round %d failed (a fit probing: %v): %v", trial, clock, probing, err)
				}
				failures++
				break
			}
			for w := range n {
				shares[w] = int(got[w].Count)
			}
			checkSplit(t, shares, total, nil)
			if clock == 0 {
				continue
			}
			answered++
			// Under the models the hub holds now (this round's reports
			// in), did the split meet the deadline? If not, it was a probe.
			meets := true
			for i := range n {
				speed, f := c.fits[i].model(c.speeds[i].Rate())
				meets = meets && 1/speed*float64(shares[i])+f <= c.split.Deadline.Seconds()*(1+1e-9)
			}
			if meets {
				continue
			}
			probes++
			probed++
			separates := false
			for i := range n {
				separates = separates || c.fits[i].probing() && c.fits[i].separatesWith(shares[i])
			}
			if !probing || !separates || probed > n {
				t.Fatalf("trial %d: round %d: probe %v (probe %d of %d workers): a fit probing %v, separates one %v", trial, clock, shares, probed, n, probing, separates)
			}
		}
	}
	if probes == 0 || failures == 0 || answered == 0 {
		t.Errorf("%d probes, %d failures, %d rounds answered: want every kind", probes, failures, answered)
	}
}

// bruteAffineGreedy is the smallest makespan of a split of total with
// x_i ≥ 1 and times cost_i·x_i + fixed_i, no caps: the least time, among
// those a worker reaches, by which the workers can hold the batch.
func bruteAffineGreedy(total int, cost, fixed []float64) (float64, bool) {
	best := math.Inf(1)
	for i := range cost {
		for k := 1; k <= total; k++ {
			T := cost[i]*float64(k) + fixed[i]
			if T >= best {
				break
			}
			sum := 0
			for j := range cost {
				m := 0
				for cost[j]*float64(m+1)+fixed[j] <= T {
					m++
				}
				if m < 1 {
					sum = -1
					break
				}
				sum += m
			}
			if sum >= total {
				best = T
			}
		}
	}
	return best, !math.IsInf(best, 1)
}

// TestSplitHubProbe: the probe rule on the hub's fits directly. Workers
// have reported once (the proportional estimate), twice at shares too
// close to separate their fits (probing), or enough to be fitted. When
// the models meet the deadline the round is the optimal rule's; when
// they do not, it fails unless a fit is probing, and a probe's split
// separates a probing fit.
func TestSplitHubProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 14))
	var probes, failures, plain int
	for trial := range 2000 {
		n := 1 + rng.IntN(6)
		total := n + rng.IntN(150)
		speeds, fits := make([]Speed, n), make([]costFit, n)
		who := make([]int, n)
		for i := range n {
			who[i] = i
			w := affineWorker{0.005 * rng.Float64(), 0.00005 + 0.001*rng.Float64()}
			x := 1 + rng.IntN(total)
			report := func(x int) {
				speeds[i].Observe(x, w.compute(x))
				fits[i].observe(x, w.compute(x))
			}
			switch rng.IntN(3) {
			case 0:
				report(x)
			case 1:
				report(x)
				report(x + x/30)
			default:
				report(x)
				report(2*x + 3)
			}
		}
		cfg := ShareConfig{Rule: ShareOptimal}
		rates, fixed := make([]float64, n), make([]float64, n)
		for i := range n {
			rates[i], fixed[i] = fits[i].model(speeds[i].Rate())
		}
		free, err := cfg.optimal(total, rates, fixed, nil)
		if err != nil {
			t.Fatal(err)
		}
		T := 0.0
		for i, x := range free {
			T = max(T, float64(x)/rates[i]+fixed[i])
		}
		cfg.Deadline = time.Duration(T * (0.5 + rng.Float64()) * 1e9)
		want, werr := cfg.optimal(total, rates, fixed, nil)
		cfg.Miss = MissFail
		got, relaxed, err := cfg.splitHub(total, speeds, fits, who)
		if relaxed {
			t.Fatalf("trial %d: relaxed under MissFail", trial)
		}
		// MissRelax: the same answer where one is given, and the least
		// makespan where MissFail fails.
		cfg.Miss = MissRelax
		rgot, rrelaxed, rerr := cfg.splitHub(total, speeds, fits, who)
		if err == nil && (rerr != nil || rrelaxed || fmt.Sprint(rgot) != fmt.Sprint(got)) {
			t.Fatalf("trial %d: MissRelax gave %v %v %v where MissFail gave %v", trial, rgot, rrelaxed, rerr, got)
		}
		if err != nil {
			least := ShareConfig{Rule: ShareOptimal, Weights: assign.Weights{Time: 1}}
			want, _, _ := least.splitHub(total, speeds, fits, who)
			if rerr != nil || !rrelaxed || fmt.Sprint(rgot) != fmt.Sprint(want) {
				t.Fatalf("trial %d: MissRelax gave %v %v %v, want the least makespan %v, relaxed", trial, rgot, rrelaxed, rerr, want)
			}
		}
		probing := false
		for i := range n {
			probing = probing || fits[i].probing()
		}
		name := fmt.Sprintf("trial %d: %d samples, %d workers, deadline %v", trial, total, n, cfg.Deadline)
		switch {
		case werr == nil:
			plain++
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: the models meet the deadline with %v; the hub gave %v, %v", name, want, got, err)
			}
		case err != nil:
			failures++
			if !strings.HasPrefix(err.Error(), werr.Error()+" (hub 0's models of compute per iteration, Share.Overhead not included: worker 0 ") || !errors.Is(err, assign.ErrInfeasible) {
				t.Fatalf("%s: failed with %v, want the deadline's error %v and the models", name, err, werr)
			}
			// With a fit probing, a probe may still find no split: no
			// share near enough separates, or the others cannot absorb
			// the share it holds a worker at (one worker holds the batch).
		default:
			probes++
			if !probing {
				t.Fatalf("%s: the models cannot meet the deadline and no fit is probing, yet the hub split %v", name, got)
			}
			checkSplit(t, got, total, nil)
			separates := false
			for i := range n {
				separates = separates || fits[i].probing() && fits[i].separatesWith(got[i])
			}
			if !separates {
				t.Fatalf("%s: probe %v separates no probing fit", name, got)
			}
		}
	}
	if probes == 0 || failures == 0 || plain == 0 {
		t.Errorf("%d probes, %d failures, %d rounds within the deadline: want every kind", probes, failures, plain)
	}
}

// TestDescribeModels: a deadline's error words each worker's model, as
// fitted, proportional or unmeasured, for at most eight workers.
func TestDescribeModels(t *testing.T) {
	fits := make([]costFit, 10)
	fits[1].observe(10, 20*time.Millisecond)
	fits[1].observe(30, 40*time.Millisecond) // fitted: 10ms + 1ms a sample
	who := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	speeds, fixed := make([]float64, 10), make([]float64, 10)
	for j := range who {
		speeds[j] = 500 // 2ms a sample
	}
	speeds[0] = 0
	speeds[1], fixed[1] = fits[1].model(0)
	got := describeModels(who, speeds, fixed, fits)
	for _, part := range []string{"worker 0 unmeasured,", "worker 1 10ms + 1ms a sample,", "worker 7 2ms a sample (proportional) …"} {
		if !strings.Contains(got, part) {
			t.Errorf("%q lacks %q", got, part)
		}
	}
	if strings.Contains(got, "worker 8") || strings.Count(got, "(proportional)") != 6 {
		t.Errorf("%q: want workers 2-7 proportional and none after worker 7", got)
	}
}

// FuzzCostFit: whatever a worker reports (the samples and nanoseconds of
// a share request come off the wire), the fit's model stays finite, with
// a positive per-sample part and a fixed part within its clamps, the
// optimal rule accepts it, and a probe's share is within its bounds and
// separates the fit.
func FuzzCostFit(f *testing.F) {
	pair := func(samples uint32, nanos int64) []byte {
		b := make([]byte, 12)
		binary.LittleEndian.PutUint32(b, samples)
		binary.LittleEndian.PutUint64(b[4:], uint64(nanos))
		return b
	}
	f.Add(append(pair(32, 5e6), pair(6, 2e6)...))
	f.Add(append(pair(1, 1), pair(math.MaxUint32, math.MaxInt64)...))
	f.Add(append(append(pair(100, 1e9), pair(100, -1)...), pair(0, 1e9)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var fit costFit
		var sp Speed
		for k := 0; len(data) >= 12 && k < 64; k++ { // 64 reports: the solver runs on each
			samples := binary.LittleEndian.Uint32(data)
			nanos := int64(binary.LittleEndian.Uint64(data[4:]))
			data = data[12:]
			fit.observe(int(samples), time.Duration(nanos))
			sp.Observe(int(samples), time.Duration(nanos))
			speed, fixed := fit.model(sp.Rate())
			if fit.n == 0 {
				continue
			}
			if !(speed > 0) || math.IsInf(speed, 0) || !(fixed >= 0) || fixed > (1-fitMinPerSample)*fit.my*(1+1e-12) {
				t.Fatalf("after (%d, %d): model %v/s + %vs (mean time %vs)", samples, nanos, speed, fixed, fit.my)
			}
			if _, err := (ShareConfig{Rule: ShareOptimal}).optimal(2, []float64{speed, 1}, []float64{fixed, 0}, nil); err != nil {
				t.Fatalf("after (%d, %d): model %v/s + %vs: %v", samples, nanos, speed, fixed, err)
			}
			hi := 1 + int(samples%1000)
			from := 1 + int(nanos&0x7fffffff)%hi
			if s, ok := fit.probeShare(from, hi); ok && (s < 1 || s > hi || s == from || !fit.separatesWith(s)) {
				t.Fatalf("probeShare(%d, %d) = %d", from, hi, s)
			}
		}
	})
}
