package collective

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun/gorun/internal/tick"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// fused lays bufs end to end in one pooled buffer.
type fused[T Number] struct {
	raw  []byte
	flat []T
	bufs [][]T
}

func fuse[T Number](bufs [][]T) *fused[T] {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	f := &fused[T]{bufs: bufs}
	if n == 0 {
		return f
	}
	f.raw = transport.GetBuf(bytesOf[T](n))
	var ok bool
	if f.flat, ok = reduce.View[T](f.raw); !ok {
		transport.PutBuf(f.raw)
		f.raw, f.flat = nil, make([]T, n)
	}
	off := 0
	for _, b := range bufs {
		off += copy(f.flat[off:], b)
	}
	return f
}

// unfuse copies the result back and gives the buffer back.
func (f *fused[T]) unfuse() {
	off := 0
	for _, b := range f.bufs {
		off += copy(b, f.flat[off:])
	}
	f.release()
}

func (f *fused[T]) release() {
	if f.raw != nil {
		transport.PutBuf(f.raw)
		f.raw, f.flat = nil, nil
	}
}

func groupFunc[T Number](f *fused[T], op Op) func(ctx context.Context, x *call) error {
	inner := allReduceFunc(f.flat, op)
	return func(ctx context.Context, x *call) error {
		err := inner(ctx, x)
		if err != nil {
			f.release()
		}
		return err
	}
}

// GroupAllReduce all-reduces every buffer of bufs (one element type, one
// op) as one collective on the wire: it copies them end to end, reduces
// that once and copies the result back, which for many small buffers is
// far cheaper than one call each (Horovod's Tensor Fusion). Every rank
// passes the same number of buffers with the same lengths.
func GroupAllReduce[T Number](ctx context.Context, c *Comm, bufs [][]T, op Op) error {
	f := fuse(bufs)
	if exactFor[T](c, op) {
		err := doExact(ctx, c, newExact(c, f.flat, op, nil), kindGroup)
		if err == nil {
			f.unfuse()
		} else {
			f.release()
		}
		return err
	}
	err := c.do(ctx, kindGroup, groupFunc(f, op), header[T](op, len(f.flat)))
	if err == nil {
		f.unfuse()
	}
	return err
}

// StartGroupAllReduce starts a GroupAllReduce. The buffers are copied
// when it starts and written when it is done; the caller must not touch
// them until then.
func StartGroupAllReduce[T Number](ctx context.Context, c *Comm, bufs [][]T, op Op) *Handle {
	f := fuse(bufs)
	if exactFor[T](c, op) {
		return startExact(ctx, c, newExact(c, f.flat, op, nil), kindGroup, f.unfuse)
	}
	return c.async(ctx, kindGroup, groupFunc(f, op), header[T](op, len(f.flat)), f.unfuse)
}

// BucketConfig sizes a Bucketer's buckets.
type BucketConfig struct {
	// CapBytes is the most a bucket holds (a single larger gradient
	// makes a bucket of its own).
	CapBytes int
	// FirstBytes caps the first bucket, which is ready soonest in
	// backward, so that communication starts early.
	FirstBytes int
	// Rebuild rebuilds the buckets after the first step in the order the
	// gradients became ready on rank 0 (shared with every rank).
	Rebuild bool
	// Overlap starts a bucket's all-reduce as soon as it is full. Off,
	// every bucket starts in Wait: the same buckets and result, with no
	// overlap, for comparison.
	Overlap bool
}

// DefaultBucketConfig is PyTorch DDP's: 25 MiB buckets, a 1 MiB first
// one, rebuilt after the first step, overlapped.
func DefaultBucketConfig() BucketConfig {
	return BucketConfig{CapBytes: 25 << 20, FirstBytes: 1 << 20, Rebuild: true, Overlap: true}
}

// BucketStat is what one bucket cost in the last step.
type BucketStat struct {
	Grads   []int         // the gradients it holds, by index
	Bytes   int           // their size
	Comm    time.Duration // from its start to its end
	Exposed time.Duration // the part of that Wait spent blocked on it
}

// Bucketer all-reduces a model's gradients during backward, in buckets,
// as DDP's Reducer does: call Ready(i) as soon as gradient i is final (in
// any order: backward produces them last layer first), and Wait after
// backward. A bucket's all-reduce starts once it is complete and every
// bucket before it has started, so every rank starts the same
// collectives in the same order, whatever order its gradients came in.
// Buckets hold gradients in reverse parameter order, the first capped at
// FirstBytes and the others at CapBytes; with Rebuild they are rebuilt
// after the first step in the order the gradients became ready. Stats
// gives each bucket's communication and exposed (not overlapped) time,
// and with gorun --timeline each bucket's exposed time is a span, so a
// user sizes buckets from data.
//
// A Bucketer is used by one goroutine; the gradients belong to it from
// Ready until Wait returns, and hold the reduced values afterwards.
type Bucketer[T Number] struct {
	c     *Comm
	op    Op
	cfg   BucketConfig
	grads [][]T

	buckets [][]int // gradient indices of each bucket
	of      []int   // bucket of each gradient
	missing []int   // per bucket: gradients not yet ready this step
	ready   []bool
	order   []int // this step's ready order
	next    int   // the first bucket not yet started
	handles []*Handle
	fused   []*fused[T]
	started []time.Time
	stats   []BucketStat
	steps   int
}

// NewBucketer makes the buckets for grads (the model's gradients in
// parameter order). Every rank passes gradients of the same lengths.
func NewBucketer[T Number](c *Comm, grads [][]T, op Op, cfg BucketConfig) (*Bucketer[T], error) {
	if cfg.CapBytes <= 0 || cfg.FirstBytes <= 0 {
		return nil, fmt.Errorf("collective: bucketer: caps must be positive (first %d, cap %d bytes)", cfg.FirstBytes, cfg.CapBytes)
	}
	if !op.Valid() {
		return nil, fmt.Errorf("collective: bucketer: unknown op %d", op)
	}
	b := &Bucketer[T]{c: c, op: op, cfg: cfg, grads: grads}
	order := make([]int, len(grads))
	for i := range order {
		order[i] = len(grads) - 1 - i
	}
	b.layout(order)
	return b, nil
}

// layout fills buckets with the gradients in order.
func (b *Bucketer[T]) layout(order []int) {
	b.buckets = b.buckets[:0]
	var cur []int
	size, limit := 0, b.cfg.FirstBytes
	for _, g := range order {
		n := bytesOf[T](len(b.grads[g]))
		if len(cur) > 0 && size+n > limit {
			b.buckets = append(b.buckets, cur)
			cur, size, limit = nil, 0, b.cfg.CapBytes
		}
		cur = append(cur, g)
		size += n
	}
	if len(cur) > 0 {
		b.buckets = append(b.buckets, cur)
	}
	b.of = make([]int, len(b.grads))
	for k, gs := range b.buckets {
		for _, g := range gs {
			b.of[g] = k
		}
	}
	b.reset()
}

func (b *Bucketer[T]) reset() {
	nb := len(b.buckets)
	b.missing = make([]int, nb)
	for k, gs := range b.buckets {
		b.missing[k] = len(gs)
	}
	b.ready = make([]bool, len(b.grads))
	b.order = b.order[:0]
	b.next = 0
	b.handles = make([]*Handle, nb)
	b.fused = make([]*fused[T], nb)
	b.started = make([]time.Time, nb)
}

// Buckets is the gradient indices of each bucket, in the order they are
// reduced.
func (b *Bucketer[T]) Buckets() [][]int { return clone2(b.buckets) }

// Ready marks gradient i final for this step; with Overlap, any bucket it
// completes starts (with those before it, in order).
func (b *Bucketer[T]) Ready(ctx context.Context, i int) error {
	if i < 0 || i >= len(b.grads) {
		return fmt.Errorf("collective: bucketer: gradient %d out of range (%d gradients)", i, len(b.grads))
	}
	if b.ready[i] {
		return fmt.Errorf("collective: bucketer: gradient %d marked ready twice in one step", i)
	}
	b.ready[i] = true
	b.order = append(b.order, i)
	b.missing[b.of[i]]--
	if b.cfg.Overlap {
		b.launch(ctx)
	}
	return nil
}

// launch starts every complete bucket from next on, in order.
func (b *Bucketer[T]) launch(ctx context.Context) {
	for b.next < len(b.buckets) && b.missing[b.next] == 0 {
		k := b.next
		bufs := make([][]T, len(b.buckets[k]))
		for j, g := range b.buckets[k] {
			bufs[j] = b.grads[g]
		}
		b.started[k] = time.Now()
		b.handles[k] = StartGroupAllReduce(ctx, b.c, bufs, b.op)
		b.next++
	}
}

// Wait waits for every bucket (starting those not started: all of them
// without Overlap), leaves the reduced gradients in place and records the
// step's Stats. Every gradient must have been marked Ready.
func (b *Bucketer[T]) Wait(ctx context.Context) error {
	for i, r := range b.ready {
		if !r {
			return fmt.Errorf("collective: bucketer: gradient %d was never marked ready", i)
		}
	}
	b.launch(ctx)
	stats := make([]BucketStat, len(b.buckets))
	var errs []error
	for k, h := range b.handles {
		t0, w0 := tick.Now(), time.Now()
		err := h.Wait(ctx)
		t1, w1 := tick.Now(), time.Now()
		if err != nil {
			errs = append(errs, err)
		}
		bytes := 0
		for _, g := range b.buckets[k] {
			bytes += bytesOf[T](len(b.grads[g]))
		}
		end := h.end
		if end.IsZero() {
			end = w1
		}
		stats[k] = BucketStat{Grads: append([]int(nil), b.buckets[k]...), Bytes: bytes,
			Comm: end.Sub(b.started[k]), Exposed: w1.Sub(w0)}
		if b.c.rec != nil && t1 > t0 {
			b.c.rec.Span(fmt.Sprintf("bucket %d exposed", k), t0, t1)
		}
	}
	if len(errs) > 0 {
		// Every bucket is done or failed: the Bucketer starts the next
		// step afresh (after ErrViewChanged, the step is redone).
		b.reset()
		return errs[0]
	}
	b.stats = stats
	b.steps++
	order := append([]int(nil), b.order...)
	if b.steps == 1 && b.cfg.Rebuild && len(order) > 0 {
		// Every rank takes rank 0's order, so the buckets stay the same
		// everywhere.
		o := make([]int64, len(order))
		for i, g := range order {
			o[i] = int64(g)
		}
		if err := Broadcast(ctx, b.c, o, b.c.View().Ranks[0]); err != nil {
			return err
		}
		seen := make([]bool, len(b.grads))
		for i, g := range o {
			if g < 0 || int(g) >= len(b.grads) || seen[g] {
				return fmt.Errorf("collective: bucketer: rank 0's ready order %v is not a permutation of %d gradients", o, len(b.grads))
			}
			seen[g] = true
			order[i] = int(g)
		}
		b.layout(order)
		return nil
	}
	b.reset()
	return nil
}

// Stats is what each bucket cost in the last step that Wait finished.
func (b *Bucketer[T]) Stats() []BucketStat { return b.stats }
