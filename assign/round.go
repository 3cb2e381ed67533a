package assign

import (
	"math"
	"sort"
)

// RoundingBound is how far the rounded LP solution may be above the LP
// optimum (and so above the integer optimum):
//
//	w1·max_i c_i + w3·Σ_i r_i·c_i + w2
//
// Largest-remainder rounding moves every share by less than one sample
// (T by less than one sample of the slowest worker, each resource term by
// less than one sample's cost) and the total by less than one sample.
func RoundingBound(p Problem) float64 {
	maxC, rc := 0.0, 0.0
	for _, w := range p.Workers {
		maxC = max(maxC, w.Cost)
		rc += w.Price * w.Cost
	}
	return p.Weights.Time*maxC + p.Weights.Resource*rc + p.Weights.Accuracy
}

// roundShares rounds the LP's real shares to integers: the total to
// ⌊Σx⌋ (clamped into [smin, smax]), each share down, then the missing
// samples to the largest remainders among workers below their upper
// bound; a repair pass gives anything left to the worker that would
// finish first.
func roundShares(p Problem, b bounds, xs []float64) []int {
	n := len(xs)
	sum := 0.0
	for i := range xs {
		xs[i] = math.Min(math.Max(xs[i], float64(b.lo[i])), float64(b.hi[i]))
		sum += xs[i]
	}
	N := int(math.Floor(sum + 1e-7))
	N = min(max(N, b.smin), b.smax)
	x := make([]int, n)
	given := 0
	for i := range xs {
		x[i] = int(math.Floor(xs[i] + 1e-9))
		x[i] = min(max(x[i], b.lo[i]), b.hi[i])
		given += x[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	rem := func(i int) float64 { return xs[i] - float64(x[i]) }
	sort.SliceStable(order, func(a, c int) bool { return rem(order[a]) > rem(order[c]) })
	// Too many after flooring (only through the epsilon): take back from
	// the smallest remainders.
	for k := n - 1; given > N && k >= 0; k-- {
		if i := order[k]; x[i] > b.lo[i] {
			x[i]--
			given--
		}
	}
	for _, i := range order {
		if given >= N {
			break
		}
		if rem(i) > 0 && x[i] < b.hi[i] {
			x[i]++
			given++
		}
	}
	for given < N { // repair
		j := -1
		for i := range x {
			if x[i] < b.hi[i] && (j < 0 || p.time(i, x[i]+1) < p.time(j, x[j]+1)) {
				j = i
			}
		}
		x[j]++
		given++
	}
	for given > N {
		j := -1
		for i := range x {
			if x[i] > b.lo[i] && (j < 0 || p.time(i, x[i]) > p.time(j, x[j])) {
				j = i
			}
		}
		x[j]--
		given--
	}
	return x
}

func (p *Problem) time(i, k int) float64 {
	return p.Workers[i].Cost*float64(k) + p.Workers[i].Overhead
}

// improve moves single samples off the last worker to finish while that
// lowers the objective (at most n moves per worker); used when the exact
// search is over budget.
func improve(p Problem, b bounds, x []int) []int {
	n := len(x)
	obj := p.objective(x)
	for range 4 * n {
		last := 0
		for i := range x {
			if p.time(i, x[i]) > p.time(last, x[last]) {
				last = i
			}
		}
		if x[last] <= b.lo[last] {
			break
		}
		j := -1
		for i := range x {
			if i != last && x[i] < b.hi[i] && (j < 0 || p.time(i, x[i]+1) < p.time(j, x[j]+1)) {
				j = i
			}
		}
		if j < 0 {
			break
		}
		x[last]--
		x[j]++
		if o := p.objective(x); o < obj {
			obj = o
			continue
		}
		x[last]++
		x[j]--
		break
	}
	return x
}

// exactSearch finds the integer optimum. For a makespan bound T every
// worker may take up to m_i(T) = min(hi_i, ⌊(T−o_i)/c_i⌋) samples, and
// the rest of the objective, G(T) = Σ (w3·r_i·c_i − w2)·x_i, is minimised
// greedily: the floors, then the cheapest samples up to smin, then any
// sample of negative coefficient up to smax. The optimum of
// w1·T + G(T) lies at a makespan some worker reaches exactly, T = o_i +
// c_i·k, and with w1 > 0 below (best − G(∞))/w1, since G never goes below
// G(∞). It reports false when the candidates exceed budget.
func exactSearch(p Problem, b bounds, best float64, budget int) ([]int, bool) {
	n := len(p.Workers)
	if budget <= 0 {
		return nil, false
	}
	g := newGreedy(p, b)
	xinf, ok := g.fill(0, true)
	if !ok {
		return nil, false
	}
	w1 := p.Weights.Time
	if w1 == 0 {
		return xinf, true
	}
	gInf := p.objective(xinf) - w1*makespan(p, xinf)
	tmax := (best-gInf)/w1 + 1e-9*math.Max(1, math.Abs(best))
	tmin := 0.0
	for i := range p.Workers {
		tmin = max(tmin, p.time(i, b.lo[i]))
	}
	cand, ok := makespanCandidates(p, b, tmin, tmax, budget/n)
	if !ok {
		return nil, false
	}
	var bestX []int
	bestObj := math.Inf(1)
	prev := math.NaN()
	for _, T := range cand {
		if T == prev {
			continue
		}
		prev = T
		x, ok := g.fill(T, false)
		if !ok {
			continue
		}
		if o := p.objective(x); o < bestObj {
			bestObj, bestX = o, x
		}
	}
	return bestX, bestX != nil
}

// makespanCandidates lists, in increasing order, the makespans in [tmin,
// tmax] that some worker reaches exactly, T = o_i + c_i·k, and tmin
// itself; false when they are more than limit.
func makespanCandidates(p Problem, b bounds, tmin, tmax float64, limit int) ([]float64, bool) {
	var cand []float64
	for i, w := range p.Workers {
		if w.Cost == 0 {
			if w.Overhead >= tmin && w.Overhead <= tmax {
				cand = append(cand, w.Overhead)
			}
			continue
		}
		k0 := clampInt(math.Ceil((tmin-w.Overhead)/w.Cost-1e-9), b.lo[i], b.hi[i]+1)
		k1 := clampInt(math.Floor((tmax-w.Overhead)/w.Cost+1e-9), b.lo[i]-1, b.hi[i])
		if k1-k0 >= limit-len(cand) {
			return nil, false
		}
		for k := k0; k <= k1; k++ {
			cand = append(cand, p.time(i, k))
		}
	}
	cand = append(cand, tmin)
	sort.Float64s(cand)
	return cand, true
}

// greedy minimises exactSearch's G(T) under a makespan bound T: every
// worker's floor, then the cheapest samples up to smin, then any sample
// of negative coefficient up to smax, none past a worker's m_i(T).
type greedy struct {
	p     Problem
	b     bounds
	coef  []float64 // a sample's coefficient in G, w3·r_i·c_i − w2
	order []int     // the workers by coef, cheapest first
	caps  []int     // m_i(T), for the fill under way
}

// newGreedy ranks p's workers by coefficient.
func newGreedy(p Problem, b bounds) *greedy {
	n := len(p.Workers)
	g := &greedy{p: p, b: b, coef: make([]float64, n), order: make([]int, n), caps: make([]int, n)}
	for i, w := range p.Workers {
		g.coef[i] = p.Weights.Resource*w.Price*w.Cost - p.Weights.Accuracy
		g.order[i] = i
	}
	sort.SliceStable(g.order, func(a, c int) bool { return g.coef[g.order[a]] < g.coef[g.order[c]] })
	return g
}

// setCaps sets caps to m_i(T) = min(hi_i, ⌊(T−o_i)/c_i⌋), or to hi_i when
// inf (no makespan bound); false if a worker cannot take its floor by T.
func (g *greedy) setCaps(T float64, inf bool) bool {
	for i := range g.caps {
		g.caps[i] = g.b.hi[i]
		if inf {
			continue
		}
		w := g.p.Workers[i]
		if w.Overhead > T {
			return false
		}
		if w.Cost > 0 {
			if v := (T - w.Overhead) / w.Cost; v < float64(g.caps[i]) {
				g.caps[i] = int(math.Floor(v + 1e-9))
				for g.caps[i] >= 0 && g.p.time(i, g.caps[i]) > T {
					g.caps[i]--
				}
			}
		}
		if g.caps[i] < g.b.lo[i] {
			return false
		}
	}
	return true
}

// fill is the greedy split under the makespan bound T (none when inf);
// false if there is none, or it cannot reach smin.
func (g *greedy) fill(T float64, inf bool) ([]int, bool) {
	if !g.setCaps(T, inf) {
		return nil, false
	}
	x := make([]int, len(g.caps))
	total := 0
	for i := range x {
		x[i] = g.b.lo[i]
		total += x[i]
	}
	for _, i := range g.order {
		room := g.caps[i] - x[i]
		want := g.b.smin - total
		if g.coef[i] < 0 {
			want = g.b.smax - total
		}
		take := min(room, max(want, 0))
		x[i] += take
		total += take
	}
	return x, total >= g.b.smin
}

func makespan(p Problem, x []int) float64 {
	T := 0.0
	for i := range x {
		T = max(T, p.time(i, x[i]))
	}
	return T
}

// clampInt converts v to an int in [lo, hi] (float-to-int conversion of
// an out-of-range value is not defined in Go).
func clampInt(v float64, lo, hi int) int {
	switch {
	case !(v > float64(lo)):
		return lo
	case v >= float64(hi):
		return hi
	}
	return int(v)
}
