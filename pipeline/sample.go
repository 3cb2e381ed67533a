package pipeline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Sampler draws every epoch's order of N samples from Seed alone, so
// that every rank that holds the same Sampler draws the same orders
// without talking to the others. (The draw uses math/rand/v2's PCG: every
// rank must run the same build.)
type Sampler struct {
	N    int
	Seed uint64
	// Replacement draws N indices uniformly with replacement each epoch
	// (repeated random sampling) instead of a permutation.
	Replacement bool
}

// Order is epoch's sequence of sample indices: a permutation of 0..N-1,
// or with Replacement N independent uniform draws, from a PCG seeded by
// (Seed, epoch).
func (s Sampler) Order(epoch int) []int {
	r := rand.New(rand.NewPCG(s.Seed, uint64(epoch)))
	if s.Replacement {
		o := make([]int, s.N)
		for i := range o {
			o[i] = r.IntN(s.N)
		}
		return o
	}
	return r.Perm(s.N)
}

// Part is the share of an epoch's order still to be trained on, and the
// ranks it is dealt to: the positions [Start, End) of Order(Epoch), dealt
// round-robin over Ranks (position Start+k goes to Ranks[k % len(Ranks)]).
// Round-robin means that after every rank took the same number of
// samples, what was taken is a prefix of [Start, End): that is what lets
// Resume hand the rest to a new set of ranks.
type Part struct {
	Epoch, Start, End int
	Ranks             []int
}

// Part is epoch's part for ranks (job ranks in increasing order, a
// View's Ranks): positions [0, End) with End = N - N%len(ranks). The
// remainder, N%len(ranks) positions at the end of the order, is dropped
// for this epoch (as torch's DistributedSampler with drop_last), so that
// every rank gets exactly N/len(ranks) samples; since the order changes
// every epoch, so do the dropped samples.
func (s Sampler) Part(epoch int, ranks []int) (Part, error) {
	if err := checkRanks(ranks); err != nil {
		return Part{}, err
	}
	if s.N < 0 || epoch < 0 {
		return Part{}, fmt.Errorf("pipeline: epoch %d of %d samples", epoch, s.N)
	}
	return Part{Epoch: epoch, End: s.N - s.N%len(ranks), Ranks: slices.Clone(ranks)}, nil
}

func checkRanks(ranks []int) error {
	if len(ranks) == 0 {
		return errors.New("pipeline: no ranks")
	}
	for i, r := range ranks {
		if r < 0 || i > 0 && r <= ranks[i-1] {
			return fmt.Errorf("pipeline: ranks %v are not increasing job ranks", ranks)
		}
	}
	return nil
}

// Consumed is how many positions of p every rank together took in steps
// full batches of batch samples each: steps*batch*len(Ranks), at most
// what p holds.
func (p Part) Consumed(steps, batch int) int {
	return min(steps*batch*len(p.Ranks), p.End-p.Start)
}

// Resume is the rest of p after consumed positions (counted from
// p.Start, a prefix as Consumed gives) dealt round-robin to ranks, the
// new view's: the positions [Start+consumed, End), nothing dropped, so
// that with what was consumed they cover p exactly once. The new ranks'
// shares then differ by at most one sample.
func (p Part) Resume(consumed int, ranks []int) (Part, error) {
	if err := checkRanks(ranks); err != nil {
		return Part{}, err
	}
	if consumed < 0 || consumed > p.End-p.Start {
		return Part{}, fmt.Errorf("pipeline: consumed %d of a part of %d", consumed, p.End-p.Start)
	}
	return Part{Epoch: p.Epoch, Start: p.Start + consumed, End: p.End, Ranks: slices.Clone(ranks)}, nil
}

// Len is how many positions rank gets, or -1 if it is not in Ranks.
func (p Part) Len(rank int) int {
	i, ok := slices.BinarySearch(p.Ranks, rank)
	if !ok {
		return -1
	}
	m, n := len(p.Ranks), p.End-p.Start
	return (n - i + m - 1) / m
}

// Steps is the number of batches of at most batch samples every rank
// takes part in: enough for the largest share, the same on every rank.
// It is 0 for a batch below 1 or a Part without ranks.
func (p Part) Steps(batch int) int {
	if batch < 1 || len(p.Ranks) == 0 {
		return 0
	}
	n := p.Len(p.Ranks[0]) // the first rank's share is the largest
	return (n + batch - 1) / batch
}

// Indices is rank's sample indices for p, in training order.
func (s Sampler) Indices(p Part, rank int) ([]int, error) {
	i, ok := slices.BinarySearch(p.Ranks, rank)
	if !ok {
		return nil, fmt.Errorf("pipeline: rank %d is not in the part's ranks %v", rank, p.Ranks)
	}
	if p.Start < 0 || p.Start > p.End || p.End > s.N {
		return nil, fmt.Errorf("pipeline: part [%d, %d) of %d samples", p.Start, p.End, s.N)
	}
	order := s.Order(p.Epoch)
	out := make([]int, 0, p.Len(rank))
	for k := p.Start + i; k < p.End; k += len(p.Ranks) {
		out = append(out, order[k])
	}
	return out, nil
}
