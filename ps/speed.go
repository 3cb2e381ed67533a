package ps

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Speed is an exponentially weighted estimate of a worker's samples per
// second, fed with each iteration's sample count and compute time.
type Speed struct {
	Alpha float64 // weight of the newest observation, in (0, 1]
	rate  float64
	seen  bool
}

// Observe folds in one iteration.
func (s *Speed) Observe(samples int, d time.Duration) {
	if samples <= 0 || d <= 0 {
		return
	}
	r := float64(samples) / d.Seconds()
	if !s.seen {
		s.rate, s.seen = r, true
		return
	}
	a := s.Alpha
	if a <= 0 || a > 1 {
		a = 0.3
	}
	s.rate = a*r + (1-a)*s.rate
}

// Rate is the current estimate (0 before any observation).
func (s *Speed) Rate() float64 { return s.rate }

// Shares splits a global batch of total samples over workers in proportion
// to their speeds (LB-BSP: x_i = X·v_i/Σv_j), rounding so that the shares
// add up to total exactly (largest remainder) and every worker with a
// positive speed gets at least one sample when total allows. Workers with
// no estimate yet count as the mean of the others (or 1 if none has one).
func Shares(total int, speeds []float64) ([]int, error) {
	n := len(speeds)
	if n == 0 {
		return nil, fmt.Errorf("ps: no workers to share %d samples among", total)
	}
	if total < 0 {
		return nil, fmt.Errorf("ps: negative batch %d", total)
	}
	v := make([]float64, n)
	known, sum := 0, 0.0
	for i, s := range speeds {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("ps: speed of worker %d is %v", i, s)
		}
		if s > 0 {
			known++
			sum += s
		}
	}
	fill := 1.0
	if known > 0 {
		fill = sum / float64(known)
	}
	total64 := 0.0
	for i, s := range speeds {
		v[i] = s
		if s == 0 {
			v[i] = fill
		}
		total64 += v[i]
	}
	shares := make([]int, n)
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, n)
	given := 0
	for i := range v {
		exact := float64(total) * v[i] / total64
		shares[i] = int(math.Floor(exact))
		given += shares[i]
		rems[i] = rem{i, exact - float64(shares[i])}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < total; k++ {
		shares[rems[k%n].i]++
		given++
	}
	// Nobody idles while another holds more than one sample.
	for i := range shares {
		if shares[i] == 0 && total >= n {
			j := 0
			for k := range shares {
				if shares[k] > shares[j] {
					j = k
				}
			}
			shares[j]--
			shares[i]++
		}
	}
	return shares, nil
}

// The optimal share rule's cost model (costFit). An observation k
// iterations old weighs fitForget^k; the shares separate a worker's fixed
// part from its per-sample part when their weighted standard deviation is
// at least fitSpread times their weighted mean; and the fixed part is
// clamped to [0, (1−fitMinPerSample)·ȳ], so that the per-sample part is at
// least fitMinPerSample of the mean time per sample.
const (
	fitForget       = 0.9
	fitSpread       = 0.1
	fitMinPerSample = 0.01
)

// costFit is hub 0's model of one worker's compute time for the optimal
// share rule: t ≈ fixed + perSample·x for a share of x samples. Samples
// per second (Speed) folds the fixed part (a step's setup, the optimizer
// step, a straggler's per-layer delays) into the per-sample cost, so a
// worker given few samples looks slower per sample than it is; the fit
// separates the two by weighted least squares over the worker's recent
// (samples, compute) observations, with exponential forgetting.
//
// It keeps the weighted sums incrementally (Welford's update, weights
// scaled by fitForget per observation): w = Σw_k, the weighted means mx
// and my of samples and seconds, and the co-moments sxx = Σw_k(x_k−mx)²
// and sxy = Σw_k(x_k−mx)(y_k−my).
type costFit struct {
	n                   int // observations
	w, mx, my, sxx, sxy float64
	// fixed is the fixed part of the latest fit that separated, in
	// seconds; separated says there has been one.
	fixed     float64
	separated bool
}

// observe folds in one iteration: samples computed in d. Like
// Speed.Observe it ignores an iteration without samples or time.
func (f *costFit) observe(samples int, d time.Duration) {
	if samples <= 0 || d <= 0 {
		return
	}
	x, y := float64(samples), d.Seconds()
	f.n++
	f.w *= fitForget
	f.sxx *= fitForget
	f.sxy *= fitForget
	f.w++
	dx := x - f.mx
	f.mx += dx / f.w
	f.my += (y - f.my) / f.w
	f.sxx += dx * (x - f.mx)
	f.sxy += dx * (y - f.my)
	if f.spread() {
		f.fixed, f.separated = f.clampFixed(f.my-f.sxy/f.sxx*f.mx), true
	}
}

// separatesWith reports whether one more iteration at a share of x
// samples would leave the fit's shares spread enough to separate the
// parts (spread depends on the shares alone, not on the times).
func (f costFit) separatesWith(x int) bool {
	f.observe(x, time.Nanosecond)
	return f.spread()
}

// probeShare is the share nearest from, within [1, hi], that
// separatesWith: the least above from if any, else the greatest below.
// ok is false when none does (or the fit has no observation).
//
// One more share u separates the fit when a quadratic in u with a
// positive leading coefficient is not negative (the spread after the
// update: (a+1)·λ·sxx + a·(u−mx)² ≥ fitSpread²·(a·mx+u)², a = λ·w), that
// is outside an interval; so once separatesWith fails next to from it is
// monotone from there on, and a bisection finds the nearest share.
func (f costFit) probeShare(from, hi int) (share int, ok bool) {
	if f.w == 0 {
		return 0, false
	}
	if from+1 <= hi {
		if f.separatesWith(from + 1) {
			return from + 1, true
		}
		if f.separatesWith(hi) {
			lo, up := from+1, hi // separatesWith: false at lo, true at up
			for up-lo > 1 {
				mid := lo + (up-lo)/2
				if f.separatesWith(mid) {
					up = mid
				} else {
					lo = mid
				}
			}
			return up, true
		}
	}
	if from-1 >= 1 {
		if f.separatesWith(from - 1) {
			return from - 1, true
		}
		if f.separatesWith(1) {
			lo, up := 1, from-1 // true at lo, false at up
			for up-lo > 1 {
				mid := lo + (up-lo)/2
				if f.separatesWith(mid) {
					lo = mid
				} else {
					up = mid
				}
			}
			return lo, true
		}
	}
	return 0, false
}

// probing reports whether the fit may be probed: it has not separated
// although the worker has reported at least two iterations.
func (f *costFit) probing() bool { return !f.separated && f.n >= 2 }

// spread reports whether the remembered shares vary enough to separate
// the two parts: a weighted standard deviation of at least fitSpread
// times their weighted mean.
func (f *costFit) spread() bool {
	s := fitSpread * f.mx
	return f.w > 0 && f.sxx > 0 && f.sxx >= f.w*s*s
}

// clampFixed clamps a fixed part (seconds) to [0, (1−fitMinPerSample)·my].
func (f *costFit) clampFixed(a float64) float64 {
	return min(max(a, 0), (1-fitMinPerSample)*f.my)
}

// model is the worker's cost model as the optimal rule takes it: the
// speed of its per-sample part (samples per second; 0: no estimate) and
// its fixed seconds per iteration. Until the shares have once varied
// enough to separate the parts it is the proportional estimate: rate, the
// worker's Speed, and no fixed part. From then on the fitted line always
// passes through the weighted means (mx, my): its fixed part is the
// latest separating fit's (refitted whenever the shares vary enough, held
// while they do not, as when the split has settled), clamped to
// [0, (1−fitMinPerSample)·my], and the per-sample part is
// (my − fixed)/mx seconds.
func (f *costFit) model(rate float64) (speed, fixed float64) {
	if !f.separated {
		return rate, 0
	}
	fixed = f.clampFixed(f.fixed)
	return f.mx / (f.my - fixed), fixed
}
