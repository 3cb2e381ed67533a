package pipeline

import (
	"errors"
	"fmt"
)

// Dataset is N samples of D float32 features each, row-major in X
// (sample i is X[i*D:(i+1)*D]), with one integer label per sample in Y.
type Dataset struct {
	N, D int
	X    []float32
	Y    []int
}

// ErrEmpty is returned by Prepare when no rank holds a sample.
var ErrEmpty = errors.New("pipeline: no samples")

// Row is sample i's features, a view into X.
func (d *Dataset) Row(i int) []float32 { return d.X[i*d.D : (i+1)*d.D] }

// Slice is the samples [lo, hi) as a Dataset sharing d's memory.
func (d *Dataset) Slice(lo, hi int) *Dataset {
	return &Dataset{N: hi - lo, D: d.D, X: d.X[lo*d.D : hi*d.D], Y: d.Y[lo:hi]}
}

// check reports a Dataset whose sizes disagree.
func (d *Dataset) check() error {
	if d == nil {
		return errors.New("pipeline: nil Dataset")
	}
	if d.N < 0 || d.D < 0 || len(d.Y) != d.N || len(d.X) != d.N*d.D {
		return fmt.Errorf("pipeline: Dataset has N=%d D=%d but %d features and %d labels", d.N, d.D, len(d.X), len(d.Y))
	}
	return nil
}
