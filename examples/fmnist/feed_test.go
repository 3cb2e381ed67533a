package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/pipeline"
)

// dealt is the naive reference of a rank's share of an epoch: position k
// of the order (k below N - N mod R) goes to the rank at index k mod R.
func dealt(order []int, ranks, index int) []int {
	end := len(order) - len(order)%ranks
	var out []int
	for k := index; k < end; k += ranks {
		out = append(out, order[k])
	}
	return out
}

// span is ranks 0..n-1.
func span(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// epochOf takes one epoch's steps through take and commit on every rank
// (in lockstep, as the ring does) and returns each rank's samples and the
// weights of its batches.
func epochOf(t *testing.T, fs []*feed, share int, ranks []int) (got [][]int, weights [][]float64) {
	t.Helper()
	got, weights = make([][]int, len(fs)), make([][]float64, len(fs))
	steps := -1
	for i, f := range fs {
		// The part ends once its last step is committed; the next take
		// begins the next epoch.
		if f.step >= f.part.Steps(share) {
			if err := f.begin(f.epoch+1, ranks); err != nil {
				t.Fatal(err)
			}
		}
		if s := f.part.Steps(share); steps >= 0 && s != steps {
			t.Fatalf("rank %d: %d steps, rank 0 %d", i, s, steps)
		} else {
			steps = s
		}
	}
	for range steps {
		for i, f := range fs {
			idx, w, err := f.take(share, ranks)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], idx...)
			weights[i] = append(weights[i], w)
			f.commit()
		}
	}
	return got, weights
}

// TestFeedSampling: through take and commit, every rank gets its
// round-robin share of each epoch's order (against a naive deal of
// Sampler.Order), full batches weighing 1; -sampling fixed gives every
// rank the same samples in the same order every epoch, shuffle a new
// order every epoch, resample draws with replacement. Sizes 1, primes,
// fewer samples than some batch, 1-5 ranks.
func TestFeedSampling(t *testing.T) {
	for _, sampling := range []string{"shuffle", "fixed", "resample"} {
		for _, n := range []int{1, 2, 3, 7, 10, 13, 64, 97} {
			for r := 1; r <= 5 && r <= n; r++ {
				for _, share := range []int{1, 3, 5, 200} {
					s := pipeline.Sampler{N: n, Seed: uint64(n*31 + r), Replacement: sampling == "resample"}
					fs := make([]*feed, r)
					for i := range fs {
						var err error
						if fs[i], err = newFeed(s, sampling == "fixed", i, span(r)); err != nil {
							t.Fatal(err)
						}
					}
					var epochs [][][]int
					for e := range 3 {
						got, weights := epochOf(t, fs, share, span(r))
						order := s.Order(e)
						if sampling == "fixed" {
							order = s.Order(0)
						}
						for i := range r {
							if want := dealt(order, r, i); !slices.Equal(got[i], want) {
								t.Fatalf("%s n=%d r=%d share=%d epoch %d rank %d: %v, want %v", sampling, n, r, share, e, i, got[i], want)
							}
							for _, w := range weights[i] {
								if w != 1 {
									t.Fatalf("%s n=%d r=%d share=%d: a batch of a whole epoch weighs %v", sampling, n, r, share, w)
								}
							}
							for _, x := range got[i] {
								if x < 0 || x >= n {
									t.Fatalf("sample %d of %d", x, n)
								}
							}
						}
						epochs = append(epochs, got)
					}
					for e := 1; e < 3; e++ {
						same := slices.EqualFunc(epochs[e], epochs[0], slices.Equal[[]int])
						if sampling == "fixed" && !same {
							t.Fatalf("fixed n=%d r=%d: epoch %d's order is not epoch 0's", n, r, e)
						}
						// Two permutations of 10 or more agree with
						// probability at most 1/10!.
						if sampling == "shuffle" && n >= 10 && same {
							t.Fatalf("shuffle n=%d r=%d: epoch %d has epoch 0's order", n, r, e)
						}
					}
					if sampling == "resample" && n >= 64 {
						// n draws from n with no repeat: probability
						// n!/n^n, below 1e-26 from 64.
						var all []int
						for _, g := range epochs[0] {
							all = append(all, g...)
						}
						slices.Sort(all)
						if len(slices.Compact(all)) == len(epochs[0][0])*r {
							t.Fatalf("resample n=%d r=%d: no sample drawn twice in an epoch", n, r)
						}
					}
				}
			}
		}
	}
}

// TestFeedResume: ranks lose one of theirs (or gain one) after k steps of
// an epoch; the survivors take the view's first rank's state and deal the
// rest: with what was taken before, the epoch's positions are covered
// exactly once, and each step's weights make the ranks' plain average the
// mean over the step's samples. Random sizes, ranks, batches and steps.
func TestFeedResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		n := 1 + rng.IntN(60)
		r := 1 + rng.IntN(min(n, 6))
		share := 1 + rng.IntN(8)
		sampling := []string{"shuffle", "fixed", "resample"}[rng.IntN(3)]
		s := pipeline.Sampler{N: n, Seed: rng.Uint64(), Replacement: sampling == "resample"}
		epoch := rng.IntN(3)
		old := span(r)
		fs := make([]*feed, r)
		for i := range r {
			var err error
			if fs[i], err = newFeed(s, sampling == "fixed", i, old); err != nil {
				t.Fatal(err)
			}
		}
		for e := 0; e < epoch; e++ {
			epochOf(t, fs, share, old)
		}
		if fs[0].step >= fs[0].part.Steps(share) {
			for _, f := range fs {
				if err := f.begin(f.epoch+1, old); err != nil {
					t.Fatal(err)
				}
			}
		}
		steps := fs[0].part.Steps(share)
		k := rng.IntN(steps + 1)
		var taken []int
		for range k {
			for _, f := range fs {
				idx, _, err := f.take(share, old)
				if err != nil {
					t.Fatal(err)
				}
				taken = append(taken, idx...)
				f.commit()
			}
		}
		// The new view: one rank lost, or one more (a rank joined).
		var view []int
		var next []*feed
		if r > 1 && (rng.IntN(2) == 0 || r == n) {
			lost := rng.IntN(r)
			for i := range r {
				if i != lost {
					view, next = append(view, i), append(next, fs[i])
				}
			}
		} else if r < n {
			joined, err := newFeed(s, sampling == "fixed", r, span(r+1))
			if err != nil {
				t.Fatal(err)
			}
			view, next = span(r+1), append(append([]*feed(nil), fs...), joined)
		} else { // one sample, one rank: the same view again (a restart in place)
			view, next = old, fs
		}
		st := next[0].state(share)
		newShare := 1 + rng.IntN(8)
		for _, f := range next {
			if err := f.resume(st, view); err != nil {
				t.Fatal(err)
			}
		}
		for step := range next[0].part.Steps(newShare) {
			lens := make([]int, len(next))
			ws := make([]float64, len(next))
			for i, f := range next {
				idx, w, err := f.take(newShare, view)
				if err != nil {
					t.Fatal(err)
				}
				if f.epoch != fs[0].epoch {
					t.Fatalf("step %d of the resumed part went to epoch %d", step, f.epoch)
				}
				taken = append(taken, idx...)
				lens[i], ws[i] = len(idx), w
				f.commit()
			}
			total := 0
			for _, l := range lens {
				total += l
			}
			for i := range next {
				if want := float64(lens[i]*len(next)) / float64(total); math.Abs(ws[i]-want) > 1e-12 {
					t.Fatalf("rank %d: weight %v for %d of %d samples over %d ranks", view[i], ws[i], lens[i], total, len(next))
				}
			}
		}
		order := s.Order(fs[0].part.Epoch)
		want := slices.Clone(order[:n-n%r])
		slices.Sort(want)
		slices.Sort(taken)
		if !slices.Equal(taken, want) {
			t.Fatalf("%s n=%d r=%d share=%d k=%d -> %v share %d: took %v, the epoch holds %v", sampling, n, r, share, k, view, newShare, taken, want)
		}
	}
}

// TestFeedDraw: LB-BSP's draws of any sizes give a rank its share of
// epoch after epoch, in order, across the epochs' ends.
func TestFeedDraw(t *testing.T) {
	for _, n := range []int{1, 5, 13, 40} {
		for r := 1; r <= 4 && r <= n; r++ {
			s := pipeline.Sampler{N: n, Seed: 9}
			for i := range r {
				f, err := newFeed(s, false, i, span(r))
				if err != nil {
					t.Fatal(err)
				}
				var got, want []int
				for e := range 4 {
					want = append(want, dealt(s.Order(e), r, i)...)
				}
				rng := rand.New(rand.NewPCG(uint64(n), uint64(i)))
				for len(got) < len(want) {
					idx, err := f.draw(1+rng.IntN(7), span(r))
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, idx...)
				}
				if got = got[:len(want)]; !slices.Equal(got, want) {
					t.Fatalf("n=%d r=%d rank %d: drew %v, want %v", n, r, i, got, want)
				}
			}
		}
	}
}

// TestFeedTooFew: fewer samples than ranks is an error, not a loop.
func TestFeedTooFew(t *testing.T) {
	if _, err := newFeed(pipeline.Sampler{N: 2}, false, 0, span(3)); err == nil {
		t.Fatal("2 samples for 3 ranks: no error")
	}
}

// FuzzFeedResume: a state of any values (it comes from a peer's Resync)
// either fails or gives a part whose samples all exist.
func FuzzFeedResume(f *testing.F) {
	f.Add(0.0, 0.0, 0.0, 12.0, 4.0, 12, 3, 1)
	f.Add(2.0, 2.0, 3.0, 12.0, 9.0, 12, 2, 0)
	f.Add(-1.0, 1e300, math.NaN(), math.Inf(1), -3.0, 7, 1, 0)
	f.Fuzz(func(t *testing.T, e, pe, start, end, consumed float64, n, ranks, rank int) {
		if n < 1 || n > 1000 || ranks < 1 || ranks > 8 || rank < 0 || rank >= ranks || ranks > n {
			return
		}
		fd, err := newFeed(pipeline.Sampler{N: n, Seed: 1}, false, rank, span(ranks))
		if err != nil {
			t.Fatal(err)
		}
		if err := fd.resume([]float64{e, pe, start, end, consumed}, span(ranks)); err != nil {
			return
		}
		for _, i := range fd.idx {
			if i < 0 || i >= n {
				t.Fatalf("sample %d of %d", i, n)
			}
		}
	})
}
