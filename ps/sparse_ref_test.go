package ps

import (
	"math"
	"sort"
)

// Naive references for sparse pushes, shared by the tests of this
// package and by the process test (exported for package ps_test).

// naiveTopK returns the indices of v's k largest magnitudes by sorting:
// NaN above everything, then larger |x|, then the lower index; the
// result in increasing order.
func naiveTopK(v []float64, k int) []int {
	order := make([]int, len(v))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := v[order[a]], v[order[b]]
		switch {
		case math.IsNaN(x) || math.IsNaN(y):
			return math.IsNaN(x) && !math.IsNaN(y)
		default:
			return math.Abs(x) > math.Abs(y)
		}
	})
	out := append([]int(nil), order[:min(k, len(order))]...)
	sort.Ints(out)
	return out
}

// SparseRef is one worker's sparse pushes of one key, computed naively:
// partitions of PartElems elements, the selection by sorting (top-k) or
// from the shared seed (random-k), error feedback in float64.
type SparseRef struct {
	Cfg       SparseConfig
	Key       string
	PartElems int
	Resid     []float64 // error feedback's residual; nil until the first push
}

// RefPush returns what the worker's push of g at clock sends, as a dense
// vector (zeros where nothing is sent), and updates the residual.
func RefPush[T Float](r *SparseRef, g []T, clock int) []float64 {
	n := len(g)
	sent := make([]float64, n)
	ef := r.Cfg.ErrorFeedback
	if ef && r.Resid == nil {
		r.Resid = make([]float64, n)
	}
	for off := 0; off < n; off += r.PartElems {
		l := min(r.PartElems, n-off)
		v := make([]float64, l)
		for i := range v {
			if ef {
				r.Resid[off+i] += float64(g[off+i])
				v[i] = r.Resid[off+i]
			} else {
				v[i] = float64(g[off+i])
			}
		}
		k := SparseK(l, r.Cfg.Ratio)
		var idx []int
		if r.Cfg.Method == TopK {
			idx = naiveTopK(v, k)
		} else {
			for _, i := range randomK(l, k, randomSeed(r.Cfg.Seed, partKey(r.Key, off), uint32(clock))) {
				idx = append(idx, int(i))
			}
		}
		for _, i := range idx {
			x := float64(T(v[i])) // what travels
			sent[off+i] = x
			if ef {
				r.Resid[off+i] -= x
			}
		}
	}
	return sent
}
