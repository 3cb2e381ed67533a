package ps

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/assign"
)

// ShareRule is how hub 0 splits an LB-BSP batch over the workers that ask
// for their share (Client.Share).
type ShareRule uint8

// Share rules. The zero value is today's rule.
const (
	// ShareProportional splits the batch in proportion to measured speed
	// (Shares): the default.
	ShareProportional ShareRule = iota
	// ShareOptimal splits it by package assign's exact solver: the
	// slowest worker's time (compute plus ShareConfig.Overhead) is
	// minimised within each worker's ShareConfig.Cap and the round's
	// ShareConfig.Deadline, with ShareConfig.Weights. On hub 0 a worker's
	// compute is modelled as a fixed part plus a per-sample part, fitted
	// to its recent iterations (see the package doc, "Load balancing").
	ShareOptimal
	shareRuleEnd
)

var shareRuleNames = [...]string{"proportional", "optimal"}

func (r ShareRule) String() string {
	if r < shareRuleEnd {
		return shareRuleNames[r]
	}
	return fmt.Sprintf("ShareRule(%d)", uint8(r))
}

// ParseShareRule reads a rule by name: "proportional" or "optimal".
func ParseShareRule(s string) (ShareRule, error) {
	for r, name := range shareRuleNames {
		if s == name {
			return ShareRule(r), nil
		}
	}
	return 0, fmt.Errorf("ps: unknown share rule %q (want proportional or optimal)", s)
}

// ShareConfig configures LB-BSP's split of a batch (HubConfig.Share). It
// is hub 0's own configuration: nothing of it travels on the wire, and
// workers ask for their share exactly as before.
//
// ShareOptimal runs the solver on hub 0 once per iteration, between
// requests: about a millisecond for 16 workers and a batch of 4096, 0.1s
// for 128 workers, and up to about 0.2s for batches near a million
// samples (measured on a busy 2-core machine).
//
// Only ShareOptimal reads the fields after Rule; with ShareProportional
// they must be left zero. The per-worker slices are indexed by worker
// (0..HubConfig.Workers-1) and are either empty or one entry per worker.
type ShareConfig struct {
	Rule ShareRule
	// Overhead is each worker's fixed time per iteration that does not
	// grow with its share and lies outside the compute time it reports
	// (communication, synchronisation), known beforehand. The fixed part
	// of the reported compute (a step's setup, the optimizer step) is not
	// Overhead: hub 0 fits it (see the package doc, "Load balancing").
	Overhead []time.Duration
	// Cap is the most samples each worker takes per iteration (what fits
	// in its memory); 0 = no cap.
	Cap []int
	// Price is each worker's resource price per busy second, weighed by
	// Weights.Resource.
	Price []float64
	// Deadline bounds every worker's time per iteration (its modelled
	// compute plus Overhead); 0 = none. What a round no split can meet
	// gets is Miss's choice.
	Deadline time.Duration
	// Miss is what hub 0 does with a share round whose models no split
	// meets Deadline by (a worker slowed for a while, a noisy estimate):
	// MissRelax (the zero value) splits that round for the least makespan
	// instead, the split that comes closest to the deadline, and tells
	// the workers (Client.DeadlineRelaxed counts such rounds); MissFail
	// fails the share request with assign.ErrInfeasible's message, naming
	// the binding constraint. Split, a pure function, always fails.
	Miss DeadlineMiss
	// Weights weigh the slowest worker's time (Time) against the resource
	// cost (Resource, with Price). Zero means {Time: 1}: minimise the
	// round's makespan. Accuracy must stay 0: the LB-BSP batch is fixed,
	// so there is no extra sample for it to pay for.
	Weights assign.Weights
}

// DeadlineMiss is ShareConfig.Miss.
type DeadlineMiss uint8

// The deadline miss rules.
const (
	MissRelax DeadlineMiss = iota // split the round for the least makespan, and say so
	MissFail                      // fail the share request
	missEnd
)

func (m DeadlineMiss) String() string {
	switch m {
	case MissRelax:
		return "relax"
	case MissFail:
		return "fail"
	}
	return fmt.Sprintf("DeadlineMiss(%d)", uint8(m))
}

// validate checks c for a hub of the given number of workers.
func (c *ShareConfig) validate(workers int) error {
	if c.Rule >= shareRuleEnd {
		return fmt.Errorf("ps: hub: Share.Rule: unknown share rule %d", c.Rule)
	}
	if c.Rule == ShareProportional {
		if len(c.Overhead) > 0 || len(c.Cap) > 0 || len(c.Price) > 0 || c.Deadline != 0 || c.Miss != MissRelax || c.Weights != (assign.Weights{}) {
			return fmt.Errorf("ps: hub: Share.Overhead, Cap, Price, Deadline, Miss and Weights are read by the optimal share rule only; the rule is %v", c.Rule)
		}
		return nil
	}
	if most := assign.DefaultConfig().MaxWorkers; workers > most {
		return fmt.Errorf("ps: hub: the optimal share rule solves for at most %d workers, the job has %d", most, workers)
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"Overhead", len(c.Overhead)}, {"Cap", len(c.Cap)}, {"Price", len(c.Price)}} {
		if f.n != 0 && f.n != workers {
			return fmt.Errorf("ps: hub: Share.%s has %d entries, want one per worker (%d) or none", f.name, f.n, workers)
		}
	}
	for i, o := range c.Overhead {
		if o < 0 {
			return fmt.Errorf("ps: hub: Share.Overhead of worker %d is negative (%v)", i, o)
		}
	}
	for i, k := range c.Cap {
		if k < 0 {
			return fmt.Errorf("ps: hub: Share.Cap of worker %d is negative (%d); 0 means no cap", i, k)
		}
	}
	for i, p := range c.Price {
		if !(p >= 0) || math.IsInf(p, 0) {
			return fmt.Errorf("ps: hub: Share.Price of worker %d is %v, want finite and not negative", i, p)
		}
	}
	if c.Deadline < 0 {
		return fmt.Errorf("ps: hub: Share.Deadline is negative (%v); 0 means none", c.Deadline)
	}
	if c.Miss >= missEnd {
		return fmt.Errorf("ps: hub: Share.Miss: unknown deadline miss rule %d", c.Miss)
	}
	if c.Miss != MissRelax && c.Deadline == 0 {
		return fmt.Errorf("ps: hub: Share.Miss is %v without a Deadline: it says what a missed deadline does", c.Miss)
	}
	w := c.Weights
	for _, v := range []float64{w.Time, w.Accuracy, w.Resource} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("ps: hub: Share.Weights %+v must be finite and not negative", w)
		}
	}
	if w.Accuracy != 0 {
		return fmt.Errorf("ps: hub: Share.Weights.Accuracy is %v: an LB-BSP batch is fixed, so there is no accuracy term to weigh; leave it 0", w.Accuracy)
	}
	return nil
}

// Split splits a batch of total samples by c.Rule over the workers who
// (hub worker numbers, which index Overhead, Cap and Price; nil means
// 0..len(speeds)-1), whose measured speeds in samples per second are
// speeds (0: no estimate yet, counted as the mean of the others, as
// Shares does). The shares add up to total.
//
// Under ShareOptimal every worker gets at least one sample (a push needs
// one: see Table.Push), so a batch smaller than the number of workers is
// an error. Before any worker has an estimate the costs are unknown: the
// batch is then split evenly within the caps, and Overhead, Price,
// Weights and Deadline are left out of that round. The split is the
// integer optimum whenever assign's exact search fits its budget
// (assign.Assignment.Exact), and otherwise within assign.RoundingBound of
// it (with the default weights, less than one sample's time on the
// slowest worker). A problem the solver rejects (caps that sum below the
// batch, a deadline no split meets) is an error wrapping assign's
// ErrInvalid, ErrInfeasible or ErrSolver; it is never replaced by the
// proportional split.
//
// Split's model has no fixed compute: a worker computes a sample every
// 1/speed seconds. Hub 0's optimal rule also fits a fixed part per
// iteration (see the package doc, "Load balancing"); to split offline by
// such a model, pass the speeds of the per-sample parts and add each
// worker's fixed part to its Overhead: when every worker has an estimate
// the solver then sees the problem hub 0 solves (hub 0 also probes, which
// Split does not).
func (c ShareConfig) Split(total int, speeds []float64, who []int) ([]int, error) {
	if who != nil && len(who) != len(speeds) {
		return nil, fmt.Errorf("ps: %d speeds for %d workers", len(speeds), len(who))
	}
	switch c.Rule {
	case ShareProportional:
		return Shares(total, speeds)
	case ShareOptimal:
		return c.optimal(total, speeds, nil, who)
	}
	return nil, fmt.Errorf("ps: unknown share rule %d", c.Rule)
}

// splitHub is the rule as hub 0 runs it, over the workers who (hub
// worker numbers, not nil) with their Speed and their costFit.
// ShareProportional splits by speed, as Split does. ShareOptimal takes
// each worker's model from its fit (costFit.model). A round the deadline
// makes infeasible is, as Split judges the same speeds, a miss (below),
// unless some worker's fit is probing (unfitted after two reports or more): its
// proportional estimate overstates what a larger share costs when a step
// has a fixed part, and may be what makes the round infeasible. The round
// is then a probe, split without the deadline; if that split moves no
// probing worker's share enough for its fit to separate, the first such
// worker (in who's order, at most probeTries of them) is held at the
// nearest share that does (costFit.probeShare). Every probe separates a
// fit for good, so probes end within a round per worker. A round no
// probe can split is a miss: under MissFail it fails with the deadline's
// error, under MissRelax it is split for the least makespan (relaxed
// true). Probe rounds, split without the deadline too, are not misses:
// they are how the models learn whether it can be met.
func (c ShareConfig) splitHub(total int, speeds []Speed, fits []costFit, who []int) (shares []int, relaxed bool, err error) {
	x, err := c.splitHubStrict(total, speeds, fits, who)
	if err == nil || c.Rule != ShareOptimal || c.Deadline == 0 || c.Miss != MissRelax || !errors.Is(err, assign.ErrInfeasible) {
		return x, false, err
	}
	// The deadline no split meets is dropped for this round, and with it
	// the weights: the least makespan is what comes closest to it.
	q := c
	q.Deadline, q.Weights = 0, assign.Weights{Time: 1}
	y, rerr := q.splitHubStrict(total, speeds, fits, who)
	if rerr != nil {
		return nil, false, err
	}
	return y, true, nil
}

// splitHubStrict is splitHub under MissFail.
func (c ShareConfig) splitHubStrict(total int, speeds []Speed, fits []costFit, who []int) ([]int, error) {
	rates := make([]float64, len(who))
	for j, i := range who {
		rates[j] = speeds[i].Rate()
	}
	if c.Rule != ShareOptimal {
		return c.Split(total, rates, who)
	}
	fixed := make([]float64, len(who))
	for j, i := range who {
		rates[j], fixed[j] = fits[i].model(rates[j])
	}
	p, err := c.problem(total, rates, fixed, who)
	if err != nil {
		return nil, err
	}
	x, err := solveShares(p, who)
	if err == nil || p.Deadline == 0 || !errors.Is(err, assign.ErrInfeasible) {
		return x, err
	}
	err = fmt.Errorf("%w (%s)", err, describeModels(who, rates, fixed, fits))
	probe := false
	for _, i := range who {
		probe = probe || fits[i].probing()
	}
	if !probe {
		return nil, err
	}
	p.Deadline = 0
	y, perr := solveShares(p, who)
	if perr != nil {
		return nil, err
	}
	for j, i := range who {
		if fits[i].probing() && fits[i].separatesWith(y[j]) {
			return y, nil
		}
	}
	tries := 0
	for j, i := range who {
		if !fits[i].probing() || tries == probeTries {
			continue
		}
		hi := total - (len(who) - 1) // the others keep a sample each
		if k := p.Workers[j].Cap; k > 0 {
			hi = min(hi, k)
		}
		s, ok := fits[i].probeShare(y[j], hi)
		if !ok {
			continue
		}
		tries++
		q := p
		q.Workers = slices.Clone(p.Workers)
		q.Workers[j].Cap, q.Workers[j].Floor = s, (float64(s)-0.5)/float64(total)
		if z, zerr := solveShares(q, who); zerr == nil {
			return z, nil
		}
	}
	return nil, err
}

// describeModels words the models of the workers who (at most eight of
// them) for a deadline's error: its numbers are compute and Overhead
// together, so the error says what the hub believes the compute is.
func describeModels(who []int, speeds, fixed []float64, fits []costFit) string {
	var b strings.Builder
	b.WriteString("hub 0's models of compute per iteration, Share.Overhead not included:")
	for j, i := range who {
		if j == 8 {
			b.WriteString(" …")
			break
		}
		sep := ","
		if j == 0 {
			sep = ""
		}
		ms := func(sec float64) string { return strconv.FormatFloat(sec*1e3, 'g', 3, 64) + "ms" }
		switch {
		case speeds[j] == 0:
			fmt.Fprintf(&b, "%s worker %d unmeasured", sep, i)
		case fits[i].separated:
			fmt.Fprintf(&b, "%s worker %d %s + %s a sample", sep, i, ms(fixed[j]), ms(1/speeds[j]))
		default:
			fmt.Fprintf(&b, "%s worker %d %s a sample (proportional)", sep, i, ms(1/speeds[j]))
		}
	}
	return b.String()
}

// probeTries bounds the solver calls of a probe that holds a worker at a
// share (see splitHub).
const probeTries = 2

// optimal is the optimal rule on speeds (samples per second of each
// worker's per-sample part) and fixed (seconds per iteration of its
// compute that do not depend on its share; nil: none). A worker with no
// estimate (speed 0) counts at the mean speed and the mean fixed part of
// the others.
func (c ShareConfig) optimal(total int, speeds, fixed []float64, who []int) ([]int, error) {
	p, err := c.problem(total, speeds, fixed, who)
	if err != nil {
		return nil, err
	}
	return solveShares(p, who)
}

// problem is the assign.Problem the optimal rule solves.
func (c ShareConfig) problem(total int, speeds, fixed []float64, who []int) (assign.Problem, error) {
	n := len(speeds)
	if n == 0 {
		return assign.Problem{}, fmt.Errorf("ps: no workers to share %d samples among", total)
	}
	if total < n {
		return assign.Problem{}, fmt.Errorf("ps: optimal shares: a batch of %d samples cannot give each of %d workers the one sample its push needs", total, n)
	}
	for j := range speeds {
		if i := worker(who, j); i < 0 || len(c.Overhead) > 0 && i >= len(c.Overhead) || len(c.Cap) > 0 && i >= len(c.Cap) || len(c.Price) > 0 && i >= len(c.Price) {
			return assign.Problem{}, fmt.Errorf("ps: optimal shares: no worker %d in the share config", i)
		}
	}
	known, sum, sumFixed := 0, 0.0, 0.0
	for j, s := range speeds {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return assign.Problem{}, fmt.Errorf("ps: speed of worker %d is %v", worker(who, j), s)
		}
		if fixed != nil && !(fixed[j] >= 0 && !math.IsInf(fixed[j], 1)) {
			return assign.Problem{}, fmt.Errorf("ps: fixed compute of worker %d is %vs", worker(who, j), fixed[j])
		}
		if s > 0 {
			known++
			sum += s
			if fixed != nil {
				sumFixed += fixed[j]
			}
		}
	}
	fill, fillFixed := 1.0, 0.0
	if known > 0 {
		fill, fillFixed = sum/float64(known), sumFixed/float64(known)
	}
	measured := known > 0
	p := assign.Problem{Samples: total, Workers: make([]assign.Worker, n), Weights: c.Weights}
	if p.Weights == (assign.Weights{}) || !measured {
		// Unmeasured, the round is split evenly within the caps: prices
		// weighing equal guesses of cost would pile the batch on the
		// cheapest workers and measure the others at one sample, where a
		// step's fixed cost hides their speed.
		p.Weights = assign.Weights{Time: 1}
	}
	if measured {
		p.Deadline = c.Deadline.Seconds()
	}
	for j, s := range speeds {
		f := 0.0
		if fixed != nil {
			f = fixed[j]
		}
		if s == 0 {
			s, f = fill, fillFixed
		}
		i := worker(who, j)
		w := assign.Worker{Cost: 1 / s, Floor: 1 / float64(total)}
		if measured && len(c.Overhead) > 0 {
			w.Overhead = c.Overhead[i].Seconds()
		}
		if measured {
			w.Overhead += f
		}
		if len(c.Cap) > 0 {
			w.Cap = c.Cap[i]
		}
		if len(c.Price) > 0 {
			w.Price = c.Price[i]
		}
		p.Workers[j] = w
	}
	return p, nil
}

// solveShares solves p for the workers who (as Split names them).
func solveShares(p assign.Problem, who []int) ([]int, error) {
	a, err := assign.Solve(p)
	if err != nil {
		if !identity(who) {
			return nil, fmt.Errorf("ps: optimal shares of %d samples (the solver's workers 0..%d are workers %v): %w", p.Samples, len(p.Workers)-1, who, err)
		}
		return nil, fmt.Errorf("ps: optimal shares of %d samples: %w", p.Samples, err)
	}
	return a.Samples, nil
}

// identity reports whether who names workers 0..len(who)-1 in order (or
// is nil): then the solver's worker numbers are the hub's.
func identity(who []int) bool {
	for j, i := range who {
		if i != j {
			return false
		}
	}
	return true
}

// clone copies c's slices, so that a caller's later change to its
// HubConfig does not reach a running hub.
func (c ShareConfig) clone() ShareConfig {
	c.Overhead, c.Cap, c.Price = slices.Clone(c.Overhead), slices.Clone(c.Cap), slices.Clone(c.Price)
	return c
}

// worker is the hub worker number of the j-th speed.
func worker(who []int, j int) int {
	if who == nil {
		return j
	}
	return who[j]
}
