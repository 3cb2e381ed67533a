package ps

import (
	"context"
	"sync"
	"time"
)

// Handle is an asynchronous request: a push, a pull or both, possibly
// spread over several hubs.
type Handle struct {
	c     *Client
	kind  int
	start time.Time

	mu   sync.Mutex
	left int // parts not yet answered; 0 after an error
	// acks counts the parts whose push is not yet settled in the residual
	// (a sparse key with error feedback): the handle is done only when it
	// is 0 as well, so that the residual is final when Wait returns.
	acks int
	// settled, if not nil (acks was set), is closed when acks drops to 0.
	settled  chan struct{}
	err      error
	given    bool // Wait gave up: late replies are dropped
	finished bool // done is closed
	done     chan struct{}
}

const (
	kindPush = iota
	kindPull
	kindOther
)

func (c *Client) newHandle(kind, parts int) *Handle {
	h := &Handle{c: c, kind: kind, start: time.Now(), left: parts, done: make(chan struct{})}
	if parts == 0 {
		h.finished = true
		close(h.done)
	}
	return h
}

// finish records one part's answer; copy runs under the handle's lock
// unless Wait has given up. An error ends the request at once: the
// handle is done as soon as every push is settled too (settle).
func (h *Handle) finish(err error, copy func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left == 0 {
		return
	}
	if err != nil {
		h.err, h.left = err, 0
	} else {
		if copy != nil && !h.given {
			copy()
		}
		h.left--
	}
	h.complete()
}

// settle records that one part's push is settled in the residual.
func (h *Handle) settle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acks--
	if h.acks == 0 && h.settled != nil {
		close(h.settled)
	}
	h.complete()
}

// complete closes done, with h.mu held, once every part is answered (or
// one failed) and every push is settled.
func (h *Handle) complete() {
	if h.left == 0 && h.acks == 0 && !h.finished {
		h.finished = true
		took := time.Since(h.start)
		h.c.iter.addTime(h.kind, took)
		if t := h.c.cfg.Trace; t != nil && h.kind != kindOther {
			what := "push"
			if h.kind == kindPull {
				what = "pull"
			}
			t(what, h.start, took)
		}
		close(h.done)
	}
}

// stopped: the request has failed, or Wait has given up on it.
func (h *Handle) stopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.given || h.err != nil
}

// Done is closed when every part of the request has been answered (and
// every partition of a sparse push settled, as for Wait).
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait blocks until the request is complete, the client fails, or ctx
// ends. After an error the destination buffer's contents are unspecified,
// but the client no longer writes to it. When Wait returns, other than
// because ctx ended, every partition of a sparse push is settled in its
// key's residual (see "Sparse pushes" in the package doc); after the
// client failed, Wait on such a push returns once Fail has settled it.
func (h *Handle) Wait(ctx context.Context) error {
	t0 := time.Now()
	defer func() {
		took := time.Since(t0)
		h.c.iter.addWait(took)
		if t := h.c.cfg.Trace; t != nil {
			t("wait", t0, took)
		}
	}()
	select {
	case <-h.done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	default:
	}
	var err error
	select {
	case <-h.done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.err
	case <-h.c.failed:
		err = h.c.err
		if h.settled != nil {
			// Fail settles every partition of this push: the residual
			// is final for it when Wait returns.
			select {
			case <-h.settled:
			case <-ctx.Done():
				err = context.Cause(ctx)
			}
		}
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	h.mu.Lock()
	h.given = true
	if h.finished { // finished meanwhile
		err = h.err
	}
	h.mu.Unlock()
	return err
}
