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

	mu    sync.Mutex
	left  int
	err   error
	given bool // Wait gave up: late replies are dropped
	done  chan struct{}
}

const (
	kindPush = iota
	kindPull
	kindOther
)

func (c *Client) newHandle(kind, parts int) *Handle {
	h := &Handle{c: c, kind: kind, start: time.Now(), left: parts, done: make(chan struct{})}
	if parts == 0 {
		close(h.done)
	}
	return h
}

// finish records one part's answer; copy runs under the handle's lock
// unless Wait has given up. An error completes the handle at once.
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
	if h.left == 0 {
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

// Done is closed when every part of the request has been answered.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait blocks until the request is complete, the client fails, or ctx
// ends. After an error the destination buffer's contents are unspecified,
// but the client no longer writes to it.
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
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	h.mu.Lock()
	h.given = true
	if h.left == 0 { // finished meanwhile
		err = h.err
	}
	h.mu.Unlock()
	return err
}
