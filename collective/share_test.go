package collective

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/assign"
	"github.com/gorun/gorun/ps"
)

// shareObjective is what the optimal rule minimises, computed from the
// model: w1·max_i t_i + w3·Σ_i r_i·t_i with t_i = x_i/v_i + o_i.
func shareObjective(c ps.ShareConfig, x []int, speeds []float64) float64 {
	w := c.Weights
	if w == (assign.Weights{}) {
		w.Time = 1
	}
	T, res := 0.0, 0.0
	for i, k := range x {
		t := float64(k) / speeds[i]
		if len(c.Overhead) > 0 {
			t += c.Overhead[i].Seconds()
		}
		if len(c.Price) > 0 {
			res += c.Price[i] * t
		}
		T = max(T, t)
	}
	return w.Time*T + w.Resource*res
}

// TestHubShareOptimal: NewLocal Comms whose Config.HubShare is the
// optimal rule get, from Client.Share, the split that package assign's
// solver finds for the speeds the hub measured (an optimum of the same
// objective, within every cap and the deadline) and exactly
// ShareConfig.Split's; before any speed is known, Split's even split.
// A problem the solver refuses (fewer samples than workers, caps or,
// with miss=fail, a deadline too tight) fails the request on every rank;
// with miss=relax a deadline too tight gives the least makespan, counted
// relaxed on every rank. Random speeds,
// caps, prices, overheads and deadlines on 1, 2, 3, 5 and 7 ranks.
func TestHubShareOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	ctx := context.Background()
	var counts [4]int // refused at first, refused once measured, relaxed once measured, split
	for _, n := range []int{1, 2, 3, 5, 7} {
		for trial, total := range slices.Repeat([]int{n - 1, n, n + 1, 13, 97, 128}, 3) {
			if total < 1 {
				continue
			}
			sc := ps.ShareConfig{Rule: ps.ShareOptimal}
			samples, compute, speeds := make([]int, n), make([]time.Duration, n), make([]float64, n)
			for i := range n {
				samples[i] = 1 + rng.IntN(50)
				compute[i] = time.Duration(1+rng.IntN(100)) * time.Millisecond
				var s ps.Speed
				s.Observe(samples[i], compute[i])
				speeds[i] = s.Rate()
			}
			if rng.IntN(2) == 0 {
				sc.Cap = make([]int, n)
				for i := range sc.Cap {
					sc.Cap[i] = rng.IntN(total/n + 3) // 0: no cap
				}
			}
			if rng.IntN(2) == 0 {
				sc.Overhead = make([]time.Duration, n)
				for i := range sc.Overhead {
					sc.Overhead[i] = time.Duration(rng.IntN(30)) * time.Millisecond
				}
			}
			if rng.IntN(2) == 0 {
				sc.Price = make([]float64, n)
				for i := range sc.Price {
					sc.Price[i] = float64(rng.IntN(4)) / 2
				}
				sc.Weights = assign.Weights{Time: float64(rng.IntN(2)), Resource: 0.5 + rng.Float64()}
			}
			if rng.IntN(3) == 0 {
				sc.Deadline = time.Duration(20+rng.IntN(400)) * time.Millisecond
				if trial%2 == 1 {
					sc.Miss = ps.MissFail
				}
			}
			name := fmt.Sprintf("trial %d: %d ranks, batch %d, %v", trial, n, total, sc)
			// The spec goes through its text form, as gorun gives it.
			parsed, err := ps.ParseShareConfig(sc.String())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			cfg := DefaultConfig()
			cfg.Strategy, cfg.HubShare = StrategyHub, parsed
			first, second, relaxed := make([]int, n), make([]int, n), make([]int, n)
			errs := onAll(t, n, cfg, func(c *Comm) error {
				r := c.Rank()
				x, err := c.Hub().Share(ctx, total, 0, 0)
				if err != nil {
					return fmt.Errorf("first share: %w", err)
				}
				first[r] = x
				x, err = c.Hub().Share(ctx, total, samples[r], compute[r])
				second[r], relaxed[r] = x, c.Hub().DeadlineRelaxed()
				return err
			})
			even, errEven := sc.Split(total, make([]float64, n), nil)
			want, errWant := sc.Split(total, speeds, nil)
			failed := 0
			for _, err := range errs {
				if err != nil {
					failed++
				}
			}
			switch {
			case errEven != nil:
				counts[0]++
				// Fewer samples than workers, or caps below the batch:
				// the first request fails on every rank.
				if failed != n || !strings.Contains(fmt.Sprint(errs[0]), "first share") {
					t.Fatalf("%s: Split refuses (%v), the ranks said %v", name, errEven, errs)
				}
				continue
			case errWant != nil && sc.Miss == ps.MissFail:
				counts[1]++
				if failed != n || !strings.Contains(fmt.Sprint(errs[0]), "deadline") {
					t.Fatalf("%s: Split refuses the measured round (%v), the ranks said %v", name, errWant, errs)
				}
				continue
			case errWant != nil:
				// MissRelax: the least makespan within the caps, said to
				// every rank, unless the caps alone refuse it.
				least := sc
				least.Deadline, least.Weights, least.Miss = 0, assign.Weights{Time: 1}, ps.MissRelax
				lw, lerr := least.Split(total, speeds, nil)
				if lerr != nil {
					counts[1]++
					if failed != n {
						t.Fatalf("%s: Split refuses the measured round even without the deadline (%v), the ranks said %v", name, lerr, errs)
					}
					continue
				}
				counts[2]++
				if failed > 0 || fmt.Sprint(second) != fmt.Sprint(lw) || slices.Max(relaxed) != 1 || slices.Min(relaxed) != 1 {
					t.Fatalf("%s: the deadline no split meets (%v): the ranks got %v, relaxed %v, errors %v; want the least makespan %v, relaxed on every rank", name, errWant, second, relaxed, errs, lw)
				}
				continue
			case failed > 0:
				t.Fatalf("%s: %v", name, errs)
			}
			if fmt.Sprint(first) != fmt.Sprint(even) || fmt.Sprint(second) != fmt.Sprint(want) {
				t.Fatalf("%s: shares %v then %v, Split says %v then %v", name, first, second, even, want)
			}
			// Against the solver called directly on the same speeds.
			p := assign.Problem{Samples: total, Weights: sc.Weights, Deadline: sc.Deadline.Seconds()}
			if p.Weights == (assign.Weights{}) {
				p.Weights.Time = 1
			}
			sum := 0
			for i := range n {
				w := assign.Worker{Cost: 1 / speeds[i], Floor: 1 / float64(total)}
				if sc.Overhead != nil {
					w.Overhead = sc.Overhead[i].Seconds()
				}
				if sc.Cap != nil {
					w.Cap = sc.Cap[i]
					if w.Cap > 0 && second[i] > w.Cap {
						t.Fatalf("%s: rank %d got %d samples, above its cap", name, i, second[i])
					}
				}
				if sc.Price != nil {
					w.Price = sc.Price[i]
				}
				if second[i] < 1 {
					t.Fatalf("%s: rank %d got no sample: %v", name, i, second)
				}
				p.Workers = append(p.Workers, w)
				sum += second[i]
			}
			a, err := assign.Solve(p)
			if err != nil {
				t.Fatalf("%s: the hub split %v, the solver says %v", name, second, err)
			}
			got, best := shareObjective(sc, second, speeds), shareObjective(sc, a.Samples, speeds)
			if sum != total || math.Abs(got-best) > 1e-9*max(1, math.Abs(best)) {
				t.Fatalf("%s: shares %v (sum %d) cost %v, the solver's %v cost %v", name, second, sum, got, a.Samples, best)
			}
			if fmt.Sprint(relaxed) != fmt.Sprint(make([]int, n)) {
				t.Fatalf("%s: relaxed %v where the deadline was met", name, relaxed)
			}
			counts[3]++
		}
	}
	if counts[0] == 0 || counts[1] == 0 || counts[2] == 0 || counts[3] < 20 {
		t.Fatalf("cases refused at first, refused once measured, relaxed once measured, split: %v; the draw should cover all four", counts)
	}
	t.Logf("cases refused at first, refused once measured, relaxed once measured, split: %v", counts)
}

// TestHubShareConfig: GORUN_HUB_SHARE becomes Config.HubShare; a spec
// that does not parse, or whose lists are not one entry per rank, is
// refused naming the variable or the list.
func TestHubShareConfig(t *testing.T) {
	env := map[string]string{
		"GORUN_RANK": "0", "GORUN_SIZE": "2", "GORUN_JOB_ID": "abc", "GORUN_JOB_SECRET": "0123456789abcdef0123",
		"GORUN_PEERS": "127.0.0.1:1000,127.0.0.1:1001", "GORUN_ADDR": "127.0.0.1", "GORUN_GOSSIP_PORT": "1000",
		"GORUN_STRATEGY": "hub",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if got, err := ConfigFromEnv(lookup); err != nil || got.HubShare.Rule != ps.ShareProportional {
		t.Fatalf("no GORUN_HUB_SHARE: %v %v", got.HubShare, err)
	}
	env["GORUN_HUB_SHARE"] = "optimal:cap=5/6,deadline=2s"
	if got, err := ConfigFromEnv(lookup); err != nil || got.HubShare.String() != "optimal:deadline=2s,cap=5/6" {
		t.Fatalf("GORUN_HUB_SHARE=%s: %v %v", env["GORUN_HUB_SHARE"], got.HubShare, err)
	}
	for spec, want := range map[string]string{
		"fastest":           `GORUN_HUB_SHARE: ps: hub share rule "fastest": unknown rule`,
		"optimal:cap=5/6/7": "Share.Cap has 3 entries, want one per worker (2)",
	} {
		env["GORUN_HUB_SHARE"] = spec
		if _, err := ConfigFromEnv(lookup); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GORUN_HUB_SHARE=%s: %v; want %q", spec, err, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Strategy, cfg.HubShare = StrategyHub, ps.ShareConfig{Rule: ps.ShareOptimal, Cap: []int{1}}
	if _, err := NewLocal(3, cfg); err == nil || !strings.Contains(err.Error(), "Share.Cap has 1 entries") {
		t.Fatalf("NewLocal with a cap list of 1 for 3 ranks: %v", err)
	}
}
