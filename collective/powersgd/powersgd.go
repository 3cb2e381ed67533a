package powersgd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/gorun/gorun/collective"
)

var (
	// ErrShape: the arguments of a call do not describe a matrix (a
	// negative side, or len(grad) != rows·cols). It is returned before
	// anything is sent.
	ErrShape = errors.New("powersgd: bad shape")
	// ErrShapeChanged: a key was used before with another shape. It is
	// returned before anything is sent, and the key keeps its state; call
	// Forget(key) (on every rank) to use the key with the new shape.
	ErrShapeChanged = errors.New("powersgd: shape changed for key")
)

// Stats counts the calls of a Compressor and the bytes of float32 data
// this rank handed to collective.AllReduce, against what plain averaging
// of the same gradients would have handed over. They are payload bytes
// per rank: an algorithm moves a multiple of them on the wire (a ring
// about 2(N−1)/N), the same multiple for both.
type Stats struct {
	Compressed int64 // calls that went low-rank
	Dense      int64 // calls that went dense (vectors, small matrices)
	Bytes      int64 // bytes all-reduced: (rows+cols)·rank·4 compressed, rows·cols·4 dense
	DenseBytes int64 // bytes plain averaging would have all-reduced: rows·cols·4 per call
}

// Rate is DenseBytes over Bytes: how many times less this rank sent (1
// when nothing was compressed, 0 before any call).
func (s Stats) Rate() float64 {
	if s.Bytes == 0 {
		return 0
	}
	return float64(s.DenseBytes) / float64(s.Bytes)
}

// Compressor runs low-rank all-reduces for one job. Make one per job
// (per Comm) on every rank, with the same Config. It keeps state per
// key: the shape, Q (with warm start) and this rank's residual (with
// error feedback). It is safe for use from several goroutines, but its
// calls are collective and each holds the Compressor while it runs
// (Stats, Reset and Forget wait for it): issue them in the same order on
// every rank, as for any collective.
type Compressor struct {
	cfg Config

	mu    sync.Mutex
	keys  map[string]*state
	stats Stats
}

// state is what a Compressor keeps for one key.
type state struct {
	rows, cols, r int
	dense         bool
	rng           *rand.Rand // draws the Qs: the same sequence on every rank
	q             []float32  // cols x r; with warm start, the last call's Q
	res           []float32  // rows x cols residual (error feedback), or nil
	p             []float32  // rows x r scratch
	w             []float64  // scratch: max(rows, cols) x r
	calls         int64      // compressed calls so far
}

// New returns a Compressor, or an error if cfg is invalid.
func New(cfg Config) (*Compressor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Compressor{cfg: cfg, keys: map[string]*state{}}, nil
}

// Config returns the Compressor's configuration.
func (c *Compressor) Config() Config { return c.cfg }

// Stats returns the counts since New or the last Reset.
func (c *Compressor) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Reset forgets the state of every key (Qs and residuals) and zeroes the
// Stats. Call it on every rank at the same point of the call sequence,
// for example after an error or when an elastic job's membership changed.
func (c *Compressor) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.keys)
	c.stats = Stats{}
}

// Forget forgets the state of one key (its shape, Q and residual), so
// that the next call with key starts afresh from the seed, with any
// shape. Call it on every rank at the same point of the call sequence.
func (c *Compressor) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, key)
}

// AllReduce replaces grad, a rows x cols float32 matrix in row-major
// order, with an approximation of its average over the ranks of comm: a
// rank-Config.Rank approximation by one step of power iteration
// (PowerSGD), or the exact average for vectors and matrices too small to
// gain from it (Config.MinCompressionRate). Every rank gets the same
// bits.
//
// key names the gradient (for example the parameter's name): each key
// keeps its own shape, Q and residual. Every rank must make the same
// calls, with the same keys and shapes, in the same order, and must not
// interleave other collectives on comm with them from another goroutine.
// A compressed call is two all-reduces on comm (P, then Q, both Sum), a
// dense one is one (Avg). Ranks that disagree on the shape fail with
// collective.ErrSizeMismatch rather than hang when their calls are both
// compressed and rows or cols differ, or when one is dense and another
// compressed (the op differs); two dense calls are told apart only by
// rows·cols, so a transposed small matrix goes unnoticed: the contract
// is the caller's.
//
// grad belongs to the caller; AllReduce reads and writes it only while
// it runs and keeps no reference to it. On an error grad's contents are
// undefined.
//
// A rows x cols shape differing from the key's earlier one returns
// ErrShapeChanged, and arguments that are not a matrix return ErrShape,
// before anything is sent. Any other error comes from the collective
// (a lost peer, ctx ending, a mismatch) and is returned wrapped; the
// Compressor then forgets every key's state on this rank, but a peer
// whose call succeeded may not have: the ranks' states are undefined
// until every rank calls Reset.
func (c *Compressor) AllReduce(ctx context.Context, comm *collective.Comm, key string, grad []float32, rows, cols int) error {
	if rows < 0 || cols < 0 || len(grad) != rows*cols {
		return fmt.Errorf("%w: key %q: %d x %d for %d elements", ErrShape, key, rows, cols, len(grad))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.state(key, rows, cols)
	if err != nil {
		return err
	}
	n := int64(rows) * int64(cols) * 4
	c.stats.DenseBytes += n
	if s.dense {
		c.stats.Dense++
		c.stats.Bytes += n
		if err := collective.AllReduce(ctx, comm, grad, collective.Avg); err != nil {
			return c.fail(key, fmt.Errorf("dense all-reduce: %w", err))
		}
		return nil
	}
	c.stats.Compressed++
	c.stats.Bytes += int64(rows+cols) * int64(s.r) * 4
	if err := c.lowRank(ctx, comm, s, grad); err != nil {
		return c.fail(key, err)
	}
	return nil
}

// fail forgets all state and wraps a collective's error.
func (c *Compressor) fail(key string, err error) error {
	clear(c.keys)
	return fmt.Errorf("powersgd: key %q: %w", key, err)
}

// state returns key's state, made on first use.
func (c *Compressor) state(key string, rows, cols int) (*state, error) {
	if s, ok := c.keys[key]; ok {
		if s.rows != rows || s.cols != cols {
			return nil, fmt.Errorf("%w: key %q was %d x %d, now %d x %d (Forget it first)", ErrShapeChanged, key, s.rows, s.cols, rows, cols)
		}
		return s, nil
	}
	r := rankFor(c.cfg.Rank, rows, cols)
	s := &state{rows: rows, cols: cols, r: r, dense: !compresses(rows, cols, r, c.cfg.MinCompressionRate)}
	if !s.dense {
		s.rng = rand.New(rand.NewPCG(c.cfg.Seed, keySeed(key)))
		s.q = make([]float32, cols*r)
		s.p = make([]float32, rows*r)
		s.w = make([]float64, max(rows, cols)*r)
		fillGaussian(s.q, s.rng)
		if c.cfg.ErrorFeedback {
			s.res = make([]float32, rows*cols)
		}
	}
	c.keys[key] = s
	return s, nil
}

// lowRank is one PowerSGD step on m = grad (+ residual), in place.
func (c *Compressor) lowRank(ctx context.Context, comm *collective.Comm, s *state, m []float32) error {
	rows, cols, r := s.rows, s.cols, s.r
	if s.res != nil {
		for i, v := range s.res {
			m[i] += v
		}
	}
	// Without warm start every call draws a new Q (the first one is
	// already drawn); the generator advances the same way on every rank.
	if !c.cfg.WarmStart && s.calls > 0 {
		fillGaussian(s.q, s.rng)
	}
	s.calls++
	// P = M Q, summed over the ranks. Its scale does not matter: it is
	// orthonormalized next, so Sum saves a division.
	mulRight(s.p, m, s.q, rows, cols, r, s.w[:cols*r])
	if err := collective.AllReduce(ctx, comm, s.p, collective.Sum); err != nil {
		return fmt.Errorf("all-reduce of P (%d x %d): %w", rows, r, err)
	}
	orthonormalize(s.p, rows, r, s.w)
	// Q = Mᵀ P, summed over the ranks, so that P Qᵀ / N is the average
	// of the ranks' M projected on P's columns.
	mulLeftT(s.q, m, s.p, rows, cols, r, s.w[:cols*r])
	if err := collective.AllReduce(ctx, comm, s.q, collective.Sum); err != nil {
		return fmt.Errorf("all-reduce of Q (%d x %d): %w", cols, r, err)
	}
	approx(m, s.res, s.p, s.q, rows, cols, r, 1/float64(comm.Size()), s.w[:cols*r])
	return nil
}
