package ps

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/assign"
)

// makespan is the slowest worker's time for shares at rates (samples/s;
// 0 counts as the mean of the others, as Shares and Split fill it) plus
// overheads (nil: none).
func makespan(shares []int, rates []float64, overhead []time.Duration) float64 {
	v := filled(rates)
	T := 0.0
	for i, x := range shares {
		t := float64(x) / v[i]
		if overhead != nil {
			t += overhead[i].Seconds()
		}
		T = max(T, t)
	}
	return T
}

// filled gives a worker with no estimate the mean of the others (1 if
// none has one).
func filled(rates []float64) []float64 {
	known, sum := 0, 0.0
	for _, r := range rates {
		if r > 0 {
			known++
			sum += r
		}
	}
	fill := 1.0
	if known > 0 {
		fill = sum / float64(known)
	}
	v := make([]float64, len(rates))
	for i, r := range rates {
		v[i] = r
		if r == 0 {
			v[i] = fill
		}
	}
	return v
}

// bruteMakespan enumerates every split of total with 1 ≤ x_i ≤ cap_i (0:
// no cap) and returns the smallest makespan, or ok false if there is none.
func bruteMakespan(total int, rates []float64, overhead []time.Duration, caps []int) (best float64, ok bool) {
	n := len(rates)
	x := make([]int, n)
	best = math.Inf(1)
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == n-1 {
			if left < 1 || len(caps) > 0 && caps[i] > 0 && left > caps[i] {
				return
			}
			x[i] = left
			if T := makespan(x, rates, overhead); T < best {
				best, ok = T, true
			}
			return
		}
		for k := 1; k <= left-(n-1-i); k++ {
			if len(caps) > 0 && caps[i] > 0 && k > caps[i] {
				break
			}
			x[i] = k
			rec(i+1, left-k)
		}
	}
	rec(0, total)
	return best, ok
}

func checkSplit(t *testing.T, shares []int, total int, caps []int) {
	t.Helper()
	sum := 0
	for i, x := range shares {
		sum += x
		if x < 1 {
			t.Fatalf("worker %d's share is %d, want at least 1 (shares %v)", i, x, shares)
		}
		if len(caps) > 0 && caps[i] > 0 && x > caps[i] {
			t.Fatalf("worker %d's share %d exceeds its cap %d (shares %v)", i, x, caps[i], shares)
		}
	}
	if sum != total {
		t.Fatalf("shares %v add up to %d, want %d", shares, sum, total)
	}
}

// TestOptimalNeverWorse: on random speeds (some not yet measured) the
// optimal rule's makespan is never above the proportional rule's, and
// every worker gets at least one sample.
func TestOptimalNeverWorse(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	opt := ShareConfig{Rule: ShareOptimal}
	strictly := 0
	for trial := range 500 {
		n := 1 + rng.IntN(9)
		rates := make([]float64, n)
		for i := range rates {
			if rng.IntN(6) > 0 {
				rates[i] = 1 + rng.Float64()*999
			}
		}
		total := n + rng.IntN(2000)
		prop, err := Shares(total, rates)
		if err != nil {
			t.Fatal(err)
		}
		got, err := opt.Split(total, rates, nil)
		if err != nil {
			t.Fatalf("trial %d: %d samples at %v: %v", trial, total, rates, err)
		}
		checkSplit(t, got, total, nil)
		po, pp := makespan(got, rates, nil), makespan(prop, rates, nil)
		if po > pp*(1+1e-9) {
			t.Fatalf("trial %d: %d samples at %v: optimal %v (makespan %v) is worse than proportional %v (%v)", trial, total, rates, got, po, prop, pp)
		}
		if po < pp*(1-1e-9) {
			strictly++
		}
	}
	if strictly == 0 {
		t.Error("the optimal rule never did strictly better than rounding proportional shares")
	}
}

// TestOptimalBruteForce: on small cases, with overheads and caps, the
// optimal rule's makespan is the smallest of every split, and it fails
// exactly when no split exists.
func TestOptimalBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 2))
	for trial := range 1500 {
		n := 1 + rng.IntN(4)
		total := n + rng.IntN(14)
		cfg := ShareConfig{Rule: ShareOptimal}
		rates := make([]float64, n)
		for i := range rates {
			if rng.IntN(8) > 0 {
				rates[i] = float64(1 + rng.IntN(20))
			}
		}
		var overhead []time.Duration
		if rng.IntN(2) == 0 {
			overhead = make([]time.Duration, n)
			for i := range overhead {
				overhead[i] = time.Duration(rng.IntN(4)) * 250 * time.Millisecond
			}
			cfg.Overhead = overhead
		}
		if rng.IntN(2) == 0 {
			cfg.Cap = make([]int, n)
			for i := range cfg.Cap {
				cfg.Cap[i] = rng.IntN(total/n + 3)
			}
		}
		if err := cfg.validate(n); err != nil {
			t.Fatal(err)
		}
		measured := false
		for _, r := range rates {
			measured = measured || r > 0
		}
		ov := overhead
		if !measured {
			ov = nil // before any estimate the overheads are left out
		}
		want, ok := bruteMakespan(total, rates, ov, cfg.Cap)
		got, err := cfg.Split(total, rates, nil)
		if !ok {
			if !errors.Is(err, assign.ErrInfeasible) {
				t.Fatalf("trial %d: %d samples at %v, caps %v: got %v, %v; want assign.ErrInfeasible", trial, total, rates, cfg.Cap, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %d samples at %v, overhead %v, caps %v: %v", trial, total, rates, ov, cfg.Cap, err)
		}
		checkSplit(t, got, total, cfg.Cap)
		if T := makespan(got, rates, ov); math.Abs(T-want) > 1e-9*want {
			t.Fatalf("trial %d: %d samples at %v, overhead %v, caps %v: %v has makespan %v, brute force %v", trial, total, rates, ov, cfg.Cap, got, T, want)
		}
	}
}

// TestOptimalBeatsProportional: with a per-worker overhead the
// proportional split leaves the fast-communicating worker idle; with a
// memory cap it overfills the fast worker. The optimal rule does neither.
func TestOptimalBeatsProportional(t *testing.T) {
	// Equal compute speeds, but worker 1 pays 1s per iteration besides.
	rates := []float64{100, 100}
	overhead := []time.Duration{0, time.Second}
	prop, _ := Shares(200, rates)
	got, err := ShareConfig{Rule: ShareOptimal, Overhead: overhead}.Split(200, rates, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 150 || got[1] != 50 {
		t.Errorf("overhead: shares %v, want [150 50]", got)
	}
	if po, pp := makespan(got, rates, overhead), makespan(prop, rates, overhead); !(po < pp) || po != 1.5 {
		t.Errorf("overhead: optimal makespan %vs, proportional %vs; want 1.5s, strictly less", po, pp)
	}

	// Worker 0 is 3x faster but holds at most 200 samples.
	rates = []float64{300, 100, 100}
	caps := []int{200, 0, 0}
	prop, _ = Shares(500, rates)
	if prop[0] <= caps[0] {
		t.Fatalf("proportional shares %v fit the cap: not a test", prop)
	}
	got, err = ShareConfig{Rule: ShareOptimal, Cap: caps}.Split(500, rates, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 200 || got[1] != 150 || got[2] != 150 {
		t.Errorf("cap: shares %v, want [200 150 150]", got)
	}
}

// TestProportionalUnchanged: the zero ShareConfig is Shares.
func TestProportionalUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 3))
	for range 300 {
		n := 1 + rng.IntN(8)
		sp := make([]float64, n)
		for i := range sp {
			sp[i] = rng.Float64() * 100
		}
		total := rng.IntN(1000)
		want, err1 := Shares(total, sp)
		got, err2 := ShareConfig{}.Split(total, sp, nil)
		if err1 != nil || err2 != nil || !equalInts(got, want) {
			t.Fatalf("Split %v, %v; Shares %v, %v", got, err2, want, err1)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOptimalErrors: what the solver cannot do is an error, never the
// proportional split.
func TestOptimalErrors(t *testing.T) {
	rates := []float64{100, 50}
	for _, tc := range []struct {
		name  string
		cfg   ShareConfig
		total int
		want  string
		is    error
	}{
		{"caps", ShareConfig{Rule: ShareOptimal, Cap: []int{100, 100}}, 300, "capacities sum to 200 samples, the round needs 300", assign.ErrInfeasible},
		{"deadline", ShareConfig{Rule: ShareOptimal, Deadline: time.Second}, 300, "deadline 1s", assign.ErrInfeasible},
		{"small batch", ShareConfig{Rule: ShareOptimal}, 1, "cannot give each of 2 workers the one sample", nil},
	} {
		got, err := tc.cfg.Split(tc.total, rates, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: got %v, %v; want an error with %q", tc.name, got, err, tc.want)
		}
	}
	// The first round has no speed yet: its deadline is not checked.
	if got, err := (ShareConfig{Rule: ShareOptimal, Deadline: time.Second}).Split(300, []float64{0, 0}, nil); err != nil || got[0] != 150 {
		t.Errorf("unmeasured round: %v, %v; want an even split", got, err)
	}
	// Elastic: the solver's workers are named by their hub numbers.
	_, err := ShareConfig{Rule: ShareOptimal, Cap: []int{10, 10, 10}}.Split(50, []float64{1, 1}, []int{0, 2})
	if err == nil || !strings.Contains(err.Error(), "are workers [0 2]") {
		t.Errorf("got %v, want the worker numbers named", err)
	}
}

// TestShareConfigInvalid: a hub refuses a share config it cannot use.
func TestShareConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  ShareConfig
		want string
	}{
		{ShareConfig{Rule: 7}, "unknown share rule 7"},
		{ShareConfig{Cap: []int{1, 2, 3}}, "optimal share rule only"},
		{ShareConfig{Deadline: time.Second}, "optimal share rule only"},
		{ShareConfig{Rule: ShareOptimal, Cap: []int{1, 2}}, "Share.Cap has 2 entries, want one per worker (3)"},
		{ShareConfig{Rule: ShareOptimal, Overhead: []time.Duration{0, -1, 0}}, "Overhead of worker 1 is negative"},
		{ShareConfig{Rule: ShareOptimal, Cap: []int{0, 0, -5}}, "Cap of worker 2 is negative"},
		{ShareConfig{Rule: ShareOptimal, Price: []float64{0, math.NaN(), 0}}, "Price of worker 1 is NaN"},
		{ShareConfig{Rule: ShareOptimal, Deadline: -time.Second}, "Deadline is negative"},
		{ShareConfig{Miss: MissFail}, "optimal share rule only"},
		{ShareConfig{Rule: ShareOptimal, Deadline: time.Second, Miss: 9}, "unknown deadline miss rule 9"},
		{ShareConfig{Rule: ShareOptimal, Miss: MissFail}, "Share.Miss is fail without a Deadline"},
		{ShareConfig{Rule: ShareOptimal, Weights: assign.Weights{Time: math.Inf(1)}}, "must be finite"},
		{ShareConfig{Rule: ShareOptimal, Weights: assign.Weights{Time: 1, Accuracy: 0.5}}, "Accuracy is 0.5"},
	} {
		cfg := DefaultHubConfig()
		cfg.Workers, cfg.JobID, cfg.Secret, cfg.Share = 3, "job", []byte(testSecret), tc.cfg
		_, err := NewHub(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	cfg := DefaultHubConfig()
	cfg.Workers, cfg.JobID, cfg.Secret = 200, "job", []byte(testSecret)
	cfg.Share.Rule = ShareOptimal
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "at most 128 workers") {
		t.Errorf("200 workers: got %v", err)
	}
	for _, name := range []string{"proportional", "optimal"} {
		if r, err := ParseShareRule(name); err != nil || r.String() != name {
			t.Errorf("ParseShareRule(%q) = %v, %v", name, r, err)
		}
	}
	if _, err := ParseShareRule("fastest"); err == nil {
		t.Error("ParseShareRule took an unknown rule")
	}
	if _, err := (ShareConfig{Rule: 7}).Split(10, []float64{1, 2}, nil); err == nil || !strings.Contains(err.Error(), "unknown share rule 7") {
		t.Errorf("Split with rule 7: got %v", err)
	}
}

// TestCoreSharesOptimal follows TestSharesFollowSpeed on the hub's core:
// simulated workers report each iteration's compute time at their true
// rates, and with the optimal rule the rounds settle on the split that
// minimises compute plus overhead, no slower than proportional shares
// at the same estimates. A lost worker leaves the round to the others,
// whose caps are still their own.
func TestCoreSharesOptimal(t *testing.T) {
	rates := []float64{1000, 1000, 1000, 250} // worker 3 is 4x slower
	overhead := []time.Duration{0, 0, 200 * time.Millisecond, 0}
	caps := []int{0, 300, 0, 0}
	const total = 1024
	c := newCore(len(rates), true, 1)
	c.split = ShareConfig{Rule: ShareOptimal, Overhead: overhead, Cap: caps}
	joinAll(t, c)
	shares := make([]int, len(rates))
	for clock := range 10 {
		var got map[int]message
		for w := range rates {
			d := time.Duration(float64(shares[w]) / rates[w] * float64(time.Second))
			out, _ := c.request(w, &message{Type: msgShare, ID: uint32(w), Clock: uint32(clock), Count: total, Samples: uint32(shares[w]), Nanos: int64(d)})
			if w < len(rates)-1 && len(out) != 0 {
				t.Fatal("shares answered before every worker asked")
			}
			if w == len(rates)-1 {
				got = byWorker(t, out)
			}
		}
		for w := range rates {
			if err := errOf(got[w]); err != nil {
				t.Fatal(err)
			}
			shares[w] = int(got[w].Count)
		}
		checkSplit(t, shares, total, caps)
	}
	want, _ := bruteMakespanLarge(total, rates, overhead, caps)
	if T := makespan(shares, rates, overhead); math.Abs(T-want) > 1e-9 {
		t.Errorf("settled on %v, makespan %vs; the optimum is %vs", shares, T, want)
	}
	prop, _ := Shares(total, rates)
	if T, P := makespan(shares, rates, overhead), makespan(prop, rates, overhead); !(T < P) {
		t.Errorf("optimal makespan %vs, proportional %v %vs: want strictly less", T, prop, P)
	}

	// Worker 1 (cap 300) and worker 3 ask, then 0 and 2 are lost: the
	// batch goes to 1 and 3, and worker 1's cap still holds.
	for _, w := range []int{1, 3} {
		if out, _ := c.request(w, &message{Type: msgShare, ID: uint32(w), Clock: 10, Count: total}); len(out) != 0 {
			t.Fatal("answered early")
		}
	}
	c.leave(0, false, workerLost(0, "gone"))
	got := byWorker(t, c.leave(2, false, workerLost(2, "gone")))
	if got[1].Count != 300 || got[3].Count != total-300 {
		t.Errorf("after the loss: shares %d and %d, want 300 and %d", got[1].Count, got[3].Count, total-300)
	}
}

// bruteMakespanLarge is the optimum of a split by 1-sample steps of a
// greedy fill: for a makespan T every worker takes the most it can by T,
// so the optimum is the least T, among the times a worker reaches, at
// which the workers can hold the whole batch.
func bruteMakespanLarge(total int, rates []float64, overhead []time.Duration, caps []int) (float64, bool) {
	var cands []float64
	for i, r := range rates {
		for k := 1; k <= total; k++ {
			cands = append(cands, float64(k)/r+overhead[i].Seconds())
		}
	}
	best := math.Inf(1)
	for _, T := range cands {
		if T >= best {
			continue
		}
		sum, floors := 0, true
		for i, r := range rates {
			k := int(math.Floor((T-overhead[i].Seconds())*r + 1e-9))
			if caps[i] > 0 {
				k = min(k, caps[i])
			}
			floors = floors && k >= 1
			sum += k
		}
		if floors && sum >= total {
			best = T
		}
	}
	return best, !math.IsInf(best, 1)
}

// TestHubSharesOptimal: over TCP, a hub configured with the optimal rule
// answers Client.Share with the split that absorbs a worker's overhead,
// and a batch above the caps comes back to every worker as an error.
func TestHubSharesOptimal(t *testing.T) {
	const n, total = 3, 900
	cfg := DefaultHubConfig()
	cfg.Workers, cfg.JobID, cfg.Secret, cfg.ListenAddr = n, "job", []byte(testSecret), "127.0.0.1:0"
	cfg.Share = ShareConfig{Rule: ShareOptimal, Overhead: []time.Duration{0, 0, 300 * time.Millisecond}, Cap: []int{0, 0, 1000}}
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	cs := dialAll(t, n, []string{h.Addr().String()}, 1<<10)
	cfg.Share.Cap[2] = 1 // the hub took a copy
	ask := func(total int, shares []int) ([]int, error) {
		next := make([]int, n)
		err := each(n, func(w int) error {
			var err error
			next[w], err = cs[w].Share(context.Background(), total, shares[w], time.Duration(shares[w])*time.Millisecond)
			return err
		})
		return next, err
	}
	shares := []int{total / n, total / n, total / n}
	for range 3 {
		if shares, err = ask(total, shares); err != nil {
			t.Fatal(err)
		}
	}
	// 1000 samples/s each; worker 2 pays 0.3s: x0 = x1 = x2 + 300.
	if shares[0] != 400 || shares[1] != 400 || shares[2] != 100 {
		t.Errorf("shares %v, want [400 400 100]", shares)
	}
	_, err = ask(0, shares)
	var he *HubError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "cannot give each of 3 workers") {
		t.Errorf("a batch of 0: got %v, want a hub error", err)
	}
}
