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
