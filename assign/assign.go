package assign

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Sentinel errors. Every error Solve returns wraps exactly one of them.
var (
	// ErrInvalid: the problem is malformed (NaN, Inf, a negative value, a
	// fraction outside [0, 1], a floor above its ceiling, no workers, too
	// many workers, numbers too large to compute with exactly).
	ErrInvalid = errors.New("assign: invalid problem")
	// ErrInfeasible: the problem is well formed but no integer assignment
	// meets every constraint. The message names the binding constraint.
	ErrInfeasible = errors.New("assign: infeasible")
	// ErrSolver: the simplex solver failed numerically on a feasible
	// problem (should not happen; reported rather than hidden).
	ErrSolver = errors.New("assign: solver failed")
)

// MaxSamples is the largest sample count a problem may name: counts stay
// exact in float64 arithmetic and fit an int on 32-bit machines.
const MaxSamples = 1 << 30

// maxMagnitude bounds costs, overheads, prices, deadlines and weights so
// that products of them with sample counts stay finite.
const maxMagnitude = 1e12

// Worker is one machine's measured speed and its limits.
type Worker struct {
	// Cost is seconds per sample (measured: compute time / samples). 0 is
	// allowed: such a worker's time does not grow with its share.
	Cost float64
	// Overhead is fixed seconds per round (communication, synchronisation),
	// paid by every worker in the problem whatever its share.
	Overhead float64
	// Cap is the most samples that fit in the worker's memory; 0 = no cap.
	Cap int
	// Floor and Ceiling bound the worker's share as fractions of
	// Problem.Samples: x ≥ ⌈Floor·S⌉ and x ≤ ⌊Ceiling·S⌋. Ceiling 0 means 1
	// (no ceiling).
	Floor, Ceiling float64
	// Price is the resource price per busy second (e.g. the machine's cost
	// per second); the resource term is Σ Price·(Cost·x + Overhead).
	Price float64
}

// Weights weigh the three terms of the objective
//
//	Time·T + Resource·Σ r_i·t_i − Accuracy·N
//
// where T = max_i t_i, t_i = c_i·x_i + o_i and N = Σ x_i.
type Weights struct {
	Time, Accuracy, Resource float64
}

// Problem is one round to assign.
type Problem struct {
	// Samples is the round's total S (the nominal batch). It is also what
	// Floor and Ceiling are fractions of.
	Samples int
	// MaxSamples > Samples lets the round grow to up to MaxSamples samples
	// when the accuracy weight pays for the extra time (the accuracy
	// proxy, see the package doc). 0 or ≤ Samples: the total is Samples.
	MaxSamples int
	Workers    []Worker
	// Deadline in seconds: every worker must finish by it (c_i·x_i + o_i ≤
	// Deadline, relative tolerance DeadlineTol). 0 = no deadline.
	Deadline float64
	Weights  Weights
}

// Config tunes the solver. Use DefaultConfig and change fields.
type Config struct {
	// MaxWorkers bounds the problem size: the simplex works on a dense
	// matrix of up to (2n+2)×(3n+3), and its time grows about with n³
	// (about 1 s at 128 workers with every worker capped, on a busy
	// 2-core machine).
	MaxWorkers int
	// Tol is the simplex's tolerance on reduced costs.
	Tol float64
	// ExactBudget bounds the work (candidate makespans × workers) of the
	// exact integer search that follows the LP; above it Solve keeps the
	// rounded LP solution improved by local moves, within the bound that
	// RoundingBound states. 0 turns the exact search off.
	ExactBudget int
}

// DefaultConfig returns the configuration Solve uses.
func DefaultConfig() Config {
	return Config{MaxWorkers: 128, Tol: 1e-10, ExactBudget: 1 << 24}
}

// DeadlineTol is the relative tolerance of the deadline test: a worker
// meets deadline D when its time is at most D·(1+DeadlineTol).
const DeadlineTol = 1e-9

// Limit names the constraint a worker's share sits at.
type Limit uint8

// Limits, from "none" up.
const (
	LimitNone     Limit = iota // strictly between its bounds
	LimitFloor                 // at its floor (⌈Floor·S⌉ > 0)
	LimitCap                   // at its memory capacity
	LimitCeiling               // at its ceiling
	LimitDeadline              // the most it can do by the deadline
	LimitTotal                 // holds the whole round
)

var limitNames = [...]string{"none", "floor", "capacity", "ceiling", "deadline", "total"}

func (l Limit) String() string {
	if int(l) < len(limitNames) {
		return limitNames[l]
	}
	return fmt.Sprintf("Limit(%d)", l)
}

// Assignment is Solve's answer.
type Assignment struct {
	Samples  []int     // x_i, summing to Total
	Total    int       // N = Σ x_i (Problem.Samples unless the round may grow)
	Times    []float64 // t_i = c_i·x_i + o_i, seconds
	Makespan float64   // T = max_i t_i
	// Idle is each worker's idle share of the round, (T − t_i)/T (0 when T = 0).
	Idle      []float64
	Resource  float64 // Σ r_i·t_i
	Objective float64 // w1·T + w3·Resource − w2·Total
	// LowerBound is the LP relaxation's optimum: no assignment, integer or
	// not, does better. Objective − LowerBound ≤ RoundingBound(p).
	LowerBound float64
	// Exact reports that the integer optimum was proven (the exact search
	// ran within Config.ExactBudget); otherwise Objective is within
	// RoundingBound of LowerBound.
	Exact bool
	// Limits says which constraint each worker's share sits at.
	Limits []Limit
	// Binding describes in words what limits the round: the workers at a
	// limit, and the workers that finish last.
	Binding string
}

// Solve assigns p with DefaultConfig.
func Solve(p Problem) (Assignment, error) { return DefaultConfig().Solve(p) }

// bounds are the integer box constraints every worker's share must meet,
// and the range of the round's total.
type bounds struct {
	lo, hi     []int
	hiBy       []Limit
	loFloor    []bool
	smin, smax int // after intersecting with Σlo and Σhi
}

// Solve assigns p: it validates p, derives integer bounds (reporting an
// infeasible problem with the binding constraint), solves the LP
// relaxation with the simplex method, rounds, and then (within
// ExactBudget) finds the integer optimum.
func (cfg Config) Solve(p Problem) (Assignment, error) {
	if err := cfg.validate(); err != nil {
		return Assignment{}, err
	}
	if err := p.validate(cfg.MaxWorkers); err != nil {
		return Assignment{}, err
	}
	b, err := p.bounds()
	if err != nil {
		return Assignment{}, err
	}
	xs, lpObj, err := solveLP(p, b, cfg.Tol)
	if err != nil {
		return Assignment{}, err
	}
	x := roundShares(p, b, xs)
	best := p.objective(x)
	exact := false
	if ex, ok := exactSearch(p, b, best, cfg.ExactBudget); ok {
		exact = true
		if o := p.objective(ex); o < best {
			x, best = ex, o
		}
	} else {
		x = improve(p, b, x)
		best = p.objective(x)
	}
	if lpObj > best {
		lpObj = best // the relaxation's optimum cannot exceed a feasible point; guard rounding noise
	}
	return p.report(b, x, lpObj, exact), nil
}

func (cfg Config) validate() error {
	switch {
	case cfg.MaxWorkers < 1:
		return fmt.Errorf("%w: config: MaxWorkers %d must be at least 1", ErrInvalid, cfg.MaxWorkers)
	case !(cfg.Tol >= 0) || math.IsInf(cfg.Tol, 0):
		return fmt.Errorf("%w: config: Tol %v must be finite and not negative", ErrInvalid, cfg.Tol)
	case cfg.ExactBudget < 0:
		return fmt.Errorf("%w: config: ExactBudget %d is negative", ErrInvalid, cfg.ExactBudget)
	}
	return nil
}

// finite reports whether v is a usable non-negative number.
func finite(v float64) bool { return v >= 0 && v <= maxMagnitude }

func (p *Problem) validate(maxWorkers int) error {
	n := len(p.Workers)
	if n == 0 {
		return fmt.Errorf("%w: no workers", ErrInvalid)
	}
	if n > maxWorkers {
		return fmt.Errorf("%w: %d workers, at most %d", ErrInvalid, n, maxWorkers)
	}
	if p.Samples < 0 || p.Samples > MaxSamples {
		return fmt.Errorf("%w: samples %d not in [0, %d]", ErrInvalid, p.Samples, MaxSamples)
	}
	if p.MaxSamples < 0 || p.MaxSamples > MaxSamples {
		return fmt.Errorf("%w: max samples %d not in [0, %d]", ErrInvalid, p.MaxSamples, MaxSamples)
	}
	if !finite(p.Deadline) {
		return fmt.Errorf("%w: deadline %v must be finite and not negative", ErrInvalid, p.Deadline)
	}
	w := p.Weights
	if !finite(w.Time) || !finite(w.Accuracy) || !finite(w.Resource) {
		return fmt.Errorf("%w: weights %+v must be finite and not negative", ErrInvalid, w)
	}
	fsum := 0.0
	for i, wk := range p.Workers {
		switch {
		case !finite(wk.Cost):
			return fmt.Errorf("%w: worker %d: cost %v s/sample must be finite and not negative", ErrInvalid, i, wk.Cost)
		case !finite(wk.Overhead):
			return fmt.Errorf("%w: worker %d: overhead %vs must be finite and not negative", ErrInvalid, i, wk.Overhead)
		case !finite(wk.Price):
			return fmt.Errorf("%w: worker %d: price %v must be finite and not negative", ErrInvalid, i, wk.Price)
		case wk.Cap < 0:
			return fmt.Errorf("%w: worker %d: capacity %d is negative", ErrInvalid, i, wk.Cap)
		case !(wk.Floor >= 0 && wk.Floor <= 1):
			return fmt.Errorf("%w: worker %d: floor %v is not a fraction in [0, 1]", ErrInvalid, i, wk.Floor)
		case !(wk.Ceiling >= 0 && wk.Ceiling <= 1):
			return fmt.Errorf("%w: worker %d: ceiling %v is not a fraction in [0, 1]", ErrInvalid, i, wk.Ceiling)
		case wk.Ceiling > 0 && wk.Floor > wk.Ceiling:
			return fmt.Errorf("%w: worker %d: floor %v above its ceiling %v", ErrInvalid, i, wk.Floor, wk.Ceiling)
		}
		fsum += wk.Floor
	}
	if fsum > 1+1e-12 {
		return fmt.Errorf("%w: floors sum to %.4g of the round, above 1", ErrInfeasible, fsum)
	}
	return nil
}

func (p *Problem) maxTotal() int {
	if p.MaxSamples > p.Samples {
		return p.MaxSamples
	}
	return p.Samples
}

// deadlineMax is the most samples worker i can do by the deadline
// (math.MaxInt for no limit).
func (p *Problem) deadlineMax(i int) int {
	w := p.Workers[i]
	if p.Deadline == 0 || w.Cost == 0 {
		return math.MaxInt
	}
	v := (p.Deadline*(1+DeadlineTol) - w.Overhead) / w.Cost
	if v >= MaxSamples {
		return math.MaxInt
	}
	k := int(math.Floor(v))
	for k > 0 && !p.meets(i, k) {
		k--
	}
	for p.meets(i, k+1) {
		k++
	}
	return k
}

// meets reports whether worker i finishes k samples by the deadline.
func (p *Problem) meets(i, k int) bool {
	if p.Deadline == 0 {
		return true
	}
	w := p.Workers[i]
	return w.Cost*float64(k)+w.Overhead <= p.Deadline*(1+DeadlineTol)
}

func (p *Problem) bounds() (bounds, error) {
	n := len(p.Workers)
	S := float64(p.Samples)
	b := bounds{lo: make([]int, n), hi: make([]int, n), hiBy: make([]Limit, n), loFloor: make([]bool, n)}
	smax := p.maxTotal()
	var sumLo, sumHi int
	for i, w := range p.Workers {
		if p.Deadline > 0 && w.Overhead > p.Deadline*(1+DeadlineTol) {
			return b, fmt.Errorf("%w: deadline %gs: worker %d's overhead alone is %gs", ErrInfeasible, p.Deadline, i, w.Overhead)
		}
		lo := int(math.Ceil(w.Floor*S - 1e-9))
		if lo < 0 {
			lo = 0
		}
		hi, by := smax, LimitTotal
		if w.Cap > 0 && w.Cap < hi {
			hi, by = w.Cap, LimitCap
		}
		if w.Ceiling > 0 {
			if c := int(math.Floor(w.Ceiling*S + 1e-9)); c < hi {
				hi, by = c, LimitCeiling
			}
		}
		if d := p.deadlineMax(i); d < hi {
			hi, by = d, LimitDeadline
		}
		if lo > hi {
			switch by {
			case LimitDeadline:
				return b, fmt.Errorf("%w: deadline %gs: worker %d alone needs %.4gs for its floor of %d samples", ErrInfeasible, p.Deadline, i, w.Cost*float64(lo)+w.Overhead, lo)
			case LimitCap:
				return b, fmt.Errorf("%w: worker %d: floor of %d samples exceeds its capacity of %d", ErrInfeasible, i, lo, w.Cap)
			default:
				return b, fmt.Errorf("%w: worker %d: floor of %d samples exceeds its ceiling of %d", ErrInfeasible, i, lo, hi)
			}
		}
		b.lo[i], b.hi[i], b.hiBy[i], b.loFloor[i] = lo, hi, by, lo > 0
		sumLo += lo
		sumHi += hi
	}
	if sumLo > smax {
		return b, fmt.Errorf("%w: floors sum to %d samples, the round has %d", ErrInfeasible, sumLo, smax)
	}
	if sumHi < p.Samples {
		return b, fmt.Errorf("%w: %s", ErrInfeasible, p.shortfall(b, sumHi))
	}
	b.smin, b.smax = max(p.Samples, sumLo), min(smax, sumHi)
	return b, nil
}

// shortfall words the error of limits that sum below the round.
func (p *Problem) shortfall(b bounds, sumHi int) string {
	all := LimitNone
	same := true
	for i, by := range b.hiBy {
		if i == 0 {
			all = by
		} else if by != all {
			same = false
		}
	}
	if same && all == LimitCap {
		return fmt.Sprintf("capacities sum to %d samples, the round needs %d", sumHi, p.Samples)
	}
	if same && all == LimitDeadline {
		return fmt.Sprintf("deadline %gs: the workers can do %d samples by then, the round needs %d", p.Deadline, sumHi, p.Samples)
	}
	var parts []string
	for i, by := range b.hiBy {
		if len(parts) == 8 {
			parts = append(parts, "…")
			break
		}
		switch by {
		case LimitCap:
			parts = append(parts, fmt.Sprintf("worker %d: capacity %d", i, b.hi[i]))
		case LimitCeiling:
			parts = append(parts, fmt.Sprintf("worker %d: ceiling %d", i, b.hi[i]))
		case LimitDeadline:
			parts = append(parts, fmt.Sprintf("worker %d: %d by the deadline %gs", i, b.hi[i], p.Deadline))
		}
	}
	return fmt.Sprintf("worker limits sum to %d samples (%s), the round needs %d", sumHi, strings.Join(parts, ", "), p.Samples)
}

// objective evaluates an integer assignment.
func (p *Problem) objective(x []int) float64 {
	T, res, n := 0.0, 0.0, 0
	for i, w := range p.Workers {
		t := w.Cost*float64(x[i]) + w.Overhead
		T = max(T, t)
		res += w.Price * t
		n += x[i]
	}
	return p.Weights.Time*T + p.Weights.Resource*res - p.Weights.Accuracy*float64(n)
}

func (p *Problem) report(b bounds, x []int, lower float64, exact bool) Assignment {
	n := len(x)
	a := Assignment{Samples: x, Times: make([]float64, n), Idle: make([]float64, n), Limits: make([]Limit, n), LowerBound: lower, Exact: exact}
	for i, w := range p.Workers {
		a.Times[i] = w.Cost*float64(x[i]) + w.Overhead
		a.Makespan = max(a.Makespan, a.Times[i])
		a.Resource += w.Price * a.Times[i]
		a.Total += x[i]
		switch {
		case x[i] == b.hi[i] && b.hiBy[i] != LimitTotal:
			a.Limits[i] = b.hiBy[i]
		case x[i] == b.lo[i] && b.loFloor[i]:
			a.Limits[i] = LimitFloor
		case x[i] == b.hi[i] && x[i] > 0:
			a.Limits[i] = LimitTotal
		}
	}
	a.Objective = p.objective(x)
	var at, last []string
	for i := range x {
		if a.Makespan > 0 {
			a.Idle[i] = (a.Makespan - a.Times[i]) / a.Makespan
		}
		if a.Limits[i] != LimitNone {
			at = append(at, fmt.Sprintf("worker %d at its %s (%d)", i, a.Limits[i], x[i]))
		}
		if a.Times[i] >= a.Makespan*(1-1e-9) {
			last = append(last, fmt.Sprint(i))
		}
	}
	if len(at) > 8 {
		at = append(at[:8], fmt.Sprintf("%d more", len(at)-8))
	}
	if len(last) > 8 {
		last = append(last[:8], "…")
	}
	s := fmt.Sprintf("makespan %.4gs (last: worker %s)", a.Makespan, strings.Join(last, ", "))
	if len(at) > 0 {
		s += "; " + strings.Join(at, "; ")
	}
	if p.Deadline > 0 && a.Makespan >= p.Deadline*(1-1e-6) {
		s += fmt.Sprintf("; deadline %gs binds", p.Deadline)
	}
	a.Binding = s
	return a
}
