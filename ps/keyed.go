package ps

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gorun/gorun/reduce"
)

// Float is an element type of keys.
type Float interface{ float32 | float64 }

// Declare creates key on its hubs, cut into partitions and placed by the
// least-loaded rule. Every worker declares the same keys in the same
// order, so that every worker computes the same placement. The key is
// this worker's to push and pull once every hub has accepted the
// declare; a declare that fails (a hub refuses it, ctx ends, or had
// ended when the answers came) leaves it undeclared but placed, so that
// declaring it again, with a corrected config of the same length, goes
// to the same hubs. Declaring a key again with the same length and
// sparse settings does nothing (the hubs check the rest: mode and
// staleness); with another length or other sparse settings it is refused
// here, and the key keeps its own.
func (c *Client) Declare(ctx context.Context, key string, cfg KeyConfig) error {
	if len(key) > maxKeyLen-24 {
		return fmt.Errorf("ps: key %q longer than %d bytes", key, maxKeyLen-24)
	}
	if cfg.Init != nil && len(cfg.Init) != cfg.Len {
		return fmt.Errorf("ps: key %q: %d initial values for %d elements", key, len(cfg.Init), cfg.Len)
	}
	if err := c.checkSparseKey(key, cfg); err != nil {
		return err
	}
	c.mu.Lock()
	var parts []Partition
	if ks, ok := c.keys[key]; ok {
		if err := sameKey(key, ks.cfg, cfg); err != nil {
			c.mu.Unlock()
			return err
		}
		parts = ks.parts
	} else if parts, ok = c.placed[key]; ok {
		if n := placedLen(parts); n != cfg.Len {
			c.mu.Unlock()
			return fmt.Errorf("%w: key %q is placed for %d elements by a declare that failed; declared again with %d", ErrShape, key, n, cfg.Len)
		}
	} else {
		parts = c.place.Add(key, cfg.Len)
		c.placed[key] = parts
	}
	c.mu.Unlock()
	h := c.newHandle(kindOther, len(parts))
	for _, p := range parts {
		m := &message{Type: msgDeclare, Key: partKey(key, p.Off), Count: uint64(p.Len), Code: uint8(cfg.Update), Stale: int32(cfg.Staleness), LR: cfg.LR, Mom: cfg.Momentum,
			Kind: uint8(cfg.Sparse.Method), WantOff: math.Float64bits(cfg.Sparse.Ratio), WantLen: cfg.Sparse.Seed}
		if cfg.Init != nil {
			m.Data = reduce.AsBytes(cfg.Init[p.Off : p.Off+p.Len])
		}
		c.send(p.Hub, m, h, nil, 0)
	}
	if err := h.Wait(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// The hubs answered before the wait, but the context had ended:
		// as when it ends first, the key is not declared here (the hubs
		// may have it; a declare again goes to the same partitions), so
		// that a declare with a done context never succeeds.
		return fmt.Errorf("ps: declare of %q: %w", key, context.Cause(ctx))
	}
	// Every hub accepted: the key is declared, with this config.
	c.mu.Lock()
	defer c.mu.Unlock()
	if ks, ok := c.keys[key]; ok {
		return sameKey(key, ks.cfg, cfg) // declared meanwhile by another goroutine
	}
	ks := &keyState{cfg: cfg, parts: parts}
	if cfg.Sparse.Method != Dense {
		ks.sparse = &sparseState{}
	}
	c.keys[key] = ks
	return nil
}

// sameKey checks a declare of a key against the one accepted: the same
// length and sparse settings (the hubs check the rest).
func sameKey(key string, have, want KeyConfig) error {
	if have.Len != want.Len || have.Sparse != want.Sparse {
		return fmt.Errorf("%w: key %q is declared with %d elements, sparse %v; declared again with %d, sparse %v",
			ErrShape, key, have.Len, have.Sparse, want.Len, want.Sparse)
	}
	return nil
}

// placedLen is the number of elements of a key's partitions.
func placedLen(parts []Partition) int {
	n := 0
	for _, p := range parts {
		n += p.Len
	}
	return n
}

func partKey(key string, off int) string { return fmt.Sprintf("%s@%d", key, off) }

func (c *Client) key(name string, n int) (*keyState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, ok := c.keys[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: declare it first", ErrUnknownKey, name)
	}
	if n != ks.cfg.Len {
		return nil, fmt.Errorf("%w: key %q has %d elements, got %d", ErrShape, name, ks.cfg.Len, n)
	}
	return ks, nil
}

func (c *Client) failedHandle(kind int, err error) *Handle {
	h := c.newHandle(kind, 1)
	h.finish(err, nil)
	return h
}

// Push sends this worker's gradient (or update) for key, computed from
// samples samples. It returns at once; Wait on the handle. grad must not
// change until the handle is done: it is sent from where it is. A sparse
// key's push (KeyConfig.Sparse) selects and copies what it sends before
// it returns, so its grad is free again at once.
func Push[T Float](c *Client, key string, grad []T, samples int) *Handle {
	return push(c, key, grad, samples, nil, msgPush)
}

// PushPull pushes grad and then pulls the value that includes this push
// (under BSP, the combined round) into dst. Partitions are pipelined: the
// push of one overlaps the pull of the one before.
func PushPull[T Float](c *Client, key string, grad []T, samples int, dst []T) *Handle {
	if len(dst) != len(grad) {
		return c.failedHandle(kindPush, fmt.Errorf("%w: push of %d elements into %d", ErrShape, len(grad), len(dst)))
	}
	return push(c, key, grad, samples, dst, msgPushPull)
}

func push[T Float](c *Client, key string, grad []T, samples int, dst []T, typ msgType) *Handle {
	ks, err := c.key(key, len(grad))
	if err != nil {
		return c.failedHandle(kindPush, err)
	}
	if ks.sparse != nil {
		return pushSparse(c, key, ks, grad, samples, dst)
	}
	c.mu.Lock()
	clock := ks.clock
	ks.clock++
	c.mu.Unlock()
	h := c.newHandle(kindPush, len(ks.parts))
	size := int(reduce.Size(reduce.DTypeOf[T]()))
	c.addBytes(int64(len(grad)*size), 0)
	for _, p := range ks.parts {
		m := &message{Type: typ, Key: partKey(key, p.Off), Clock: uint32(clock), Samples: uint32(samples), DType: reduce.DTypeOf[T](), Data: reduce.AsBytes(grad[p.Off : p.Off+p.Len])}
		var on func(*message)
		want := 0
		if dst != nil {
			on, want = pullInto(c, dst[p.Off:p.Off+p.Len]), p.Len*size
		}
		c.send(p.Hub, m, h, on, want)
	}
	return h
}

// Pull fetches key's value into dst, as this worker's clock for the key
// (the number of pushes it made) and the key's staleness bound allow.
func Pull[T Float](c *Client, key string, dst []T) *Handle {
	ks, err := c.key(key, len(dst))
	if err != nil {
		return c.failedHandle(kindPull, err)
	}
	c.mu.Lock()
	clock := ks.clock
	c.mu.Unlock()
	h := c.newHandle(kindPull, len(ks.parts))
	for _, p := range ks.parts {
		m := &message{Type: msgPull, Key: partKey(key, p.Off), Clock: uint32(clock), DType: reduce.DTypeOf[T]()}
		c.send(p.Hub, m, h, pullInto(c, dst[p.Off:p.Off+p.Len]), p.Len*int(reduce.Size(reduce.DTypeOf[T]())))
	}
	return h
}

func pullInto[T Float](c *Client, dst []T) func(*message) {
	return func(m *message) {
		copy(reduce.AsBytes(dst), m.Data)
		c.addBytes(0, int64(len(m.Data)))
	}
}

// Share reports this worker's last iteration (samples and compute time)
// to hub 0 and returns its LB-BSP share of a global batch of total
// samples, split by measured speed as hub 0's HubConfig.Share says (in
// proportion to speed by default). Every worker asks once per iteration,
// with the same total: the hub answers when all have asked, and the
// shares add up to total.
func (c *Client) Share(ctx context.Context, total, samples int, compute time.Duration) (int, error) {
	if total < 0 || samples < 0 {
		return 0, fmt.Errorf("ps: share of %d samples after %d: must not be negative", total, samples)
	}
	var share int
	h := c.newHandle(kindOther, 1)
	clock := c.shareClock.Add(1) - 1
	c.send(0, &message{Type: msgShare, Clock: clock, Count: uint64(total), Samples: uint32(samples), Nanos: int64(compute)}, h, func(m *message) {
		share = int(m.Count)
		if m.Kind&shareRelaxed != 0 {
			c.relaxed.Add(1)
		}
	}, 0)
	if err := h.Wait(ctx); err != nil {
		return 0, err
	}
	return share, nil
}

// DeadlineRelaxed is how many of this worker's Share calls hub 0 answered
// with a split that ignores ShareConfig.Deadline, because no split met it
// (ShareConfig.Miss, MissRelax). Probe rounds (see the package doc) are
// not counted.
func (c *Client) DeadlineRelaxed() int { return int(c.relaxed.Load()) }

// ReportLost tells every hub that worker is lost (found dead by gossip:
// a frozen or cut-off worker whose connections to the hubs may still look
// fine), so that rounds stop waiting for it: elastic hubs remove it, the
// others fail every request naming it.
func (c *Client) ReportLost(ctx context.Context, worker int, reason string) error {
	h := c.newHandle(kindOther, len(c.hubs))
	for i := range c.hubs {
		c.send(i, &message{Type: msgLost, Root: uint32(worker), Data: []byte(reason)}, h, nil, 0)
	}
	return h.Wait(ctx)
}
