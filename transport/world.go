package transport

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// world is the state both transports share: a data inbox per peer, which
// peers have left cleanly, and the error that failed the job, if any.
type world struct {
	rank, size int
	inbox      []chan Frame
	left       []chan struct{}
	leftOnce   []sync.Once

	failOnce sync.Once
	failed   chan struct{}
	err      atomic.Pointer[error] // read on every Send and Recv: no lock
	onFail   func()                // called once, after err is set

	meter atomic.Pointer[WaitMeter] // nil: Recv is not timed
}

// WaitMeter adds up the time Recv spends blocked for a peer's data (a
// Recv whose frame is already there adds nothing), on a clock of the
// caller's: every Recv of a transport once SetWaitMeter gave it one, in
// whatever goroutine. A collective's share of it is the difference of
// Total before and after.
type WaitMeter struct {
	Now   func() int64 // the clock; any unit
	total atomic.Int64
}

// NewWaitMeter returns a meter that reads now.
func NewWaitMeter(now func() int64) *WaitMeter { return &WaitMeter{Now: now} }

// Total is the time waited so far, in the clock's unit.
func (m *WaitMeter) Total() int64 { return m.total.Load() }

// addSince adds the time from t0 to now.
func (m *WaitMeter) addSince(t0 int64) { m.total.Add(m.Now() - t0) }

// SetWaitMeter makes every later Recv add its blocked time to m; nil
// stops it.
func (w *world) SetWaitMeter(m *WaitMeter) { w.meter.Store(m) }

const inboxDepth = 64

func newWorld(rank, size int) *world {
	w := &world{rank: rank, size: size, failed: make(chan struct{})}
	w.inbox = make([]chan Frame, size)
	w.left = make([]chan struct{}, size)
	w.leftOnce = make([]sync.Once, size)
	for i := range size {
		w.inbox[i] = make(chan Frame, inboxDepth)
		w.left[i] = make(chan struct{})
	}
	return w
}

// fail records the first error; later ones are dropped.
func (w *world) fail(err error) {
	w.failOnce.Do(func() {
		w.err.Store(&err)
		close(w.failed)
		if w.onFail != nil {
			w.onFail()
		}
	})
}

// Failed is closed once the world has failed.
func (w *world) Failed() <-chan struct{} { return w.failed }

func (w *world) Err() error {
	if e := w.err.Load(); e != nil {
		return *e
	}
	return nil
}

// markLeft records that peer closed cleanly.
func (w *world) markLeft(peer int) {
	w.leftOnce[peer].Do(func() { close(w.left[peer]) })
}

func (w *world) checkPeer(p int) error {
	if p < 0 || p >= w.size || p == w.rank {
		return fmt.Errorf("transport: rank %d: bad peer %d (size %d)", w.rank, p, w.size)
	}
	return nil
}

// deliver hands a frame to the inbox of from; it gives up if the world fails
// or done closes.
func (w *world) deliver(from int, f Frame, done <-chan struct{}) bool {
	select {
	case w.inbox[from] <- f:
		return true
	case <-w.failed:
	case <-done:
	}
	f.Release()
	return false
}

func (w *world) recv(ctx context.Context, from int) (Frame, error) {
	if err := w.checkPeer(from); err != nil {
		return Frame{}, err
	}
	select {
	case <-w.failed:
		return Frame{}, w.Err()
	default:
	}
	if m := w.meter.Load(); m != nil {
		select {
		case f := <-w.inbox[from]:
			return f, nil
		default:
		}
		defer m.addSince(m.Now())
	}
	select {
	case f := <-w.inbox[from]:
		return f, nil
	case <-w.failed:
		return Frame{}, w.Err()
	case <-w.left[from]:
		select {
		case f := <-w.inbox[from]:
			return f, nil
		default:
			return Frame{}, &PeerLostError{Rank: from, Reason: "it closed its Comm while this rank still expected data"}
		}
	case <-ctx.Done():
		select {
		case <-w.failed: // a failure explains more than the cancellation it caused
			return Frame{}, w.Err()
		default:
		}
		return Frame{}, ctxErr(ctx)
	}
}

// ctxErr wraps a context's error so that CodeOf recognises it.
func ctxErr(ctx context.Context) error {
	return fmt.Errorf("%w: %w", errCanceled, context.Cause(ctx))
}

// IsCanceled reports whether err came from a cancelled context (here or, via
// an abort, on a peer).
func IsCanceled(err error) bool {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code == CodeCanceled
	}
	return errors.Is(err, errCanceled) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// drain releases every undelivered frame; nothing sends any more.
func (w *world) drain() {
	for _, ch := range w.inbox {
		for len(ch) > 0 {
			f := <-ch
			f.Release()
		}
	}
}

func abortPayload(err error) []byte {
	msg := err.Error()
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	return append([]byte{byte(CodeOf(err))}, msg...)
}

func parseAbort(from int, p []byte) error {
	if len(p) == 0 {
		return &RemoteError{Rank: from, Code: CodeOther, Msg: "no reason given"}
	}
	return &RemoteError{Rank: from, Code: Code(p[0]), Msg: string(p[1:])}
}

// pool recycles payload buffers in power-of-two size classes.
var pool [41]sync.Pool

func getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if c < len(pool) {
		if b, ok := pool[c].Get().(*[]byte); ok {
			return (*b)[:n]
		}
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

func putBuf(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if cap(b) == 0 || cap(b) != 1<<c || c >= len(pool) {
		return
	}
	b = b[:cap(b)]
	pool[c].Put(&b)
}
