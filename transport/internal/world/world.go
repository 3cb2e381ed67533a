// Package world is the state both transports (transport/tcp and
// transport/mem) share: a data inbox per peer, which peers are gone (left
// cleanly, or lost in an elastic job: what wakes the calls that wait on
// them), the error that failed the job, if any, and the feed of losses
// (Feed). Who is gone is decided by its owner (the TCP mesh's liveness
// machine, or the in-memory network's Kill and Close); World only
// records it and wakes the waiters.
package world

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/transport"
)

// World is one rank's view of the job: see the package documentation.
type World struct {
	rank, size int
	// Peers holds each peer's inbox and departure, made on first use: a
	// rank pays for the peers it talks to, not for the job's size.
	Peers []atomic.Pointer[PeerState]
	// Made, if set, is called when a peer's state is made (before anyone
	// can wait on it): the in-memory network marks ranks that already
	// closed.
	Made func(peer int, ps *PeerState)

	failOnce sync.Once
	failed   chan struct{}
	err      atomic.Pointer[error] // read on every Send and Recv: no lock
	OnFail   func()                // called once, after err is set

	Meter atomic.Pointer[transport.WaitMeter] // nil: Recv is not timed
}

// SetWaitMeter makes every later Recv add its blocked time to m; nil
// stops it.
func (w *World) SetWaitMeter(m *transport.WaitMeter) { w.Meter.Store(m) }

// InboxDepth is how many frames from one peer wait in its inbox before
// the reader waits for room.
const InboxDepth = 64

// PeerState is what a rank keeps for one peer it has heard from or
// waited for.
type PeerState struct {
	Inbox    chan transport.Frame
	Left     chan struct{} // closed when the peer left cleanly, or was lost (elastic)
	leftOnce sync.Once
	lost     atomic.Pointer[transport.PeerLostError] // why, when an elastic transport lost it
}

// New is the world of rank in a job of size ranks.
func New(rank, size int) *World {
	return &World{rank: rank, size: size, failed: make(chan struct{}), Peers: make([]atomic.Pointer[PeerState], size)}
}

// peer returns peer p's state, making it on first use.
func (w *World) Peer(p int) *PeerState {
	if ps := w.Peers[p].Load(); ps != nil {
		return ps
	}
	ps := &PeerState{Inbox: make(chan transport.Frame, InboxDepth), Left: make(chan struct{})}
	if !w.Peers[p].CompareAndSwap(nil, ps) {
		return w.Peers[p].Load()
	}
	if w.Made != nil {
		w.Made(p, ps)
	}
	return ps
}

// known lists the peers that have state, in rank order.
func (w *World) Known() []int {
	var out []int
	for p := range w.Peers {
		if w.Peers[p].Load() != nil {
			out = append(out, p)
		}
	}
	return out
}

// fail records the first error; later ones are dropped. It reports
// whether err was the first.
func (w *World) Fail(err error) bool {
	first := false
	w.failOnce.Do(func() {
		first = true
		w.err.Store(&err)
		close(w.failed)
		if w.OnFail != nil {
			w.OnFail()
		}
	})
	return first
}

// Failed is closed once the world has failed.
func (w *World) Failed() <-chan struct{} { return w.failed }

func (w *World) Err() error {
	if e := w.err.Load(); e != nil {
		return *e
	}
	return nil
}

// MarkLeft records that peer closed cleanly.
func (w *World) MarkLeft(peer int) { w.Peer(peer).MarkLeft() }

func (ps *PeerState) MarkLeft() { ps.leftOnce.Do(func() { close(ps.Left) }) }

// LosePeer records that an elastic transport lost peer, for err (the
// first one stands), and wakes every call waiting on it.
func (w *World) LosePeer(peer int, err *transport.PeerLostError) {
	ps := w.Peer(peer)
	ps.lost.CompareAndSwap(nil, err)
	ps.MarkLeft()
}

// revive gives peer a fresh state, as if it had never been heard from:
// its restarted process takes its place (tcp.Mesh.Revive). Frames still queued
// from the old process are released.
func (w *World) Revive(peer int) {
	old := w.Peers[peer].Swap(nil)
	if old == nil {
		return
	}
	for len(old.Inbox) > 0 {
		f := <-old.Inbox
		f.Release()
	}
}

// renew gives peer a fresh state if its old one was lost or left, with
// the frames queued in it (its restarted process's, which connected
// before this rank heard of it; tcp.Mesh.Revive).
func (w *World) Renew(peer int) {
	old := w.Peers[peer].Load()
	if old == nil || !isClosed(old.Left) {
		return
	}
	// The same Inbox: a frame the reader delivers meanwhile lands in it,
	// in order, whichever state it looked up.
	w.Peers[peer].Store(&PeerState{Inbox: old.Inbox, Left: make(chan struct{})})
}

// GoneErr is the error of waiting on, or sending to, a peer that left or
// was lost.
func (w *World) GoneErr(peer int) error {
	if ps := w.Peers[peer].Load(); ps != nil {
		if err := ps.lost.Load(); err != nil {
			return err
		}
	}
	return leftError(peer)
}

func (w *World) CheckPeer(p int) error {
	if p < 0 || p >= w.size || p == w.rank {
		return fmt.Errorf("transport: rank %d: bad peer %d (size %d)", w.rank, p, w.size)
	}
	return nil
}

// TryDeliver hands f to the inbox of from if it has room now.
func (w *World) TryDeliver(from int, f transport.Frame) bool {
	select {
	case w.Peer(from).Inbox <- f:
		return true
	default:
		return false
	}
}

// deliver hands a frame to the inbox of from; it gives up if the world fails
// or done closes.
func (w *World) Deliver(from int, f transport.Frame, done <-chan struct{}) bool {
	select {
	case w.Peer(from).Inbox <- f:
		return true
	case <-w.failed:
	case <-done:
	}
	f.Release()
	return false
}

func (w *World) Recv(ctx context.Context, from int) (transport.Frame, error) {
	if err := w.CheckPeer(from); err != nil {
		return transport.Frame{}, err
	}
	select {
	case <-w.failed:
		return transport.Frame{}, w.Err()
	default:
	}
	ps := w.Peer(from)
	if m := w.Meter.Load(); m != nil {
		select {
		case f := <-ps.Inbox:
			return f, nil
		default:
		}
		defer m.AddSince(m.Now())
	}
	select {
	case f := <-ps.Inbox:
		return f, nil
	case <-w.failed:
		return transport.Frame{}, w.Err()
	case <-ps.Left:
		select {
		case f := <-ps.Inbox:
			return f, nil
		default:
			return transport.Frame{}, w.GoneErr(from)
		}
	case <-ctx.Done():
		select {
		case <-w.failed: // a failure explains more than the cancellation it caused
			return transport.Frame{}, w.Err()
		default:
		}
		return transport.Frame{}, canceled.Cause(ctx)
	}
}

// leftError is the error of waiting on a peer that left cleanly.
func leftError(peer int) error {
	return &transport.PeerLostError{Rank: peer, Reason: "it closed its Comm while this rank still expected data"}
}

// drain releases every undelivered frame; nothing sends any more.
func (w *World) Drain() {
	for p := range w.Peers {
		ps := w.Peers[p].Load()
		if ps == nil {
			continue
		}
		ch := ps.Inbox
		for len(ch) > 0 {
			f := <-ch
			f.Release()
		}
	}
}

// isClosed reports whether ch is closed (or has a value ready); false for
// a nil channel.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
