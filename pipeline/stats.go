package pipeline

import (
	"context"
	"fmt"
	"math"

	"github.com/gorun/gorun/collective"
)

// Group is what the statistics stage needs from the job: this rank's
// index among the ranks taking part, their number, and an element-wise
// sum of a float64 buffer over all of them, in place, with the same
// result on every rank. Every rank calls AllReduceSum the same number of
// times with buffers of the same length. FromComm adapts a
// collective.Comm; tests may supply their own.
type Group interface {
	Index() int
	Size() int
	AllReduceSum(ctx context.Context, buf []float64) error
}

// FromComm is c as a Group: Index is c's place in its current view
// (its rank, without Elastic), Size the view's size, and AllReduceSum a
// collective.AllReduce with collective.Sum, whose errors (ErrPeerLost,
// ErrViewChanged, ...) it returns wrapped.
func FromComm(c *collective.Comm) Group { return commGroup{c} }

type commGroup struct{ c *collective.Comm }

func (g commGroup) Index() int { return g.c.View().Index(g.c.Rank()) }
func (g commGroup) Size() int  { return g.c.Size() }
func (g commGroup) AllReduceSum(ctx context.Context, buf []float64) error {
	return collective.AllReduce(ctx, g.c, buf, collective.Sum)
}

// Stats are per-feature statistics over every rank's samples: Count
// samples, Mean and population variance Var (divided by Count).
type Stats struct {
	Count int
	Mean  []float64
	Var   []float64
}

// Fit computes the statistics of the union of every rank's local
// samples, which may differ in number (zero included). It takes two
// all-reduces, in float64: the count and per-feature sums, then the sums
// of squared deviations from the global mean (two passes, so a large
// mean does not cancel the variance away). Every rank must call it, with
// the same D. An error of the group is returned as is, wrapped; the
// result is then unusable.
func Fit(ctx context.Context, g Group, local *Dataset) (Stats, error) {
	if err := local.check(); err != nil {
		return Stats{}, err
	}
	d := local.D
	buf := make([]float64, d+1)
	buf[d] = float64(local.N)
	for i := range local.N {
		for j, x := range local.Row(i) {
			buf[j] += float64(x)
		}
	}
	if err := g.AllReduceSum(ctx, buf); err != nil {
		return Stats{}, fmt.Errorf("pipeline: stats: sums: %w", err)
	}
	count := buf[d]
	if count == 0 {
		return Stats{}, ErrEmpty
	}
	s := Stats{Count: int(count), Mean: make([]float64, d), Var: make([]float64, d)}
	for j := range d {
		s.Mean[j] = buf[j] / count
	}
	sq := buf[:d]
	clear(sq)
	for i := range local.N {
		for j, x := range local.Row(i) {
			dx := float64(x) - s.Mean[j]
			sq[j] += dx * dx
		}
	}
	if err := g.AllReduceSum(ctx, sq); err != nil {
		return Stats{}, fmt.Errorf("pipeline: stats: squares: %w", err)
	}
	for j := range d {
		s.Var[j] = sq[j] / count
	}
	return s, nil
}

// Standardize replaces every feature x of d, in place, by
// (x - Mean) / sqrt(Var + eps). A feature of zero variance becomes 0.
func (s Stats) Standardize(d *Dataset, eps float64) {
	scale := make([]float64, len(s.Mean))
	for j, v := range s.Var {
		scale[j] = 1 / math.Sqrt(v+eps)
	}
	for i := range d.N {
		row := d.Row(i)
		for j, x := range row {
			row[j] = float32((float64(x) - s.Mean[j]) * scale[j])
		}
	}
}

// keep reports whether a standardized sample stays under the filter
// rule: it does unless every one of its features lies within tol of 0,
// that is within tol standard deviations of the mean.
func keep(row []float32, tol float64) bool {
	for _, z := range row {
		if math.Abs(float64(z)) > tol {
			return true
		}
	}
	return false
}

// Filter removes, in place, the standardized samples that every feature
// of lies within tol of 0 (keep's rule), keeping the order of the rest,
// and returns how many it removed.
func Filter(d *Dataset, tol float64) int {
	n := 0
	for i := range d.N {
		if !keep(d.Row(i), tol) {
			continue
		}
		if n != i {
			copy(d.Row(n), d.Row(i))
			d.Y[n] = d.Y[i]
		}
		n++
	}
	dropped := d.N - n
	d.N, d.X, d.Y = n, d.X[:n*d.D], d.Y[:n]
	return dropped
}
