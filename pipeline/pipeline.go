package pipeline

import (
	"context"
	"errors"
	"fmt"
	"iter"
)

// Config chooses the stages and their parameters. Every rank must use the
// same Config.
type Config struct {
	// Seed is the shared seed of every epoch's order.
	Seed uint64
	// Standardize the features with statistics over every rank.
	Standardize bool
	// Epsilon is added to each variance before its square root; a
	// feature of zero variance standardizes to 0.
	Epsilon float64
	// FilterTol > 0 drops, after Standardize, every sample whose
	// features all lie within FilterTol standard deviations of their
	// mean; 0 drops nothing.
	FilterTol float64
	// Replacement samples each epoch with replacement (Sampler).
	Replacement bool
}

// DefaultConfig standardizes with Epsilon 1e-8, filters nothing and
// shuffles without replacement from seed 0.
func DefaultConfig() Config {
	return Config{Standardize: true, Epsilon: 1e-8}
}

func (c Config) validate() error {
	if c.Epsilon < 0 {
		return fmt.Errorf("pipeline: Epsilon %g, want >= 0", c.Epsilon)
	}
	if c.FilterTol < 0 {
		return fmt.Errorf("pipeline: FilterTol %g, want >= 0", c.FilterTol)
	}
	if c.FilterTol > 0 && !c.Standardize {
		return errors.New("pipeline: FilterTol needs Standardize (it is in standard deviations)")
	}
	return nil
}

// ErrNotPrepared is returned by Part and Batches before Prepare
// succeeded.
var ErrNotPrepared = errors.New("pipeline: not prepared")

// ErrInconsistent is returned by Prepare when ranks disagree on the
// data: their filters dropped different numbers of samples.
var ErrInconsistent = errors.New("pipeline: ranks hold different data")

// Pipeline runs the stages over a Dataset that every rank holds whole.
type Pipeline struct {
	cfg      Config
	data     *Dataset
	sampler  Sampler
	stats    Stats
	dropped  int
	prepared bool
	failed   error // Prepare's error, returned again by later calls
}

// Report is what Prepare did: the statistics (zero without Standardize),
// the samples dropped by the filter, and the samples left.
type Report struct {
	Stats   Stats
	Dropped int
	N       int
}

// New makes a pipeline over d, which it owns from now on: Prepare
// rewrites it in place.
func New(d *Dataset, cfg Config) (*Pipeline, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	return &Pipeline{cfg: cfg, data: d}, nil
}

// Prepare runs the stages that talk to the other ranks, once, on every
// rank, at the same point of every rank's collectives: the statistics of
// the data (each rank sums the rows of its block, Block(N, Size,
// Index), so the work is split and the result covers every rank's), then
// standardization and the filter, both local and so identical on every
// rank, then one more all-reduce that checks every rank dropped as many
// samples. Once it succeeded, later calls return its Report and talk to
// no one. The group's error (a lost peer) is returned wrapped, and the
// pipeline is then unusable: later calls return the same error, since
// the data may be half rewritten.
func (p *Pipeline) Prepare(ctx context.Context, g Group) (Report, error) {
	if p.prepared {
		return p.report(), nil
	}
	if p.failed != nil {
		return Report{}, p.failed
	}
	rep, err := p.prepare(ctx, g)
	p.failed = err
	return rep, err
}

func (p *Pipeline) prepare(ctx context.Context, g Group) (Report, error) {
	if p.cfg.Standardize {
		lo, hi := Block(p.data.N, g.Size(), g.Index())
		s, err := Fit(ctx, g, p.data.Slice(lo, hi))
		if err != nil {
			return Report{}, err
		}
		s.Standardize(p.data, p.cfg.Epsilon)
		p.stats = s
	}
	if p.cfg.FilterTol > 0 {
		p.dropped = Filter(p.data, p.cfg.FilterTol)
		buf := []float64{float64(p.dropped)}
		if err := g.AllReduceSum(ctx, buf); err != nil {
			return Report{}, fmt.Errorf("pipeline: filter check: %w", err)
		}
		if buf[0] != float64(p.dropped*g.Size()) {
			return Report{}, fmt.Errorf("%w: %d samples dropped here, %g over %d ranks", ErrInconsistent, p.dropped, buf[0], g.Size())
		}
	}
	p.sampler = Sampler{N: p.data.N, Seed: p.cfg.Seed, Replacement: p.cfg.Replacement}
	p.prepared = true
	return p.report(), nil
}

func (p *Pipeline) report() Report {
	return Report{Stats: p.stats, Dropped: p.dropped, N: p.data.N}
}

// Block is the index'th of size contiguous blocks of n rows, [lo, hi):
// the first n%size blocks hold one row more.
func Block(n, size, index int) (lo, hi int) {
	q, r := n/size, n%size
	lo = index*q + min(index, r)
	hi = lo + q
	if index < r {
		hi++
	}
	return lo, hi
}

// Data is the prepared data set (standardized and filtered), owned by
// the pipeline: read it, do not change it.
func (p *Pipeline) Data() *Dataset { return p.data }

// Sampler is the prepared data's sampler.
func (p *Pipeline) Sampler() Sampler { return p.sampler }

// Part is epoch's Part for ranks (see Sampler.Part).
func (p *Pipeline) Part(epoch int, ranks []int) (Part, error) {
	if !p.prepared {
		return Part{}, ErrNotPrepared
	}
	return p.sampler.Part(epoch, ranks)
}

// Batches iterates over rank's share of part in batches of batch
// samples: part.Steps(batch) of them on every rank, full but for the
// last, which may be short, or even empty on a rank whose share is one
// sample less than another's (after a Resume). Each yields the batch's
// features, row-major (len = samples × D), and labels. Both slices are
// buffers of the iterator, valid until the next iteration: copy what you
// keep. The iterator may be ranged over more than once; it does not talk
// to peers.
func (p *Pipeline) Batches(part Part, rank, batch int) (iter.Seq2[[]float32, []int], error) {
	if !p.prepared {
		return nil, ErrNotPrepared
	}
	if batch <= 0 {
		return nil, fmt.Errorf("pipeline: batch %d, want > 0", batch)
	}
	idx, err := p.sampler.Indices(part, rank)
	if err != nil {
		return nil, err
	}
	steps, d := part.Steps(batch), p.data.D
	return func(yield func([]float32, []int) bool) {
		x, y := make([]float32, batch*d), make([]int, batch)
		for s := range steps {
			lo := min(s*batch, len(idx))
			hi := min(lo+batch, len(idx))
			for k, i := range idx[lo:hi] {
				copy(x[k*d:(k+1)*d], p.data.Row(i))
				y[k] = p.data.Y[i]
			}
			if !yield(x[:(hi-lo)*d], y[:hi-lo]) {
				return
			}
		}
	}, nil
}
