package ps

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/gorun/gorun/reduce"
	"github.com/klauspost/compress/zstd"
)

// sparseState is a sparse key's state on a worker.
type sparseState struct {
	// send is held by a push from taking its clock to queueing its last
	// partition, so that a key's pushes leave in clock order.
	send sync.Mutex
	// mu guards resid: error feedback's residual, element by element of
	// the whole key (not by partition: it does not depend on where the
	// partitions are placed), nil until needed.
	mu    sync.Mutex
	resid []float64
}

// restore adds back into the residual what a push of the partition at
// off selected and the hub did not apply.
func restore[T Float](sp *sparseState, off int, idx []int32, vals []T) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for j, i := range idx {
		sp.resid[off+int(i)] += float64(vals[j])
	}
}

// checkSparseKey checks a key's sparse configuration on the worker: valid,
// and its largest push fits in a frame. The largest push is of float64
// values, the larger element type (Push[float32] sends less), so that
// whatever type the key is pushed as, nothing is left to fail once a
// push has taken its clock (pushSparse).
func (c *Client) checkSparseKey(key string, cfg KeyConfig) error {
	s := cfg.Sparse
	if err := s.validate(); err != nil {
		return fmt.Errorf("ps: key %q: %w", key, err)
	}
	if s.Method == Dense {
		return nil
	}
	n := min(cfg.Len, c.place.partElems)
	spec := sparseSpec{method: s.Method, codec: s.codec(), dtype: reduce.Float64, n: n, k: SparseK(n, s.Ratio)}
	room := c.cfg.MaxFrame - msgHeaderSize - pad8(maxKeyLen)
	if need, ok := spec.maxWire(); !ok || need > room {
		return fmt.Errorf("ps: key %q: a %v push of %d float64s at ratio %v with codec %v can take %s bytes, more than MaxFrame %d less %d of header",
			key, s.Method, n, s.Ratio, spec.codec, wireBytes(need, ok), c.cfg.MaxFrame, c.cfg.MaxFrame-room)
	}
	return nil
}

// wireBytes writes maxWire's bound, or says it overflows.
func wireBytes(n int, ok bool) string {
	if !ok {
		return "more than an int's worth of"
	}
	return strconv.Itoa(n)
}

// sparsePart is one partition's selection, before it is sent.
type sparsePart[T Float] struct {
	p    Partition
	idx  []int32
	vals []T
	msg  *message
}

// pushSparse is Push and PushPull (dst != nil) of a sparse key: it
// selects each partition's elements (from grad plus the residual, with
// error feedback), keeps what it did not send in the residual, and sends
// the selections. Everything that can fail on the worker is checked
// before the push takes its clock (Declare sized the largest push), so
// that a push that takes a clock always goes out. With error feedback
// each partition's call carries an ack (see settleAcked for the rules):
// a partition the hub did not apply is added back into the residual.
func pushSparse[T Float](c *Client, key string, ks *keyState, grad []T, samples int, dst []T) *Handle {
	sc, sp := ks.cfg.Sparse, ks.sparse
	codec := sc.codec()
	var enc *zstd.Encoder
	if codec == CodecZstd {
		var err error
		if enc, err = c.zstd.encoder(); err != nil {
			return c.failedHandle(kindPush, fmt.Errorf("ps: key %q: zstd: %w", key, err))
		}
	}
	dtype := reduce.DTypeOf[T]()
	typ := msgSparsePush
	if dst != nil {
		typ = msgSparsePushPull
	}
	// No check below: from here the push goes out.
	sp.send.Lock()
	defer sp.send.Unlock()
	c.mu.Lock()
	clock := ks.clock
	ks.clock++
	c.mu.Unlock()

	parts := make([]sparsePart[T], len(ks.parts))
	sp.mu.Lock()
	ef := sc.ErrorFeedback
	if ef {
		if sp.resid == nil {
			sp.resid = make([]float64, len(grad))
		}
		for i, g := range grad {
			sp.resid[i] += float64(g)
		}
	}
	var bytes int64
	for j, p := range ks.parts {
		pk := partKey(key, p.Off)
		s := sparsePart[T]{p: p}
		if ef {
			acc := sp.resid[p.Off : p.Off+p.Len]
			s.idx = sparseIndices(sc, acc, pk, uint32(clock))
			s.vals = make([]T, len(s.idx))
			for x, i := range s.idx {
				v := T(acc[i])
				s.vals[x] = v
				acc[i] -= float64(v)
			}
		} else {
			g := grad[p.Off : p.Off+p.Len]
			s.idx = sparseIndices(sc, g, pk, uint32(clock))
			s.vals = make([]T, len(s.idx))
			for x, i := range s.idx {
				s.vals[x] = g[i]
			}
		}
		wireIdx := s.idx
		if sc.Method == RandomK {
			wireIdx = nil
		}
		payload := encodeSparse(nil, codec, s.vals, wireIdx, enc)
		s.msg = &message{Type: typ, Key: pk, Clock: uint32(clock), Samples: uint32(samples), DType: dtype,
			Code: uint8(sc.Method), Kind: uint8(codec), Count: uint64(p.Len), N: uint64(len(s.idx)), Data: payload}
		bytes += int64(len(payload))
		parts[j] = s
	}
	sp.mu.Unlock()

	c.addBytes(bytes, 0)
	h := c.newHandle(kindPush, len(parts))
	if ef && len(parts) > 0 {
		// The handle is done once every partition is settled too.
		h.acks, h.settled = len(parts), make(chan struct{})
	}
	size := int(reduce.Size(dtype))
	for _, s := range parts {
		cl := &call{h: h}
		if dst != nil {
			cl.on, cl.want = pullInto(c, dst[s.p.Off:s.p.Off+s.p.Len]), s.p.Len*size
		}
		if ef {
			cl.ack = func(applied bool) {
				if !applied {
					restore(sp, s.p.Off, s.idx, s.vals)
				}
				h.settle()
			}
			s.msg.release = func() { cl.written.Store(true) }
			if dst != nil {
				s.msg.Part = askPushed // the pull may wait: hear of the push first
			}
		}
		c.sendCall(s.p.Hub, s.msg, cl)
	}
	return h
}

// sparseKey returns key's sparse state, for the residual's accessors.
func (c *Client) sparseKey(key string) (*keyState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, ok := c.keys[key]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w %q: declare it first", ErrUnknownKey, key)
	case ks.sparse == nil || !ks.cfg.Sparse.ErrorFeedback:
		return nil, fmt.Errorf("ps: key %q has no error feedback (KeyConfig.Sparse.ErrorFeedback)", key)
	}
	return ks, nil
}

// Residual copies key's error-feedback residual into dst (the key's
// length): what this worker's pushes have computed and not yet sent, as
// float64, element by element of the whole key. It is zeros before the
// first push.
func (c *Client) Residual(key string, dst []float64) error {
	ks, err := c.sparseKey(key)
	if err != nil {
		return err
	}
	if len(dst) != ks.cfg.Len {
		return fmt.Errorf("%w: key %q has %d elements, got %d", ErrShape, key, ks.cfg.Len, len(dst))
	}
	sp := ks.sparse
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.resid == nil {
		clear(dst)
	} else {
		copy(dst, sp.resid)
	}
	return nil
}

// SetResidual replaces key's error-feedback residual with a copy of src
// (the key's length), or zeros if src is nil: to carry a residual over
// to another client (a restarted job, other hubs or partitions), or to
// drop it. It does not wait for pushes in flight: one that the hub then
// refuses adds what it sent back into the new residual.
func (c *Client) SetResidual(key string, src []float64) error {
	ks, err := c.sparseKey(key)
	if err != nil {
		return err
	}
	if src != nil && len(src) != ks.cfg.Len {
		return fmt.Errorf("%w: key %q has %d elements, got %d", ErrShape, key, ks.cfg.Len, len(src))
	}
	sp := ks.sparse
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.resid == nil {
		sp.resid = make([]float64, ks.cfg.Len)
	}
	if src == nil {
		clear(sp.resid)
	} else {
		copy(sp.resid, src)
	}
	return nil
}
