package assign

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// feasible checks x against p's constraints as the package doc states
// them, independently of bounds().
func feasible(p Problem, x []int) bool {
	S := float64(p.Samples)
	total := 0
	for i, w := range p.Workers {
		k := float64(x[i])
		if x[i] < 0 || k < w.Floor*S-1e-9 || (w.Ceiling > 0 && k > w.Ceiling*S+1e-9) || (w.Cap > 0 && x[i] > w.Cap) {
			return false
		}
		if p.Deadline > 0 && w.Cost*k+w.Overhead > p.Deadline*(1+DeadlineTol) {
			return false
		}
		total += x[i]
	}
	return total >= p.Samples && total <= max(p.Samples, p.MaxSamples)
}

// refObjective is the objective written out again.
func refObjective(p Problem, x []int) float64 {
	T, res, n := 0.0, 0.0, 0
	for i, w := range p.Workers {
		t := w.Cost*float64(x[i]) + w.Overhead
		if t > T {
			T = t
		}
		res += w.Price * t
		n += x[i]
	}
	return p.Weights.Time*T + p.Weights.Resource*res - p.Weights.Accuracy*float64(n)
}

// bruteForce enumerates every integer split of every allowed total.
func bruteForce(p Problem) (best []int, obj float64, ok bool) {
	n := len(p.Workers)
	x := make([]int, n)
	obj = math.Inf(1)
	hi := max(p.Samples, p.MaxSamples)
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == n-1 {
			x[i] = left
			if feasible(p, x) {
				if o := refObjective(p, x); o < obj-1e-12 {
					obj, best, ok = o, append([]int(nil), x...), true
				}
			}
			return
		}
		for k := 0; k <= left; k++ {
			x[i] = k
			rec(i+1, left-k)
		}
	}
	for total := p.Samples; total <= hi; total++ {
		rec(0, total)
	}
	return best, obj, ok
}

// proportional is LB-BSP's heuristic (ps.Shares): x_i ∝ speed 1/c_i,
// largest remainder; a worker of cost 0 (no measurable speed) counts as
// the mean speed of the others, as ps.Shares treats an unknown speed.
func proportional(total int, ws []Worker) []int {
	n := len(ws)
	v := make([]float64, n)
	known, sum := 0, 0.0
	for i, w := range ws {
		if w.Cost > 0 {
			v[i] = 1 / w.Cost
			known++
			sum += v[i]
		}
	}
	fill := 1.0
	if known > 0 {
		fill = sum / float64(known)
	}
	all := 0.0
	for i := range v {
		if v[i] == 0 {
			v[i] = fill
		}
		all += v[i]
	}
	x := make([]int, n)
	given := 0
	rems := make([]float64, n)
	for i := range v {
		e := float64(total) * v[i] / all
		x[i] = int(math.Floor(e))
		rems[i] = e - float64(x[i])
		given += x[i]
	}
	for given < total {
		j := 0
		for i := range rems {
			if rems[i] > rems[j] {
				j = i
			}
		}
		x[j]++
		rems[j] = -1
		given++
	}
	return x
}

func randProblem(r *rand.Rand) Problem {
	n := 1 + r.IntN(5)
	maxS := 40
	if n == 5 {
		maxS = 22
	}
	p := Problem{Samples: r.IntN(maxS + 1), Workers: make([]Worker, n)}
	if r.IntN(4) == 0 {
		p.MaxSamples = p.Samples + r.IntN(8)
	}
	round := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	for i := range p.Workers {
		w := &p.Workers[i]
		if r.IntN(10) > 0 {
			w.Cost = round(0.01 + r.Float64())
		}
		if r.IntN(3) == 0 {
			w.Overhead = round(r.Float64() * 2)
		}
		if r.IntN(3) == 0 {
			w.Cap = r.IntN(p.Samples/2 + 3)
		}
		if r.IntN(4) == 0 {
			w.Floor = round(r.Float64() / float64(n+1))
		}
		if r.IntN(4) == 0 {
			w.Ceiling = round(w.Floor + r.Float64()*(1-w.Floor))
		}
		if r.IntN(2) == 0 {
			w.Price = round(r.Float64() * 3)
		}
	}
	if r.IntN(3) == 0 {
		p.Deadline = round(0.5 + r.Float64()*float64(p.Samples)/3)
	}
	p.Weights = Weights{Time: 1}
	switch r.IntN(5) {
	case 0:
		p.Weights.Resource = round(r.Float64())
	case 1:
		p.Weights = Weights{Time: round(r.Float64()), Accuracy: round(r.Float64()), Resource: round(r.Float64())}
	case 2:
		p.Weights = Weights{Resource: 1, Accuracy: round(r.Float64())}
	}
	return p
}

const tol = 1e-7

// TestAgainstBruteForce: on random small instances Solve finds the
// integer optimum of the brute force (within 1e-7), the LP bound is below
// it, the plain rounded LP solution is within RoundingBound of it, and
// LB-BSP's proportional split, when feasible, is never better.
func TestAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 1))
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	var solved, infeasible, heurCmp, heurWorse, roundedOff int
	for it := range iters {
		p := randProblem(r)
		_, bf, ok := bruteForce(p)
		a, err := Solve(p)
		if !ok {
			if !errors.Is(err, ErrInfeasible) {
				t.Fatalf("%d: %+v: brute force finds no assignment, Solve says %v %+v", it, p, err, a)
			}
			infeasible++
			continue
		}
		if err != nil {
			t.Fatalf("%d: %+v: brute force optimum %v, Solve: %v", it, p, bf, err)
		}
		solved++
		if !feasible(p, a.Samples) {
			t.Fatalf("%d: %+v: infeasible answer %+v", it, p, a)
		}
		sum := 0
		for _, k := range a.Samples {
			sum += k
		}
		if sum != a.Total || math.Abs(refObjective(p, a.Samples)-a.Objective) > tol {
			t.Fatalf("%d: inconsistent report %+v", it, a)
		}
		if !a.Exact || math.Abs(a.Objective-bf) > tol*math.Max(1, math.Abs(bf)) {
			t.Fatalf("%d: %+v: Solve %v (exact %v) %v, brute force %v", it, p, a.Objective, a.Exact, a.Samples, bf)
		}
		if a.LowerBound > bf+tol*math.Max(1, math.Abs(bf)) {
			t.Fatalf("%d: LP bound %v above the integer optimum %v", it, a.LowerBound, bf)
		}
		// The rounded LP solution alone, before the exact search.
		b, _ := p.bounds()
		xs, lpObj, err := solveLP(p, b, DefaultConfig().Tol)
		if err != nil {
			t.Fatal(err)
		}
		xr := roundShares(p, b, xs)
		if !feasible(p, xr) {
			t.Fatalf("%d: %+v: rounding broke a constraint: %v", it, p, xr)
		}
		if got, bound := refObjective(p, xr)-bf, RoundingBound(p); got > bound+tol {
			t.Fatalf("%d: %+v: rounded LP %v is %v above the optimum, bound %v", it, p, xr, got, bound)
		}
		if refObjective(p, xr) > bf+tol {
			roundedOff++
		}
		// Without the exact search: rounding plus local moves, same bound.
		na, err := Config{MaxWorkers: 8, Tol: 1e-10}.Solve(p)
		if err != nil || na.Exact || !feasible(p, na.Samples) || na.Objective-bf > RoundingBound(p)+tol || na.Objective > refObjective(p, xr)+tol {
			t.Fatalf("%d: %+v: without exact search: %+v %v (optimum %v)", it, p, na, err, bf)
		}
		if lpObj > bf+tol*math.Max(1, math.Abs(bf)) {
			t.Fatalf("%d: LP %v above integer optimum %v", it, lpObj, bf)
		}
		if h := proportional(p.Samples, p.Workers); feasible(p, h) {
			heurCmp++
			ho := refObjective(p, h)
			if a.Objective > ho+tol {
				t.Fatalf("%d: %+v: solver %v worse than LB-BSP %v (%v)", it, p, a.Objective, ho, h)
			}
			if a.Objective < ho-tol {
				heurWorse++
			}
		}
	}
	t.Logf("%d solved (rounded LP off the optimum on %d), %d infeasible; LB-BSP feasible on %d, strictly worse on %d", solved, roundedOff, infeasible, heurCmp, heurWorse)
	if solved < iters/3 || infeasible == 0 || heurWorse == 0 {
		t.Fatalf("generator lost coverage: %d solved, %d infeasible, %d heuristic losses", solved, infeasible, heurWorse)
	}
}

// TestLargeRoundingBound: on larger instances (no brute force) the answer
// is feasible, between the LP bound and the bound plus RoundingBound,
// both with the exact search and with it switched off.
func TestLargeRoundingBound(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 2))
	for it := range 40 {
		n := 2 + r.IntN(30)
		p := Problem{Samples: 1000 + r.IntN(100000), Workers: make([]Worker, n), Weights: Weights{Time: 1, Resource: r.Float64()}}
		for i := range p.Workers {
			p.Workers[i] = Worker{Cost: 1e-4 + r.Float64()*1e-2, Overhead: r.Float64() * 0.1, Price: r.Float64()}
		}
		for _, cfg := range []Config{DefaultConfig(), {MaxWorkers: 512, Tol: 1e-10, ExactBudget: 0}} {
			a, err := cfg.Solve(p)
			if err != nil {
				t.Fatalf("%d: %v", it, err)
			}
			if !feasible(p, a.Samples) || a.Total != p.Samples {
				t.Fatalf("%d: infeasible %v", it, a.Samples)
			}
			if a.Objective < a.LowerBound-1e-9 || a.Objective > a.LowerBound+RoundingBound(p)+1e-9 {
				t.Fatalf("%d: objective %v outside [%v, +%v]", it, a.Objective, a.LowerBound, RoundingBound(p))
			}
			if h := proportional(p.Samples, p.Workers); cfg.ExactBudget > 0 && a.Objective > refObjective(p, h)+1e-9 {
				t.Fatalf("%d: worse than LB-BSP: %v > %v", it, a.Objective, refObjective(p, h))
			}
		}
	}
}

func TestDegenerate(t *testing.T) {
	t.Run("zero cost worker takes the round", func(t *testing.T) {
		a, err := Solve(Problem{Samples: 10, Workers: []Worker{{Cost: 0.1}, {Cost: 0}}, Weights: Weights{Time: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Samples[1] != 10 || a.Makespan != 0 || a.Idle[0] != 0 || a.Idle[1] != 0 {
			t.Fatalf("%+v", a)
		}
	})
	t.Run("zero cost worker with a cap and overhead", func(t *testing.T) {
		a, err := Solve(Problem{Samples: 10, Workers: []Worker{{Cost: 0.1}, {Cost: 0, Cap: 4, Overhead: 0.3}}, Weights: Weights{Time: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Samples[0] != 6 || a.Samples[1] != 4 || math.Abs(a.Makespan-0.6) > 1e-12 || a.Limits[1] != LimitCap {
			t.Fatalf("%+v", a)
		}
		if math.Abs(a.Idle[1]-0.5) > 1e-12 {
			t.Fatalf("idle %v", a.Idle)
		}
	})
	t.Run("all limits bind", func(t *testing.T) {
		a, err := Solve(Problem{Samples: 12, Workers: []Worker{{Cost: 1, Cap: 3}, {Cost: 2, Cap: 4}, {Cost: 0.5, Cap: 5}}, Weights: Weights{Time: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{3, 4, 5} {
			if a.Samples[i] != want || a.Limits[i] != LimitCap {
				t.Fatalf("%+v", a)
			}
		}
		if !strings.Contains(a.Binding, "worker 1 at its capacity (4)") || !strings.Contains(a.Binding, "last: worker 1") {
			t.Fatalf("binding %q", a.Binding)
		}
	})
	t.Run("one worker", func(t *testing.T) {
		a, err := Solve(Problem{Samples: 7, Workers: []Worker{{Cost: 0.5, Overhead: 1}}, Weights: Weights{Time: 1}})
		if err != nil || a.Samples[0] != 7 || a.Makespan != 4.5 || a.Objective != 4.5 || a.Limits[0] != LimitTotal {
			t.Fatalf("%+v %v", a, err)
		}
	})
	t.Run("empty round", func(t *testing.T) {
		a, err := Solve(Problem{Samples: 0, Workers: []Worker{{Cost: 0.5, Overhead: 1}, {Cost: 1}}, Weights: Weights{Time: 1}})
		if err != nil || a.Total != 0 || a.Samples[0] != 0 || a.Samples[1] != 0 || a.Makespan != 1 || a.Idle[1] != 1 {
			t.Fatalf("%+v %v", a, err)
		}
	})
	t.Run("accuracy grows the round", func(t *testing.T) {
		p := Problem{Samples: 100, MaxSamples: 200, Workers: []Worker{{Cost: 0.01}, {Cost: 0.02}}}
		p.Weights = Weights{Time: 1, Accuracy: 0.001} // a sample is worth less than it costs
		a, err := Solve(p)
		if err != nil || a.Total != 100 {
			t.Fatalf("%+v %v", a, err)
		}
		p.Weights.Accuracy = 0.01 // worth more than 1/(1/0.01+1/0.02) s of makespan
		a, err = Solve(p)
		if err != nil || a.Total != 200 {
			t.Fatalf("%+v %v", a, err)
		}
	})
}

// TestDeadlineHeuristicMisses: the proportional split ignores overheads
// and capacities; here it misses the deadline and Solve meets it.
func TestDeadlineHeuristicMisses(t *testing.T) {
	p := Problem{
		Samples:  100,
		Workers:  []Worker{{Cost: 0.01}, {Cost: 0.01, Overhead: 0.5}},
		Deadline: 0.9,
		Weights:  Weights{Time: 1},
	}
	h := proportional(p.Samples, p.Workers)
	if h[0] != 50 || feasible(p, h) {
		t.Fatalf("heuristic %v should miss the deadline", h)
	}
	a, err := Solve(p)
	if err != nil {
		t.Fatal(err)
	}
	if a.Samples[0] != 75 || a.Samples[1] != 25 || a.Makespan > 0.9 {
		t.Fatalf("%+v", a)
	}
	// With worker 0 priced and only the resource weighed, worker 1 works
	// up to the deadline (30 samples by 0.8s).
	p.Deadline = 0.8
	p.Workers[0].Price = 1
	p.Weights = Weights{Resource: 1}
	a, err = Solve(p)
	if err != nil || a.Samples[0] != 70 || a.Samples[1] != 30 || a.Limits[1] != LimitDeadline || !strings.Contains(a.Binding, "deadline 0.8s binds") {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestInfeasible(t *testing.T) {
	w := func(c float64) Worker { return Worker{Cost: c} }
	cases := []struct {
		name string
		p    Problem
		want string
	}{
		{"capacities", Problem{Samples: 1000, Workers: []Worker{{Cost: 1, Cap: 400}, {Cost: 1, Cap: 500}}}, "capacities sum to 900 samples, the round needs 1000"},
		{"deadline floor", Problem{Samples: 1000, Deadline: 2, Workers: []Worker{w(0.01), w(0.01), w(0.01), {Cost: 0.024, Floor: 0.1}}}, "deadline 2s: worker 3 alone needs 2.4s for its floor of 100 samples"},
		{"deadline total", Problem{Samples: 1000, Deadline: 2, Workers: []Worker{w(0.01), w(0.01)}}, "deadline 2s: the workers can do 400 samples by then, the round needs 1000"},
		{"mixed limits", Problem{Samples: 101, Deadline: 1, Workers: []Worker{{Cost: 0.01, Cap: 30}, {Cost: 0.02}, {Cost: 0.001, Ceiling: 0.2}}}, "worker limits sum to 100 samples"},
		{"overhead", Problem{Samples: 10, Deadline: 2, Workers: []Worker{w(0.01), {Cost: 0.01, Overhead: 2.5}}}, "deadline 2s: worker 1's overhead alone is 2.5s"},
		{"floors above 1", Problem{Samples: 10, Workers: []Worker{{Cost: 1, Floor: 0.6}, {Cost: 1, Floor: 0.5}}}, "floors sum to 1.1 of the round, above 1"},
		{"floors round up", Problem{Samples: 3, Workers: []Worker{{Cost: 1, Floor: 0.5}, {Cost: 1, Floor: 0.5}}}, "floors sum to 4 samples, the round has 3"},
		{"floor over cap", Problem{Samples: 100, Workers: []Worker{{Cost: 1, Floor: 0.5, Cap: 40}, w(1)}}, "worker 0: floor of 50 samples exceeds its capacity of 40"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.p.Weights = Weights{Time: 1}
			_, err := Solve(c.p)
			if !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	ok := Worker{Cost: 1}
	cases := []struct {
		name string
		p    Problem
		want string
	}{
		{"no workers", Problem{Samples: 1}, "no workers"},
		{"negative samples", Problem{Samples: -1, Workers: []Worker{ok}}, "samples -1"},
		{"nan cost", Problem{Samples: 1, Workers: []Worker{{Cost: nan}}}, "worker 0: cost NaN"},
		{"inf cost", Problem{Samples: 1, Workers: []Worker{ok, {Cost: inf}}}, "worker 1: cost +Inf"},
		{"negative overhead", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Overhead: -1}}}, "overhead -1s"},
		{"negative cap", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Cap: -2}}}, "capacity -2"},
		{"floor nan", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Floor: nan}}}, "floor NaN"},
		{"ceiling 2", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Ceiling: 2}}}, "ceiling 2"},
		{"floor above ceiling", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Floor: 0.5, Ceiling: 0.4}}}, "floor 0.5 above its ceiling 0.4"},
		{"price", Problem{Samples: 1, Workers: []Worker{{Cost: 1, Price: -inf}}}, "price -Inf"},
		{"deadline", Problem{Samples: 1, Deadline: nan, Workers: []Worker{ok}}, "deadline NaN"},
		{"weights", Problem{Samples: 1, Workers: []Worker{ok}, Weights: Weights{Time: -1}}, "weights"},
		{"huge", Problem{Samples: MaxSamples + 1, Workers: []Worker{ok}}, "not in [0,"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Solve(c.p)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	if _, err := (Config{}).Solve(Problem{Samples: 1, Workers: []Worker{ok}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero config: %v", err)
	}
}
