package powersgd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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
	buf   []float32 // the packed buffer of a batch's all-reduces
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

// Matrix is one gradient of an AllReduceBatch call: Grad is Rows x Cols
// in row-major order, Key names it as in AllReduce.
type Matrix struct {
	Key        string
	Grad       []float32
	Rows, Cols int
}

// AllReduce replaces grad, a rows x cols float32 matrix in row-major
// order, with an approximation of its average over the ranks of comm: a
// rank-Config.Rank approximation by one step of power iteration
// (PowerSGD), or the exact average for vectors and matrices too small to
// gain from it (Config.MinCompressionRate). Every rank gets the same
// bits. It is AllReduceBatch with one Matrix.
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
	return c.AllReduceBatch(ctx, comm, []Matrix{{Key: key, Grad: grad, Rows: rows, Cols: cols}})
}

// AllReduceBatch is AllReduce on several gradients at once, as PyTorch's
// hook does for a bucket: at most three all-reduces on comm whatever
// their number, in this order: the dense gradients together (Avg), then
// every compressed gradient's P in one buffer (Sum), then every Q (Sum).
// It pays when there are many small layers, each of which would
// otherwise cost two all-reduce latencies. The result is that of
// calling AllReduce on each (each key keeps its own state) up to the
// rounding of the sums, which may add up in another order in a longer
// buffer; it is the same bits on every rank. The calls of the ranks must
// match batch for batch: the same Matrices, with
// the same keys and shapes, in the same order. A key may appear once per
// batch (else ErrShape). Shape mismatches between ranks are detected on
// the totals of each of the three buffers. Errors are as for AllReduce;
// a batch with an ErrShape or ErrShapeChanged sends nothing at all.
func (c *Compressor) AllReduceBatch(ctx context.Context, comm *collective.Comm, ms []Matrix) error {
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		if m.Rows < 0 || m.Cols < 0 || len(m.Grad) != m.Rows*m.Cols {
			return fmt.Errorf("%w: key %q: %d x %d for %d elements", ErrShape, m.Key, m.Rows, m.Cols, len(m.Grad))
		}
		if seen[m.Key] {
			return fmt.Errorf("%w: key %q twice in one batch", ErrShape, m.Key)
		}
		seen[m.Key] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range ms {
		if s, ok := c.keys[m.Key]; ok && (s.rows != m.Rows || s.cols != m.Cols) {
			return fmt.Errorf("%w: key %q was %d x %d, now %d x %d (Forget it first)", ErrShapeChanged, m.Key, s.rows, s.cols, m.Rows, m.Cols)
		}
	}
	states := make([]*state, len(ms))
	var dense, low []int // indexes into ms
	var denseLen, pLen, qLen int
	for i, m := range ms {
		s := c.state(m.Key, m.Rows, m.Cols)
		states[i] = s
		n := int64(m.Rows) * int64(m.Cols) * 4
		c.stats.DenseBytes += n
		if s.dense {
			dense = append(dense, i)
			denseLen += len(m.Grad)
			c.stats.Dense++
			c.stats.Bytes += n
			continue
		}
		low = append(low, i)
		pLen += s.rows * s.r
		qLen += s.cols * s.r
		c.stats.Compressed++
		c.stats.Bytes += int64(s.rows+s.cols) * int64(s.r) * 4
	}
	if err := c.dense(ctx, comm, ms, dense, denseLen); err != nil {
		return c.fail(ms, dense, err)
	}
	if err := c.lowRank(ctx, comm, ms, states, low, pLen, qLen); err != nil {
		return c.fail(ms, low, err)
	}
	return nil
}

// fail forgets all state and wraps a collective's error with the keys
// of the step that failed.
func (c *Compressor) fail(ms []Matrix, which []int, err error) error {
	clear(c.keys)
	keys := make([]string, 0, len(which))
	for _, i := range which {
		keys = append(keys, fmt.Sprintf("%q", ms[i].Key))
	}
	if len(keys) == 1 {
		return fmt.Errorf("powersgd: key %s: %w", keys[0], err)
	}
	return fmt.Errorf("powersgd: keys %s: %w", strings.Join(keys, ", "), err)
}

// state returns key's state, made on first use with the given shape
// (the caller has checked that a known key has it).
func (c *Compressor) state(key string, rows, cols int) *state {
	if s, ok := c.keys[key]; ok {
		return s
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
	return s
}

// packed returns c.buf grown to n elements.
func (c *Compressor) packed(n int) []float32 {
	if cap(c.buf) < n {
		c.buf = make([]float32, n)
	}
	return c.buf[:n]
}

// dense averages the dense gradients: in place for one, else packed in
// one buffer.
func (c *Compressor) dense(ctx context.Context, comm *collective.Comm, ms []Matrix, which []int, n int) error {
	switch len(which) {
	case 0:
		return nil
	case 1:
		if err := collective.AllReduce(ctx, comm, ms[which[0]].Grad, collective.Avg); err != nil {
			return fmt.Errorf("dense all-reduce (%d floats): %w", n, err)
		}
		return nil
	}
	buf, off := c.packed(n), 0
	for _, i := range which {
		off += copy(buf[off:], ms[i].Grad)
	}
	if err := collective.AllReduce(ctx, comm, buf, collective.Avg); err != nil {
		return fmt.Errorf("dense all-reduce (%d floats): %w", n, err)
	}
	off = 0
	for _, i := range which {
		off += copy(ms[i].Grad, buf[off:])
	}
	return nil
}

// lowRank is one PowerSGD step on each compressed M = grad (+ residual),
// in place, with the Ps and the Qs each all-reduced in one buffer.
func (c *Compressor) lowRank(ctx context.Context, comm *collective.Comm, ms []Matrix, states []*state, which []int, pLen, qLen int) error {
	if len(which) == 0 {
		return nil
	}
	buf := c.packed(max(pLen, qLen))
	off := 0
	for _, i := range which {
		s, m := states[i], ms[i].Grad
		if s.res != nil {
			for j, v := range s.res {
				m[j] += v
			}
		}
		// Without warm start every call draws a new Q (the first one is
		// already drawn); the generator advances the same way on every
		// rank.
		if !c.cfg.WarmStart && s.calls > 0 {
			fillGaussian(s.q, s.rng)
		}
		s.calls++
		// P = M Q, summed over the ranks. Its scale does not matter: it
		// is orthonormalized next, so Sum saves a division.
		mulRight(s.p, m, s.q, s.rows, s.cols, s.r, s.w[:s.cols*s.r])
		off += copy(buf[off:], s.p)
	}
	if err := collective.AllReduce(ctx, comm, buf[:pLen], collective.Sum); err != nil {
		return fmt.Errorf("all-reduce of P (%d floats): %w", pLen, err)
	}
	off = 0
	for _, i := range which {
		s, m := states[i], ms[i].Grad
		off += copy(s.p, buf[off:])
		orthonormalize(s.p, s.rows, s.r, s.w)
		// Q = Mᵀ P, summed over the ranks, so that P Qᵀ / N is the
		// average of the ranks' M projected on P's columns.
		mulLeftT(s.q, m, s.p, s.rows, s.cols, s.r, s.w[:s.cols*s.r])
	}
	off = 0
	for _, i := range which {
		off += copy(buf[off:], states[i].q)
	}
	if err := collective.AllReduce(ctx, comm, buf[:qLen], collective.Sum); err != nil {
		return fmt.Errorf("all-reduce of Q (%d floats): %w", qLen, err)
	}
	off = 0
	scale := 1 / float64(comm.Size())
	for _, i := range which {
		s := states[i]
		off += copy(s.q, buf[off:])
		approx(ms[i].Grad, s.res, s.p, s.q, s.rows, s.cols, s.r, scale, s.w[:s.cols*s.r])
	}
	return nil
}
