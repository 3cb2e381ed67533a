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

func parseShare(s string) (ShareConfig, error) {
	var c ShareConfig
	name, opts, hasOpts := strings.Cut(strings.TrimSpace(s), ":")
	if name == "" {
		return c, fmt.Errorf("no rule (want proportional or optimal)")
	}
	rule, err := ParseShareRule(strings.TrimSpace(name))
	if err != nil {
		return c, fmt.Errorf("unknown rule %q (want proportional or optimal)", name)
	}
	c.Rule = rule
	if !hasOpts {
		return c, nil
	}
	if rule != ShareOptimal {
		return c, fmt.Errorf("the %v rule takes no options (deadline, weights, prices, caps and overheads are the optimal rule's)", rule)
	}
	seen := map[string]bool{}
	workers, first := -1, ""
	list := func(key, v string) ([]string, error) {
		if n := strings.Count(v, "/") + 1; n > assign.DefaultConfig().MaxWorkers {
			return nil, fmt.Errorf("%s: %d entries; the optimal rule solves for at most %d workers", key, n, assign.DefaultConfig().MaxWorkers)
		}
		items := strings.Split(v, "/")
		if workers >= 0 && len(items) != workers {
			return nil, fmt.Errorf("%s has %d entries and %s %d: every list has one entry per worker", key, len(items), first, workers)
		}
		workers, first = len(items), key
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		return items, nil
	}
	for _, opt := range strings.Split(opts, ",") {
		key, v, ok := strings.Cut(opt, "=")
		key, v = strings.TrimSpace(key), strings.TrimSpace(v)
		if !ok || key == "" {
			return c, fmt.Errorf("option %q: want key=value (deadline, miss, time, resource, price, cap or overhead)", strings.TrimSpace(opt))
		}
		if seen[key] {
			return c, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		switch key {
		case "miss":
			switch strings.ToLower(v) {
			case "relax":
				c.Miss = MissRelax
			case "fail":
				c.Miss = MissFail
			default:
				return c, fmt.Errorf("miss=%s: want relax or fail", v)
			}
		case "deadline":
			if c.Deadline, err = parseShareDuration(v); err != nil {
				return c, fmt.Errorf("deadline: %w", err)
			}
		case "time":
			if c.Weights.Time, err = parseShareFloat(v); err != nil {
				return c, fmt.Errorf("time: %w", err)
			}
		case "resource":
			if c.Weights.Resource, err = parseShareFloat(v); err != nil {
				return c, fmt.Errorf("resource: %w", err)
			}
		case "accuracy":
			return c, fmt.Errorf("accuracy: an LB-BSP batch is fixed, so there is no accuracy term to weigh")
		case "price":
			items, err := list(key, v)
			if err != nil {
				return c, err
			}
			c.Price = make([]float64, len(items))
			for i, it := range items {
				if c.Price[i], err = parseShareFloat(it); err != nil {
					return c, fmt.Errorf("price of worker %d: %w", i, err)
				}
			}
		case "cap":
			items, err := list(key, v)
			if err != nil {
				return c, err
			}
			c.Cap = make([]int, len(items))
			for i, it := range items {
				k, err := strconv.ParseInt(it, 10, 64)
				switch {
				case err != nil:
					return c, fmt.Errorf("cap of worker %d: %q is not a whole number of samples", i, it)
				case k < 0 || k > assign.MaxSamples:
					return c, fmt.Errorf("cap of worker %d: %d samples is not in [0, %d] (0: no cap)", i, k, assign.MaxSamples)
				}
				c.Cap[i] = int(k)
			}
		case "overhead":
			items, err := list(key, v)
			if err != nil {
				return c, err
			}
			c.Overhead = make([]time.Duration, len(items))
			for i, it := range items {
				if c.Overhead[i], err = parseShareDuration(it); err != nil {
					return c, fmt.Errorf("overhead of worker %d: %w", i, err)
				}
			}
		default:
			return c, fmt.Errorf("unknown option %q (want deadline, miss, time, resource, price, cap or overhead)", key)
		}
	}
	if seen["miss"] && c.Deadline == 0 {
		return c, fmt.Errorf("miss=%v without a deadline: it says what a missed deadline does", c.Miss)
	}
	// The hub's own check, for the number of workers the lists name: it
	// should find nothing the options above let through.
	if err := c.validate(max(1, workers)); err != nil {
		return c, err
	}
	return c, nil
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
