package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gorun/gorun/internal/canceled"
)

// ChanP2P marks a Header.Comm as a point-to-point channel: its frames are
// messages whose Seq is the tag, not a collective's number.
const ChanP2P uint32 = 1 << 31

// Key names a stream of frames within one peer's: the frames of one
// collective (its communicator and sequence number) or of one
// point-to-point tag.
type Key struct{ Comm, Seq uint32 }

// KeyOf is the stream a frame belongs to.
func KeyOf(h Header) Key { return Key{h.Comm, h.Seq} }

// Receiver is what a Mux reads from: a transport's Recv.
type Receiver interface {
	Recv(ctx context.Context, from int) (Frame, error)
}

// Mux lets several collectives (of one communicator or of several) and
// point-to-point messages receive from the same peer at once: each asks
// for the frames of its own Key, and gets them in the order the peer sent
// them.
//
// One caller at a time reads a peer's connection. A frame of the reader's
// own key is handed over as it lies (in shared memory, say), and the
// reader keeps the connection until it releases the frame, so frames are
// still released in the order they arrived. A frame of another key is
// copied, released at once and queued for its key. With a single stream
// at a time, as in a blocking collective, nothing is copied or queued.
type Mux struct {
	base  Receiver
	peers []muxPeer
}

type muxPeer struct {
	// busy: someone reads the connection, or holds its frame. Taken by
	// compare-and-swap, so that a lone reader takes no lock.
	busy    atomic.Bool
	queued  atomic.Int32 // frames in queues
	waiters atomic.Int32 // Recvs waiting for busy to end
	mu      sync.Mutex
	queues  map[Key][]Frame
	wake    chan struct{} // closed when busy ends or a frame is queued; nil: no waiters
	held    func([]byte)  // the held frame's own release (only the holder touches it)
	release func([]byte)  // releaseHeld, bound once
}

// NewMux returns a Mux over the size peers of base.
func NewMux(base Receiver, size int) *Mux {
	m := &Mux{base: base, peers: make([]muxPeer, size)}
	for i := range m.peers {
		p := &m.peers[i]
		p.release = p.releaseHeld
	}
	return m
}

// Recv returns the next frame of key k from peer from. As with
// Transport.Recv the caller must Release the frame, and the peer's next
// frame of any key waits for that.
func (m *Mux) Recv(ctx context.Context, from int, k Key) (Frame, error) {
	f, _, err := m.recv(ctx, from, k)
	return f, err
}

// recv is Recv, and whether the frame holds the connection.
func (m *Mux) recv(ctx context.Context, from int, k Key) (Frame, bool, error) {
	p := &m.peers[from]
	for {
		if !p.take() {
			f, got, err := p.slow(ctx, k)
			switch {
			case err != nil:
				return Frame{}, false, err
			case got == gotFrame:
				return f, false, nil
			case got == gotNothing:
				continue
			}
		}
		f, err := m.base.Recv(ctx, from)
		if err != nil {
			p.idle()
			return Frame{}, false, err
		}
		if KeyOf(f.Header) == k {
			if f.release == nil || f.Payload == nil {
				// Nothing to hold (Release skips an empty payload).
				f.Release()
				p.idle()
				return f, false, nil
			}
			p.held, f.release = f.release, p.release
			return f, true, nil
		}
		kept := Frame{Header: f.Header}
		if len(f.Payload) > 0 {
			kept.Payload = GetBuf(len(f.Payload))
			copy(kept.Payload, f.Payload)
			kept.release = PutBuf
		}
		f.Release()
		p.mu.Lock()
		if p.queues == nil {
			p.queues = map[Key][]Frame{}
		}
		kk := KeyOf(kept.Header)
		p.queues[kk] = append(p.queues[kk], kept)
		p.queued.Add(1)
		p.mu.Unlock()
		p.idle()
	}
}

// RecvAny returns the next frame of key k from whichever of the peers
// from sends one first, and that peer. It waits on each peer as Recv does,
// all at once; a frame that more than one brought at the same moment
// stays first in its peer's queue for k, so no frame is lost or reordered.
// It fails with the first error of a peer (a lost one, say) or ctx's.
func (m *Mux) RecvAny(ctx context.Context, from []int, k Key) (int, Frame, error) {
	for _, i := range from { // a frame already queued needs no wait
		if f, ok := m.peers[i].dequeue(k); ok {
			return i, f, nil
		}
	}
	if len(from) == 0 {
		return -1, Frame{}, errors.New("transport: receive from any peer of none")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type got struct {
		from int
		f    Frame
		held bool
		err  error
	}
	ch := make(chan got, len(from))
	for _, i := range from {
		go func() {
			f, held, err := m.recv(wctx, i, k)
			ch <- got{i, f, held, err}
		}()
	}
	win, won := got{from: -1}, false
	var fail error
	for range from {
		g := <-ch
		switch {
		case g.err == nil && !won && fail == nil:
			win, won = g, true
			cancel()
		case g.err == nil:
			m.peers[g.from].unread(k, g.f, g.held)
		case fail == nil && !won && wctx.Err() == nil:
			fail = g.err
			cancel()
		}
	}
	switch {
	case won:
		return win.from, win.f, nil
	case fail != nil:
		return -1, Frame{}, fail
	}
	return -1, Frame{}, canceled.Cause(ctx)
}

// dequeue takes k's first queued frame, if there is one.
func (p *muxPeer) dequeue(k Key) (Frame, bool) {
	if p.queued.Load() == 0 {
		return Frame{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.popLocked(k)
}

// popLocked takes k's first queued frame, if there is one; p.mu is held.
func (p *muxPeer) popLocked(k Key) (Frame, bool) {
	q := p.queues[k]
	if len(q) == 0 {
		return Frame{}, false
	}
	f := q[0]
	q[0] = Frame{}
	if len(q) == 1 {
		delete(p.queues, k)
	} else {
		p.queues[k] = q[1:]
	}
	p.queued.Add(-1)
	return f, true
}

// unread puts f back first in k's queue; a frame that held the
// connection is copied and released once it is queued, so that no later
// frame of k can come first.
func (p *muxPeer) unread(k Key, f Frame, held bool) {
	kept := f
	if held {
		kept = Frame{Header: f.Header, Payload: GetBuf(len(f.Payload)), release: PutBuf}
		copy(kept.Payload, f.Payload)
	}
	p.mu.Lock()
	if p.queues == nil {
		p.queues = map[Key][]Frame{}
	}
	p.queues[k] = append([]Frame{kept}, p.queues[k]...)
	p.queued.Add(1)
	if held {
		p.mu.Unlock()
		f.Release()
		return
	}
	if p.wake != nil { // a waiter may be parked on this key
		close(p.wake)
		p.wake = nil
	}
	p.mu.Unlock()
}

// take makes this caller the connection's reader without a lock: when
// nobody is and no frame waits in a queue.
func (p *muxPeer) take() bool {
	if p.queued.Load() != 0 || !p.busy.CompareAndSwap(false, true) {
		return false
	}
	if p.queued.Load() != 0 { // queued just before busy ended: look first
		p.idle()
		return false
	}
	return true
}

// What slow got.
const (
	gotNothing = iota // it waited: go round again
	gotFrame          // k's first queued frame
	gotReader         // the connection (busy taken)
)

// slow is Recv under the lock: k's first queued frame, or the
// connection, or a wait until the reader gives it up or queues a frame.
func (p *muxPeer) slow(ctx context.Context, k Key) (Frame, int, error) {
	p.mu.Lock()
	if f, ok := p.popLocked(k); ok {
		p.mu.Unlock()
		return f, gotFrame, nil
	}
	if p.busy.CompareAndSwap(false, true) {
		// Every queued frame of k was looked at under the lock, and only
		// a reader queues: k's next frame is on the connection.
		p.mu.Unlock()
		return Frame{}, gotReader, nil
	}
	p.waiters.Add(1)
	if !p.busy.Load() {
		// The reader gave up since the swap failed, and may not have
		// seen this waiter: go round again.
		p.waiters.Add(-1)
		p.mu.Unlock()
		return Frame{}, gotNothing, nil
	}
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	w := p.wake
	p.mu.Unlock()
	defer p.waiters.Add(-1)
	select {
	case <-w:
		return Frame{}, gotNothing, nil
	case <-ctx.Done():
		return Frame{}, gotNothing, canceled.Cause(ctx)
	}
}

// idle gives up the connection and wakes the waiters.
func (p *muxPeer) idle() {
	p.busy.Store(false)
	if p.waiters.Load() > 0 {
		p.mu.Lock()
		if p.wake != nil {
			close(p.wake)
			p.wake = nil
		}
		p.mu.Unlock()
	}
}

// releaseHeld releases the frame handed over as it lay, and with it the
// connection.
func (p *muxPeer) releaseHeld(b []byte) {
	rel := p.held
	p.held = nil
	rel(b)
	p.idle()
}

// Drop discards the queued frames of every key that keep rejects (those
// of collectives that will never run: an interrupted one's, say).
func (m *Mux) Drop(keep func(Key) bool) {
	for i := range m.peers {
		p := &m.peers[i]
		p.mu.Lock()
		for k, q := range p.queues {
			if !keep(k) {
				for j := range q {
					q[j].Release()
				}
				delete(p.queues, k)
				p.queued.Add(-int32(len(q)))
			}
		}
		p.mu.Unlock()
	}
}

// queued is the number of frames waiting for their keys' readers.
func (m *Mux) queued() int {
	n := 0
	for i := range m.peers {
		p := &m.peers[i]
		p.mu.Lock()
		for _, q := range p.queues {
			n += len(q)
		}
		p.mu.Unlock()
	}
	return n
}
