package pipeline

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// onOne is a one-rank Group: its sums are the identity.
type onOne struct{}

func (onOne) Index() int                                    { return 0 }
func (onOne) Size() int                                     { return 1 }
func (onOne) AllReduceSum(context.Context, []float64) error { return nil }

// TestBatches: each rank's batches hold its share's rows and labels in
// order, in Steps batches (the last short or empty), and the buffers are
// the iterator's, reused.
func TestBatches(t *testing.T) {
	const n, d = 23, 2
	ds := &Dataset{N: n, D: d, X: make([]float32, n*d), Y: make([]int, n)}
	for i := range n {
		ds.X[i*d], ds.X[i*d+1], ds.Y[i] = float32(i), float32(-i), i
	}
	cfg := DefaultConfig()
	cfg.Standardize = false
	p, err := New(ds, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Batches(Part{Ranks: []int{0}}, 0, 4); !errors.Is(err, ErrNotPrepared) {
		t.Fatalf("before Prepare: %v", err)
	}
	if _, err := p.Prepare(context.Background(), onOne{}); err != nil {
		t.Fatal(err)
	}
	part, err := p.Part(3, []int{0, 2, 5})
	if err != nil {
		t.Fatal(err)
	}
	part, err = part.Resume(part.Consumed(1, 4), []int{1, 2, 3, 4}) // 9 left for 4 ranks: 3, 2, 2, 2
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range part.Ranks {
		idx, _ := p.Sampler().Indices(part, r)
		seq, err := p.Batches(part, r, 2)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		var prev *float32
		steps := 0
		for x, y := range seq {
			if len(x) != len(y)*d || len(y) > 2 {
				t.Fatalf("rank %d: batch of %d features, %d labels", r, len(x), len(y))
			}
			for k, l := range y {
				if x[k*d] != float32(l) || x[k*d+1] != -float32(l) {
					t.Fatalf("rank %d: row %v for label %d", r, x[k*d:k*d+2], l)
				}
			}
			if len(x) > 0 {
				if prev != nil && &x[0] != prev {
					t.Fatalf("rank %d: a new buffer per batch", r)
				}
				prev = &x[0]
			}
			got = append(got, y...)
			steps++
		}
		if steps != part.Steps(2) || steps != 2 {
			t.Fatalf("rank %d: %d steps, want %d", r, steps, part.Steps(2))
		}
		if !slices.Equal(got, idx) {
			t.Fatalf("rank %d: labels %v, want %v", r, got, idx)
		}
	}
	if _, err := p.Batches(part, 0, 2); err == nil {
		t.Fatal("a rank not in the part: no error")
	}
	if _, err := p.Batches(part, 1, 0); err == nil {
		t.Fatal("batch 0: no error")
	}
}
