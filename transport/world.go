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
// peers are gone (left cleanly, or lost in an elastic job: what wakes the
// calls that wait on them), and the error that failed the job, if any.
// Who is gone is decided elsewhere (the TCP mesh's liveness machine, or
// the in-memory network's Kill and Close).
type world struct {
	rank, size int
	// peers holds each peer's inbox and departure, made on first use: a
	// rank pays for the peers it talks to, not for the job's size.
	peers []atomic.Pointer[peerState]
	// made, if set, is called when a peer's state is made (before anyone
	// can wait on it): the in-memory network marks ranks that already
	// closed.
	made func(peer int, ps *peerState)

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

// peerState is what a rank keeps for one peer it has heard from or
// waited for.
type peerState struct {
	inbox    chan Frame
	left     chan struct{} // closed when the peer left cleanly, or was lost (elastic)
	leftOnce sync.Once
	lost     atomic.Pointer[PeerLostError] // why, when an elastic transport lost it
}

func newWorld(rank, size int) *world {
	return &world{rank: rank, size: size, failed: make(chan struct{}), peers: make([]atomic.Pointer[peerState], size)}
}

// peer returns peer p's state, making it on first use.
func (w *world) peer(p int) *peerState {
	if ps := w.peers[p].Load(); ps != nil {
		return ps
	}
	ps := &peerState{inbox: make(chan Frame, inboxDepth), left: make(chan struct{})}
	if !w.peers[p].CompareAndSwap(nil, ps) {
		return w.peers[p].Load()
	}
	if w.made != nil {
		w.made(p, ps)
	}
	return ps
}

// known lists the peers that have state, in rank order.
func (w *world) known() []int {
	var out []int
	for p := range w.peers {
		if w.peers[p].Load() != nil {
			out = append(out, p)
		}
	}
	return out
}

// fail records the first error; later ones are dropped. It reports
// whether err was the first.
func (w *world) fail(err error) bool {
	first := false
	w.failOnce.Do(func() {
		first = true
		w.err.Store(&err)
		close(w.failed)
		if w.onFail != nil {
			w.onFail()
		}
	})
	return first
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
func (w *world) markLeft(peer int) { w.peer(peer).markLeft() }

func (ps *peerState) markLeft() { ps.leftOnce.Do(func() { close(ps.left) }) }

// losePeer records that an elastic transport lost peer, for err (the
// first one stands), and wakes every call waiting on it.
func (w *world) losePeer(peer int, err *PeerLostError) {
	ps := w.peer(peer)
	ps.lost.CompareAndSwap(nil, err)
	ps.markLeft()
}

// revive gives peer a fresh state, as if it had never been heard from:
// its restarted process takes its place (TCP.Revive). Frames still queued
// from the old process are released.
func (w *world) revive(peer int) {
	old := w.peers[peer].Swap(nil)
	if old == nil {
		return
	}
	for len(old.inbox) > 0 {
		f := <-old.inbox
		f.Release()
	}
}

// renew gives peer a fresh state if its old one was lost or left, with
// the frames queued in it (its restarted process's, which connected
// before this rank heard of it; TCP.Revive).
func (w *world) renew(peer int) {
	old := w.peers[peer].Load()
	if old == nil || !isClosed(old.left) {
		return
	}
	// The same inbox: a frame the reader delivers meanwhile lands in it,
	// in order, whichever state it looked up.
	w.peers[peer].Store(&peerState{inbox: old.inbox, left: make(chan struct{})})
}

// goneErr is the error of waiting on, or sending to, a peer that left or
// was lost.
func (w *world) goneErr(peer int) error {
	if ps := w.peers[peer].Load(); ps != nil {
		if err := ps.lost.Load(); err != nil {
			return err
		}
	}
	return leftError(peer)
}

func (w *world) checkPeer(p int) error {
	if p < 0 || p >= w.size || p == w.rank {
		return fmt.Errorf("transport: rank %d: bad peer %d (size %d)", w.rank, p, w.size)
	}
	return nil
}

// tryDeliver hands f to the inbox of from if it has room now.
func (w *world) tryDeliver(from int, f Frame) bool {
	select {
	case w.peer(from).inbox <- f:
		return true
	default:
		return false
	}
}

// deliver hands a frame to the inbox of from; it gives up if the world fails
// or done closes.
func (w *world) deliver(from int, f Frame, done <-chan struct{}) bool {
	select {
	case w.peer(from).inbox <- f:
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
	ps := w.peer(from)
	if m := w.meter.Load(); m != nil {
		select {
		case f := <-ps.inbox:
			return f, nil
		default:
		}
		defer m.addSince(m.Now())
	}
	select {
	case f := <-ps.inbox:
		return f, nil
	case <-w.failed:
		return Frame{}, w.Err()
	case <-ps.left:
		select {
		case f := <-ps.inbox:
			return f, nil
		default:
			return Frame{}, w.goneErr(from)
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

// leftError is the error of waiting on a peer that left cleanly.
func leftError(peer int) error {
	return &PeerLostError{Rank: peer, Reason: "it closed its Comm while this rank still expected data"}
}

// ctxErr wraps a context's error so that codeOf recognises it.
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
	for p := range w.peers {
		ps := w.peers[p].Load()
		if ps == nil {
			continue
		}
		ch := ps.inbox
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
	return append([]byte{byte(codeOf(err))}, msg...)
}

func parseAbort(from int, p []byte) error {
	if len(p) == 0 {
		return &RemoteError{Rank: from, Code: CodeOther, Msg: "no reason given"}
	}
	return &RemoteError{Rank: from, Code: Code(p[0]), Msg: string(p[1:])}
}

// pool recycles payload buffers in power-of-two size classes.
var pool [41]sync.Pool

// GetBuf returns a buffer of n bytes from the transport's pool of
// power-of-two size classes, for a frame's payload (as the alloc of
// Reader.Next); its contents are whatever they were. PutBuf gives a
// buffer back once nothing refers to it (a slice whose capacity is not a
// power of two is dropped: give back what GetBuf returned, not a part).
func GetBuf(n int) []byte { return getBuf(n) }

// PutBuf gives b, from GetBuf, back to the pool (see GetBuf).
func PutBuf(b []byte) { putBuf(b) }

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
