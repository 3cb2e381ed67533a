package ps

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/assign"
	"github.com/gorun/gorun/internal/jobenv"
)

// The text form of a ShareConfig, as gorun --hub-share and
// GORUN_HUB_SHARE give it to hub 0:
//
//	proportional
//	optimal
//	optimal:deadline=1.5s,time=1,resource=0.2,price=1/1/0.5/0.5,cap=0/0/64/64,overhead=0s/0s/20ms/20ms
//
// After "optimal:" come options separated by commas, in any order, each
// at most once:
//
//	deadline=D       Deadline, a Go duration (0: none)
//	miss=relax|fail  Miss: what a round no split meets the deadline by
//	                 gets (default relax: the least makespan that round)
//	time=W           Weights.Time
//	resource=W       Weights.Resource (with price); time and resource
//	                 both left out (or 0) mean {Time: 1}
//	price=P/P/...    Price, one entry per worker, in worker order
//	cap=N/N/...      Cap, samples (0: no cap)
//	overhead=D/D/... Overhead, Go durations
//
// The per-worker lists are separated by slashes and all have the same
// length, which must be the job's number of workers (NewHub checks it;
// the text alone cannot).

// maxShareSpec bounds the text form's length: 128 workers' three lists
// take a few KiB.
const maxShareSpec = 16 << 10

// maxShareValue bounds prices and weights as package assign does (its
// solver refuses magnitudes above 1e12), so that a spec it would refuse
// at the first share request is refused when it is read.
const maxShareValue = 1e12

// ParseShareConfig reads a ShareConfig in its text form (see above). The
// errors name the option and the worker at fault. It checks everything
// that does not depend on the job's size: Validate(workers), or NewHub,
// checks the lists against the number of workers.
func ParseShareConfig(s string) (ShareConfig, error) {
	if len(s) > maxShareSpec {
		return ShareConfig{}, fmt.Errorf("ps: hub share rule of %d bytes: longer than %d", len(s), maxShareSpec)
	}
	c, err := parseShare(s)
	if err != nil {
		return ShareConfig{}, fmt.Errorf("ps: hub share rule %q: %w", s, err)
	}
	return c, nil
}

// parseShare is ParseShareConfig's parser: the rule's name, then, for the
// optimal rule, each key=value option, then the checks that span them.
func parseShare(s string) (ShareConfig, error) {
	var c ShareConfig
	name, opts, hasOpts := strings.Cut(strings.TrimSpace(s), ":")
	rule, err := parseShareName(name)
	if err != nil {
		return c, err
	}
	c.Rule = rule
	if !hasOpts {
		return c, nil
	}
	if rule != ShareOptimal {
		return c, fmt.Errorf("the %v rule takes no options (deadline, weights, prices, caps and overheads are the optimal rule's)", rule)
	}
	o := shareOptions{seen: map[string]bool{}, workers: -1}
	for _, opt := range strings.Split(opts, ",") {
		if err := o.set(&c, opt); err != nil {
			return c, err
		}
	}
	if o.seen["miss"] && c.Deadline == 0 {
		return c, fmt.Errorf("miss=%v without a deadline: it says what a missed deadline does", c.Miss)
	}
	// The hub's own check, for the number of workers the lists name: it
	// should find nothing the options above let through.
	if err := c.validate(max(1, o.workers)); err != nil {
		return c, err
	}
	return c, nil
}

// parseShareName reads the rule's name, the text before any options.
func parseShareName(name string) (ShareRule, error) {
	if name == "" {
		return 0, fmt.Errorf("no rule (want proportional or optimal)")
	}
	rule, err := ParseShareRule(strings.TrimSpace(name))
	if err != nil {
		return 0, fmt.Errorf("unknown rule %q (want proportional or optimal)", name)
	}
	return rule, nil
}

// shareOptions is what parseShare has read of the optimal rule's options
// so far: the keys given (each may be given once), and the length of the
// per-worker lists, which all must share, with the key of the first list.
type shareOptions struct {
	seen    map[string]bool
	workers int    // -1 until a list is read
	first   string // the list that set workers
}

// set reads one key=value option into c.
func (o *shareOptions) set(c *ShareConfig, opt string) error {
	key, v, ok := strings.Cut(opt, "=")
	key, v = strings.TrimSpace(key), strings.TrimSpace(v)
	if !ok || key == "" {
		return fmt.Errorf("option %q: want key=value (deadline, miss, time, resource, price, cap or overhead)", strings.TrimSpace(opt))
	}
	if o.seen[key] {
		return fmt.Errorf("%s given twice", key)
	}
	o.seen[key] = true
	var err error
	switch key {
	case "miss":
		c.Miss, err = parseShareMiss(v)
		return err
	case "deadline":
		if c.Deadline, err = parseShareDuration(v); err != nil {
			return fmt.Errorf("deadline: %w", err)
		}
	case "time":
		if c.Weights.Time, err = parseShareFloat(v); err != nil {
			return fmt.Errorf("time: %w", err)
		}
	case "resource":
		if c.Weights.Resource, err = parseShareFloat(v); err != nil {
			return fmt.Errorf("resource: %w", err)
		}
	case "accuracy":
		return fmt.Errorf("accuracy: an LB-BSP batch is fixed, so there is no accuracy term to weigh")
	case "price":
		c.Price, err = perWorker(o, key, v, parseShareFloat)
	case "cap":
		c.Cap, err = perWorker(o, key, v, parseShareCap)
	case "overhead":
		c.Overhead, err = perWorker(o, key, v, parseShareDuration)
	default:
		return fmt.Errorf("unknown option %q (want deadline, miss, time, resource, price, cap or overhead)", key)
	}
	return err
}

// list splits a per-worker list into its entries, and checks that it has
// as many as the lists before it, and no more than the solver takes.
func (o *shareOptions) list(key, v string) ([]string, error) {
	if n := strings.Count(v, "/") + 1; n > assign.DefaultConfig().MaxWorkers {
		return nil, fmt.Errorf("%s: %d entries; the optimal rule solves for at most %d workers", key, n, assign.DefaultConfig().MaxWorkers)
	}
	items := strings.Split(v, "/")
	if o.workers >= 0 && len(items) != o.workers {
		return nil, fmt.Errorf("%s has %d entries and %s %d: every list has one entry per worker", key, len(items), o.first, o.workers)
	}
	o.workers, o.first = len(items), key
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items, nil
}

// perWorker reads the per-worker list v of option key, each entry with
// parse; an error names the option and the worker.
func perWorker[T any](o *shareOptions, key, v string, parse func(string) (T, error)) ([]T, error) {
	items, err := o.list(key, v)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(items))
	for i, it := range items {
		if out[i], err = parse(it); err != nil {
			return nil, fmt.Errorf("%s of worker %d: %w", key, i, err)
		}
	}
	return out, nil
}

// parseShareMiss reads miss=: what a missed deadline does.
func parseShareMiss(v string) (DeadlineMiss, error) {
	switch strings.ToLower(v) {
	case "relax":
		return MissRelax, nil
	case "fail":
		return MissFail, nil
	}
	return 0, fmt.Errorf("miss=%s: want relax or fail", v)
}

// parseShareCap reads one worker's cap, in samples (0: no cap).
func parseShareCap(v string) (int, error) {
	k, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a whole number of samples", v)
	case k < 0 || k > assign.MaxSamples:
		return 0, fmt.Errorf("%d samples is not in [0, %d] (0: no cap)", k, assign.MaxSamples)
	}
	return int(k), nil
}

func parseShareFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a number", v)
	case !(f >= 0 && f <= maxShareValue):
		return 0, fmt.Errorf("%v is not in [0, %g]", f, maxShareValue)
	}
	return f, nil
}

func parseShareDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (e.g. 20ms, 1.5s)", v)
	case d < 0:
		return 0, fmt.Errorf("%v is negative", d)
	}
	return d, nil
}

// String is c in ParseShareConfig's form: the rule, then the options
// that are set, in the order deadline, miss, time, resource, price, cap,
// overhead. For every configuration ParseShareConfig returns,
// ParseShareConfig(c.String()) is c again (an empty list reads back as
// none).
func (c ShareConfig) String() string {
	var opts []string
	if c.Deadline != 0 {
		opts = append(opts, "deadline="+c.Deadline.String())
	}
	if c.Miss != MissRelax {
		opts = append(opts, "miss="+c.Miss.String())
	}
	for _, w := range []struct {
		name string
		v    float64
	}{{"time", c.Weights.Time}, {"resource", c.Weights.Resource}, {"accuracy", c.Weights.Accuracy}} {
		if w.v != 0 {
			opts = append(opts, w.name+"="+formatShareFloat(w.v))
		}
	}
	if len(c.Price) > 0 {
		opts = append(opts, "price="+joinShare(c.Price, formatShareFloat))
	}
	if len(c.Cap) > 0 {
		opts = append(opts, "cap="+joinShare(c.Cap, strconv.Itoa))
	}
	if len(c.Overhead) > 0 {
		opts = append(opts, "overhead="+joinShare(c.Overhead, time.Duration.String))
	}
	if len(opts) == 0 {
		return c.Rule.String()
	}
	return c.Rule.String() + ":" + strings.Join(opts, ",")
}

func formatShareFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func joinShare[T any](v []T, f func(T) string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = f(x)
	}
	return strings.Join(s, "/")
}

// Validate reports what keeps a hub of the given number of workers from
// taking c: NewHub's check of HubConfig.Share, for a launcher or a test
// to run before any hub starts.
func (c ShareConfig) Validate(workers int) error { return c.validate(workers) }

// shareFromEnv reads GORUN_HUB_SHARE (gorun --hub-share): the default
// rule when it is unset.
func shareFromEnv(env *jobenv.Reader) (ShareConfig, error) {
	v, ok := env.Lookup(jobenv.HubShareVar)
	if !ok {
		return ShareConfig{}, nil
	}
	c, err := ParseShareConfig(v)
	if err != nil {
		return ShareConfig{}, fmt.Errorf("%s: %w", jobenv.HubShareVar, err)
	}
	return c, nil
}
