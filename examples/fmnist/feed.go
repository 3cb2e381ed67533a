package main

import (
	"errors"
	"fmt"

	"github.com/gorun/gorun/pipeline"
)

// feed deals one rank its training samples through the pipeline's
// sampler, epoch after epoch: each epoch's order (a permutation, draws
// with replacement under -sampling resample, or epoch 0's order again
// under fixed) dealt round-robin to the view's ranks as a Part, and this
// rank's share of it (Sampler.Indices) taken in batches.
//
// Two ways to take: take and commit, a step at a time of one batch size
// for every rank (the ring and BSP, SSP, ASP: every rank takes
// part.Steps(share) steps per epoch, the last of them short when the
// share does not divide), so that after an elastic view change the
// samples consumed are a prefix of the Part and Resume deals the rest;
// or draw, any number of samples across the end of an epoch (LB-BSP,
// whose batch the hub sizes every step).
type feed struct {
	s     pipeline.Sampler
	fixed bool // every epoch takes epoch 0's order
	rank  int
	epoch int // epochs begun, 0 first
	part  pipeline.Part
	idx   []int // this rank's samples of part, in training order
	step  int   // steps of part committed (take)
	pos   int   // samples of idx drawn (draw)
	buf   []int
}

// newFeed starts at epoch 0, dealt to ranks (job ranks, increasing: a
// View's Ranks).
func newFeed(s pipeline.Sampler, fixed bool, rank int, ranks []int) (*feed, error) {
	f := &feed{s: s, fixed: fixed, rank: rank}
	return f, f.begin(0, ranks)
}

// begin starts epoch, dealt to ranks.
func (f *feed) begin(epoch int, ranks []int) error {
	order := epoch
	if f.fixed {
		order = 0
	}
	part, err := f.s.Part(order, ranks)
	if err != nil {
		return err
	}
	if part.End == 0 {
		return fmt.Errorf("%d training samples for %d ranks: every rank needs one", f.s.N, len(ranks))
	}
	return f.use(epoch, part)
}

// use makes part, of epoch, the current one.
func (f *feed) use(epoch int, part pipeline.Part) error {
	idx, err := f.s.Indices(part, f.rank)
	if err != nil {
		return err
	}
	f.epoch, f.part, f.idx, f.step, f.pos = epoch, part, idx, 0, 0
	return nil
}

// take is the current step's batch, at most share samples: this rank's
// sample indices, and the factor to weigh its mean gradient by so that
// the plain average over the ranks is the mean over every sample of the
// step (1 when every rank's batch is as long: always, but at the end of a
// Part dealt anew by an elastic Resume, where shares differ by one and a
// batch may be empty). Once every step of the part is committed, the next
// epoch begins, dealt to ranks. Every rank takes the same steps.
func (f *feed) take(share int, ranks []int) ([]int, float64, error) {
	if share < 1 {
		return nil, 0, fmt.Errorf("batch share %d", share)
	}
	if f.step >= f.part.Steps(share) {
		if err := f.begin(f.epoch+1, ranks); err != nil {
			return nil, 0, err
		}
	}
	lo := min(f.step*share, len(f.idx))
	hi := min(lo+share, len(f.idx))
	total := 0
	for _, r := range f.part.Ranks {
		total += min(max(f.part.Len(r)-f.step*share, 0), share)
	}
	if total == 0 {
		return nil, 0, errors.New("an empty step") // cannot happen: step < Steps
	}
	return f.idx[lo:hi], float64((hi-lo)*len(f.part.Ranks)) / float64(total), nil
}

// commit records that the step take gave was applied.
func (f *feed) commit() { f.step++ }

// draw is the next n samples of this rank, going on into the next
// epoch's share (dealt to ranks) when this one's runs out; the slice is
// the feed's until the next draw.
func (f *feed) draw(n int, ranks []int) ([]int, error) {
	out := f.buf[:0]
	for len(out) < n {
		if f.pos >= len(f.idx) {
			if err := f.begin(f.epoch+1, ranks); err != nil {
				return nil, err
			}
		}
		k := min(n-len(out), len(f.idx)-f.pos)
		out = append(out, f.idx[f.pos:f.pos+k]...)
		f.pos += k
	}
	f.buf = out
	return out, nil
}

// feedState is how many float64s state holds.
const feedState = 5

// state is what a Resync carries of the feed (take's way): the epoch,
// its Part's order epoch, Start and End, and how many of its positions
// every rank together consumed in the steps committed, share samples a
// step (Part.Consumed). All are small integers, exact in a float64.
func (f *feed) state(share int) []float64 {
	return []float64{float64(f.epoch), float64(f.part.Epoch), float64(f.part.Start), float64(f.part.End), float64(f.part.Consumed(f.step, share))}
}

// resume, after an elastic view change, takes a state (the view's first
// rank's, from the Resync) and deals what is left of its Part to ranks,
// the new view's (Part.Resume): with what was consumed before, the epoch
// is still covered exactly once.
func (f *feed) resume(st []float64, ranks []int) error {
	if len(st) != feedState {
		return fmt.Errorf("feed state of %d values, want %d", len(st), feedState)
	}
	old := pipeline.Part{Epoch: int(st[1]), Start: int(st[2]), End: int(st[3]), Ranks: ranks}
	part, err := old.Resume(int(st[4]), ranks)
	if err != nil {
		return err
	}
	return f.use(int(st[0]), part)
}
