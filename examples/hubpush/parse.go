package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/ps"
)

// Caps on what the flags may ask for, checked before anything is
// allocated: a rank holds a few copies of every key.
const (
	maxSettings = 64
	maxLayers   = 4096
	maxElements = 1 << 28 // float32 elements over all layers: 1 GiB a copy
)

// parseSettings reads -settings: ps.ParseSparse's forms separated by
// commas, where an option (noef, codec=NAME, seed=N) belongs to the
// setting before it: "dense,topk:0.01,codec=raw,randk:0.1" is three
// settings. Each is returned as ps.SparseConfig; a setting named twice is
// refused (its rows could not be told apart).
func parseSettings(s string) ([]ps.SparseConfig, error) {
	var groups []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "dense" || strings.HasPrefix(f, "topk:") || strings.HasPrefix(f, "randk:"):
			if len(groups) == maxSettings {
				return nil, fmt.Errorf("-settings: more than %d settings", maxSettings)
			}
			groups = append(groups, f)
		case len(groups) == 0 || f == "":
			return nil, fmt.Errorf("-settings %q: %q is not a setting (want dense, topk:R or randk:R, each optionally followed by noef, codec=NAME, seed=N)", s, f)
		default:
			groups[len(groups)-1] += "," + f
		}
	}
	out := make([]ps.SparseConfig, 0, len(groups))
	seen := map[string]bool{}
	for _, g := range groups {
		c, err := ps.ParseSparse(g)
		if err != nil {
			return nil, fmt.Errorf("-settings: %w", err)
		}
		name := c.String()
		if seen[name] {
			return nil, fmt.Errorf("-settings %q: %s twice", s, name)
		}
		seen[name] = true
		out = append(out, c)
	}
	return out, nil
}

// parseLayers reads -layers: element counts separated by commas, each a
// whole number optionally followed by K, M or G (times 2^10, 2^20, 2^30).
// The sum is capped by maxElements.
func parseLayers(s string) ([]int, error) {
	fields := strings.Split(s, ",")
	if len(fields) > maxLayers {
		return nil, fmt.Errorf("-layers: more than %d layers", maxLayers)
	}
	out := make([]int, 0, len(fields))
	total := 0
	for _, f := range fields {
		f = strings.TrimSpace(f)
		num, mult := f, 1
		if i := len(f) - 1; i > 0 {
			switch f[i] {
			case 'K':
				num, mult = f[:i], 1<<10
			case 'M':
				num, mult = f[:i], 1<<20
			case 'G':
				num, mult = f[:i], 1<<30
			}
		}
		n, err := strconv.ParseUint(num, 10, 32)
		if err != nil || n > maxElements/uint64(mult) {
			return nil, fmt.Errorf("-layers %q: %q is not an element count of at most %d (want e.g. 4096, 256K, 1M)", s, f, maxElements)
		}
		total += int(n) * mult
		if total > maxElements {
			return nil, fmt.Errorf("-layers %q: more than %d elements in all", s, maxElements)
		}
		out = append(out, int(n)*mult)
	}
	return out, nil
}

// median is the median of v (the mean of the middle two of an even
// count), 0 for none. v is not changed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// more decides, after a block, whether to time another: rounds is how
// many rounds each setting has timed, spent the time they took, summed
// over every setting. With target 0 the job times exactly minRounds;
// otherwise at least minRounds, and until spent reaches target for each
// setting.
func more(rounds, minRounds, settings int, spent, target time.Duration) bool {
	if rounds < minRounds {
		return true
	}
	return target > 0 && spent < time.Duration(settings)*target
}

// blockRounds is how many rounds the block that starts at round r runs:
// block, or fewer at the end of a run of exactly warmup+rounds rounds
// (target 0).
func blockRounds(r, block, warmup, rounds int, target time.Duration) int {
	if target > 0 {
		return block
	}
	return max(0, min(block, warmup+rounds-r))
}

// errCheck: the pulled sum did not match the gradients less the
// residuals.
var errCheck = errors.New("hubpush: the pulled sums do not match the gradients pushed")

// checkTolerance bounds |pulled - want| for one element of a key after
// rounds rounds of workers workers: want is Σ gradients less the
// residuals (float64), abs the sum of their magnitudes. The pulled value
// is the hub's float64 sum rounded to float32 (half an ulp: 2^-24·|want|),
// and the hub, the workers' residuals and the all-reduce each add
// float64 roundings (each at most 2^-53 of a partial sum, itself at most
// abs), a few per round and worker.
func checkTolerance(want, abs float64, rounds, workers int) float64 {
	return math.Abs(want)*0x1p-24 + float64(4*rounds+8)*float64(workers)*0x1p-52*abs
}
