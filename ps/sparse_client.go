package ps

import (
	"fmt"
	"sync"

	"github.com/gorun/gorun/reduce"
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
// off sent and the hub did not apply.
func restore[T Float](sp *sparseState, off int, idx []int32, vals []T) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	restoreLocked(sp, off, idx, vals)
}

// restoreLocked is restore with sp.mu held.
func restoreLocked[T Float](sp *sparseState, off int, idx []int32, vals []T) {
	for j, i := range idx {
		sp.resid[off+int(i)] += float64(vals[j])
	}
}

// checkSparseKey checks a key's sparse configuration on the worker: valid,
// and its largest push fits in a frame.
func (c *Client) checkSparseKey(key string, cfg KeyConfig) error {
	s := cfg.Sparse
	if err := s.validate(); err != nil {
		return fmt.Errorf("ps: key %q: %w", key, err)
	}
	if s.Method == Dense {
		return nil
	}
	n := min(cfg.Len, c.place.partElems)
	spec := sparseSpec{method: s.Method, codec: s.codec(), dtype: reduce.Float32, n: n, k: SparseK(n, s.Ratio)}
	if need := spec.maxWire() + msgHeaderSize + pad8(maxKeyLen); need > c.cfg.MaxFrame {
		return fmt.Errorf("ps: key %q: a %v push of %d float32s at ratio %v with codec %v can take %d bytes, more than MaxFrame %d",
			key, s.Method, n, s.Ratio, spec.codec, need, c.cfg.MaxFrame)
	}
	return nil
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
// the selections. A partition the hub does not apply (it answers with an
// error before the push, or the client fails first) is added back into
// the residual, so that nothing is lost or counted twice.
func pushSparse[T Float](c *Client, key string, ks *keyState, grad []T, samples int, dst []T) *Handle {
	sc, sp := ks.cfg.Sparse, ks.sparse
	codec := sc.codec()
	if codec == CodecZstd {
		if _, err := c.zstd.encoder(); err != nil {
			return c.failedHandle(kindPush, fmt.Errorf("ps: key %q: zstd: %w", key, err))
		}
	}
	dtype := reduce.DTypeOf[T]()
	typ := msgSparsePush
	if dst != nil {
		typ = msgSparsePushPull
	}
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
		payload, err := appendSparse(nil, codec, s.vals, wireIdx, &c.zstd)
		if err == nil && msgHeaderSize+pad8(len(pk))+len(payload) > c.cfg.MaxFrame {
			err = fmt.Errorf("ps: key %q: a sparse push of %d bytes does not fit in MaxFrame %d", key, len(payload), c.cfg.MaxFrame)
		}
		if err != nil {
			// Nothing is sent: every selection goes back.
			for _, q := range parts[:j] {
				if ef {
					restoreLocked(sp, q.p.Off, q.idx, q.vals)
				}
			}
			if ef {
				restoreLocked(sp, p.Off, s.idx, s.vals)
			}
			sp.mu.Unlock()
			c.mu.Lock()
			ks.clock-- // no push of the key took a clock since: send is held
			c.mu.Unlock()
			return c.failedHandle(kindPush, err)
		}
		s.msg = &message{Type: typ, Key: pk, Clock: uint32(clock), Samples: uint32(samples), DType: dtype,
			Code: uint8(sc.Method), Kind: uint8(codec), Count: uint64(p.Len), N: uint64(len(s.idx)), Data: payload}
		bytes += int64(len(payload))
		parts[j] = s
	}
	sp.mu.Unlock()

	c.addBytes(bytes, 0)
	h := c.newHandle(kindPush, len(parts))
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
