package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ps"
)

// parseStragglers reads -straggler: -1 for none, or job ranks separated
// by commas (3, or 2,3), each at most once.
func parseStragglers(s string) ([]int, error) {
	if strings.TrimSpace(s) == "-1" {
		return nil, nil
	}
	var ranks []int
	for _, f := range strings.Split(s, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 0 {
			return nil, fmt.Errorf("-straggler %q: %q is not a rank (want ranks like 3 or 2,3, or -1 for none)", s, f)
		}
		if slices.Contains(ranks, r) {
			return nil, fmt.Errorf("-straggler %q: rank %d twice", s, r)
		}
		ranks = append(ranks, r)
	}
	return ranks, nil
}

// checkStragglers reports a straggler that is not a rank of a job of
// size ranks.
func checkStragglers(ranks []int, size int) error {
	for _, r := range ranks {
		if r >= size {
			return fmt.Errorf("-straggler: no rank %d in a job of %d ranks", r, size)
		}
	}
	return nil
}

// stragglerName is how the result line names the stragglers: none, rank
// 3 x4, or ranks 2,3 x4.
func stragglerName(ranks []int, slow float64) string {
	switch len(ranks) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprintf("rank %d x%g", ranks[0], slow)
	}
	return fmt.Sprintf("ranks %s x%g", ints(ranks), slow)
}

// parseWire reads -wire: the Comm's Config.Wire for it (float32 is
// WireFull: plain float32 buckets, 4 bytes an element).
func parseWire(s string) (collective.Wire, error) {
	switch s {
	case "full", "float32":
		return collective.WireFull, nil
	case "fp16":
		return collective.WireFP16, nil
	case "bf16":
		return collective.WireBF16, nil
	}
	return 0, fmt.Errorf("-wire %q: want full, float32, fp16 or bf16", s)
}

// parseCompress reads -compress: "none" or "" (dense pushes, the
// default), or a sparse push as ps.ParseSparse reads it ("topk:0.01",
// "randk:0.1", then ",noef", ",codec=NAME", ",seed=N").
func parseCompress(s string) (ps.SparseConfig, error) {
	if s == "none" {
		return ps.SparseConfig{}, nil
	}
	c, err := ps.ParseSparse(s)
	if err != nil {
		return c, fmt.Errorf("-compress %q: %w (want none, or topk:RATIO or randk:RATIO, then ,noef ,codec=raw|varint|s2|zstd ,seed=N)", s, err)
	}
	return c, nil
}

// checkPipeline checks the data pipeline's flags.
func checkPipeline(o options) error {
	switch o.sampling {
	case "shuffle", "resample", "fixed":
	default:
		return fmt.Errorf("-sampling %q: want shuffle, resample or fixed", o.sampling)
	}
	if !(o.filter >= 0) || math.IsInf(o.filter, 0) {
		return fmt.Errorf("-filter %v: want a tolerance in standard deviations, 0 or more (0: no filter)", o.filter)
	}
	if o.filter > 0 && !o.standardize {
		return errors.New("-filter needs -standardize (its tolerance is in standard deviations of the standardized pixels)")
	}
	return nil
}

// checkExchange checks the flags of how gradients travel against the
// mode: -wire and -powersgd are the ring's, -compress (sparse pushes
// through package ps) the hub modes'.
func checkExchange(o options) error {
	ring := o.mode == "ring"
	switch {
	case o.float32Ring() && !ring:
		return fmt.Errorf("-wire %s is for -mode ring (the hub modes push float64 gradients through package ps; -compress makes them sparse)", o.wireName)
	case o.compress.Method != ps.Dense && ring:
		return fmt.Errorf("-compress %v is for the hub modes (bsp, ssp, asp, lbbsp: sparse pushes through package ps); the ring has -wire and -powersgd", o.compress)
	case o.powersgd < 0:
		return fmt.Errorf("-powersgd %d: want the rank of the approximation, at least 1 (0: off)", o.powersgd)
	case o.powersgd > 0 && !ring:
		return fmt.Errorf("-powersgd is for -mode ring (the hub modes push through package ps)")
	case o.powersgd > 0 && o.float32Ring():
		return fmt.Errorf("-powersgd with -wire %s: pick one (PowerSGD sends float32 low-rank factors at full precision)", o.wireName)
	case o.powersgdStart < 0:
		return fmt.Errorf("-powersgd-start %d: want iterations, 0 or more", o.powersgdStart)
	}
	return nil
}

// rankOverhead is one rank's -overhead: the time it pays every
// iteration outside its compute.
type rankOverhead struct {
	rank int
	d    time.Duration
}

// overheads is -overhead: each listed rank once, in rank order.
type overheads []rankOverhead

// of is rank's overhead (0 when it is not listed).
func (ov overheads) of(rank int) time.Duration {
	for _, x := range ov {
		if x.rank == rank {
			return x.d
		}
	}
	return 0
}

// String writes ov as -overhead reads it: the ranks of each duration
// together, in the order of their lowest rank ("0:5ms;2,3:20ms"), or
// "none".
func (ov overheads) String() string {
	if len(ov) == 0 {
		return "none"
	}
	var groups []string
	done := make([]bool, len(ov))
	for i, x := range ov {
		if done[i] {
			continue
		}
		var ranks []int
		for j := i; j < len(ov); j++ {
			if !done[j] && ov[j].d == x.d {
				done[j] = true
				ranks = append(ranks, ov[j].rank)
			}
		}
		groups = append(groups, ints(ranks)+":"+x.d.String())
	}
	return strings.Join(groups, ";")
}

// parseOverhead reads -overhead: "none" or "" for none, or
// RANKS:DURATION entries separated by semicolons, RANKS job ranks
// separated by commas and DURATION a Go duration of 0 or more ("2,3:20ms",
// "0:5ms;2,3:20ms"), each rank at most once. Whether the ranks are in the
// job is checkOverhead's (it needs the job's size).
func parseOverhead(s string) (overheads, error) {
	if t := strings.TrimSpace(s); t == "" || t == "none" {
		return nil, nil
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("-overhead %q: %s (want RANKS:DURATION[;RANKS:DURATION...], e.g. 2,3:20ms or 0:5ms;2,3:20ms, or none)", s, fmt.Sprintf(format, a...))
	}
	var ov overheads
	for _, entry := range strings.Split(s, ";") {
		ranks, dur, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, bad("%q has no RANKS: before its duration", entry)
		}
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil {
			return nil, bad("%q is not a duration", strings.TrimSpace(dur))
		}
		if d < 0 {
			return nil, bad("duration %v is negative", d)
		}
		for _, f := range strings.Split(ranks, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r < 0 {
				return nil, bad("%q is not a rank", f)
			}
			if ov.has(r) {
				return nil, bad("rank %d twice", r)
			}
			ov = append(ov, rankOverhead{r, d})
		}
	}
	slices.SortFunc(ov, func(a, b rankOverhead) int { return cmp.Compare(a.rank, b.rank) })
	return ov, nil
}

func (ov overheads) has(rank int) bool {
	return slices.ContainsFunc(ov, func(x rankOverhead) bool { return x.rank == rank })
}

// checkOverhead reports a rank of -overhead that is not a rank of a job
// of size ranks.
func checkOverhead(ov overheads, size int) error {
	for _, x := range ov {
		if x.rank >= size {
			return fmt.Errorf("-overhead %s: no rank %d in a job of %d ranks", ov, x.rank, size)
		}
	}
	return nil
}
