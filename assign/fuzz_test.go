package assign

import (
	"errors"
	"math"
	"testing"
)

// FuzzSolve: no input panics; every error wraps ErrInvalid, ErrInfeasible
// or ErrSolver; every answer meets the constraints and adds up.
func FuzzSolve(f *testing.F) {
	f.Add(10, 0, 0.1, 0.0, 0, 0.0, 0.0, 0.0, 0.2, 0.5, 3, 0.1, 0.0, 0.0, 1.0, 0.0, 0.0)
	f.Add(100, 120, 0.01, 0.5, 50, 0.1, 0.9, 1.0, 0.0, 0.0, 0, 0.0, 0.0, 2.0, 1.0, 0.3, 0.2)
	f.Add(0, 0, math.NaN(), math.Inf(1), -1, -0.5, 2.0, -1.0, 0.0, 0.0, 0, 0.0, 0.0, math.NaN(), 1.0, 0.0, 0.0)
	f.Add(1<<30, 1<<30, 1e-300, 1e12, 1<<30, 1.0, 1.0, 1e12, 1e12, 1e-300, 7, 0.5, 1.0, 1e12, 1e12, 1e12, 1e12)
	f.Fuzz(func(t *testing.T, s, smax int, c0, o0 float64, cap0 int, f0, g0, r0, c1, o1 float64, cap1 int, f1, g1, d, w1, w2, w3 float64) {
		p := Problem{
			Samples: s, MaxSamples: smax, Deadline: d,
			Workers: []Worker{
				{Cost: c0, Overhead: o0, Cap: cap0, Floor: f0, Ceiling: g0, Price: r0},
				{Cost: c1, Overhead: o1, Cap: cap1, Floor: f1, Ceiling: g1, Price: r0 / 2},
			},
			Weights: Weights{Time: w1, Accuracy: w2, Resource: w3},
		}
		if p.Samples > 1<<20 || p.MaxSamples > 1<<20 { // keep the exact search quick; validation of larger values is tested above
			if _, err := (Config{MaxWorkers: 4, ExactBudget: 0}).Solve(p); err != nil && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrSolver) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		a, err := Solve(p)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrSolver) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !feasible(p, a.Samples) {
			t.Fatalf("%+v: infeasible answer %+v", p, a)
		}
		if a.Total != a.Samples[0]+a.Samples[1] {
			t.Fatalf("total %d of %v", a.Total, a.Samples)
		}
		if math.IsNaN(a.Objective) || a.Objective < a.LowerBound-1e-6*math.Max(1, math.Abs(a.Objective)) {
			t.Fatalf("objective %v below the LP bound %v", a.Objective, a.LowerBound)
		}
	})
}
