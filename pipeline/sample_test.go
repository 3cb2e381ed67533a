package pipeline

import (
	"math/rand/v2"
	"slices"
	"testing"
)

var sizes = []int{0, 1, 2, 3, 5, 7, 8, 13, 64, 97}

// viewOf is the ranks 0..m-1 with some gaps, as a view after losses.
func viewOf(rng *rand.Rand, m int) []int {
	var r []int
	for next := 0; len(r) < m; next++ {
		if rng.IntN(4) > 0 {
			r = append(r, next)
		}
	}
	return r
}

// TestShardsCover: for 1-9 ranks and several epochs, the ranks' shards
// are disjoint, equal in size, and together cover the epoch's order less
// its last N mod ranks positions exactly once; orders differ between
// epochs.
func TestShardsCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, repl := range []bool{false, true} {
		for _, n := range sizes {
			s := Sampler{N: n, Seed: 42, Replacement: repl}
			for m := 1; m <= 9; m++ {
				ranks := viewOf(rng, m)
				var prev []int
				for epoch := range 4 {
					p, err := s.Part(epoch, ranks)
					if err != nil {
						t.Fatal(err)
					}
					if p.End != n-n%m {
						t.Fatalf("N=%d, %d ranks: End %d", n, m, p.End)
					}
					var union []int
					for _, r := range ranks {
						idx, err := s.Indices(p, r)
						if err != nil {
							t.Fatal(err)
						}
						if len(idx) != n/m || p.Len(r) != n/m {
							t.Fatalf("N=%d, %d ranks: rank %d has %d (Len %d), want %d", n, m, r, len(idx), p.Len(r), n/m)
						}
						union = append(union, idx...)
					}
					want := s.Order(epoch)[:p.End]
					if !repl {
						// Disjoint: no index twice.
						u := slices.Clone(union)
						slices.Sort(u)
						if len(slices.Compact(u)) != len(union) {
							t.Fatalf("N=%d, %d ranks, epoch %d: shards overlap", n, m, epoch)
						}
					}
					slices.Sort(union)
					slices.Sort(want)
					if !slices.Equal(union, want) {
						t.Fatalf("N=%d, %d ranks, epoch %d: union %v, want %v", n, m, epoch, union, want)
					}
					full := s.Order(epoch)
					if !repl {
						sorted := slices.Sorted(slices.Values(full))
						for i, v := range sorted {
							if v != i {
								t.Fatalf("N=%d epoch %d: order is not a permutation", n, epoch)
							}
						}
					}
					if n >= 8 && prev != nil && slices.Equal(prev, full) {
						t.Fatalf("N=%d: epochs %d and %d have the same order", n, epoch-1, epoch)
					}
					prev = full
				}
			}
		}
	}
	// Another seed, another order.
	if n := 50; slices.Equal(Sampler{N: n, Seed: 1}.Order(0), Sampler{N: n, Seed: 2}.Order(0)) {
		t.Fatal("seeds 1 and 2 give the same order")
	}
}

// TestResume: a view change after k steps of any batch size hands the
// rest of the epoch to the new ranks so that what the old ranks consumed
// and what the new ones get cover the epoch exactly once, even through a
// second change; new shares differ by at most one and Steps agrees.
func TestResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 400 {
		n := sizes[trial%len(sizes)] + rng.IntN(30)
		s := Sampler{N: n, Seed: uint64(trial)}
		epoch := rng.IntN(5)
		p, err := s.Part(epoch, viewOf(rng, 1+rng.IntN(9)))
		if err != nil {
			t.Fatal(err)
		}
		var consumed []int
		for change := range 2 {
			batch := 1 + rng.IntN(5)
			steps := rng.IntN(p.Steps(batch) + 1)
			if change == 0 && p.Start != 0 {
				t.Fatal("Start")
			}
			for _, r := range p.Ranks {
				idx, _ := s.Indices(p, r)
				consumed = append(consumed, idx[:min(steps*batch, len(idx))]...)
			}
			next, err := p.Resume(p.Consumed(steps, batch), viewOf(rng, 1+rng.IntN(9)))
			if err != nil {
				t.Fatal(err)
			}
			p = next
		}
		got := slices.Clone(consumed)
		lens := map[int]bool{}
		for _, r := range p.Ranks {
			idx, _ := s.Indices(p, r)
			got = append(got, idx...)
			lens[len(idx)] = true
		}
		if len(lens) > 2 {
			t.Fatalf("trial %d: share sizes %v", trial, lens)
		}
		all := s.Order(epoch)
		slices.Sort(got)
		w := slices.Clone(all[:p.End])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("trial %d: consumed and resumed %v, want %v", trial, got, w)
		}
	}
}

func TestPartErrors(t *testing.T) {
	s := Sampler{N: 10}
	for _, ranks := range [][]int{nil, {1, 1}, {2, 1}, {-1}} {
		if _, err := s.Part(0, ranks); err == nil {
			t.Errorf("ranks %v: no error", ranks)
		}
	}
	p, _ := s.Part(0, []int{0, 1})
	if _, err := p.Resume(11, []int{0}); err == nil {
		t.Error("Resume past the end: no error")
	}
	if _, err := s.Indices(p, 5); err == nil {
		t.Error("Indices of a rank not in the part: no error")
	}
}
