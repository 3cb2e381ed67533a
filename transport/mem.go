package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// MemNetwork connects n in-memory transports, one per rank, in one
// process. Payloads are copied as if they had crossed a wire. It is meant
// for tests: of gorun's algorithms, and of users' own training loops.
type MemNetwork struct {
	ts []*Mem

	// failMu makes an abort or a kill reach every rank at once, as seen by
	// Send: a rank that finds a peer failed also finds the reason.
	failMu sync.Mutex
	killed map[int]string // under failMu

	mu sync.Mutex
	// BeforeSend, if set, is called before every data frame is sent. It may
	// call Kill; if it returns false the frame is dropped silently.
	BeforeSend func(from, to int, h Header) bool
	// Elastic makes Kill a loss of one rank, as Config.Elastic does over
	// TCP: the others' calls that wait on it or send to it fail with its
	// PeerLostError, and nothing else fails. OnKill, if set, is called
	// after each Kill (the in-memory elastic job's sequencer). Set both
	// before any traffic.
	Elastic bool
	OnKill  func(r int)
}

// Mem is one rank's end of a MemNetwork.
type Mem struct {
	net       *MemNetwork
	rank      int
	w         *world
	closeOnce sync.Once
	done      chan struct{}
	sent      atomic.Int64 // data frames sent
	losses    lossFeed     // published under the network's failMu
}

var _ Transport = (*Mem)(nil)

// NewMemNetwork returns n connected in-memory transports. A rank's state
// for a peer is made when the two first exchange a frame, as the TCP
// transport connects on first use: a rank costs memory for the peers it
// talks to, so that jobs of thousands of ranks fit in one process.
func NewMemNetwork(n int) *MemNetwork {
	nw := &MemNetwork{ts: make([]*Mem, n)}
	for r := range n {
		m := &Mem{net: nw, rank: r, w: newWorld(r, n), done: make(chan struct{})}
		m.w.made = func(peer int, ps *peerState) {
			// A peer that closed before this rank first waited for it
			// has left (Close marks only the states it finds).
			select {
			case <-nw.ts[peer].done:
				ps.markLeft()
			default:
			}
		}
		nw.ts[r] = m
	}
	return nw
}

// Links returns how many peers rank r has exchanged frames with (sent to,
// received from or waited for): the connections it would hold over TCP.
func (nw *MemNetwork) Links(r int) int {
	m := nw.ts[r]
	seen := map[int]bool{}
	for _, p := range m.w.known() {
		seen[p] = true
	}
	for p, t := range nw.ts {
		if p != r && t.w.peers[r].Load() != nil {
			seen[p] = true
		}
	}
	return len(seen)
}

// Frames returns how many data frames rank r has sent.
func (nw *MemNetwork) Frames(r int) int64 { return nw.ts[r].sent.Load() }

// Size is the number of ranks.
func (nw *MemNetwork) Size() int { return len(nw.ts) }

// Transport returns rank r's transport.
func (nw *MemNetwork) Transport(r int) *Mem { return nw.ts[r] }

// Kill makes rank r vanish as a SIGKILL would: every other rank sees it as
// lost, and r's own calls fail.
func (nw *MemNetwork) Kill(r int) {
	nw.failMu.Lock()
	if _, again := nw.killed[r]; again {
		nw.failMu.Unlock()
		return
	}
	nw.ts[r].w.fail(fmt.Errorf("transport: rank %d was killed: %w", r, ErrClosed))
	for i, t := range nw.ts {
		if i == r {
			continue
		}
		if nw.Elastic {
			t.w.losePeer(r, &PeerLostError{Rank: r, Reason: "killed"})
		} else {
			t.w.fail(&PeerLostError{Rank: r, Reason: "killed"})
		}
		t.losses.publish(Loss{Rank: r, Reason: "killed"})
	}
	if nw.killed == nil {
		nw.killed = map[int]string{}
	}
	nw.killed[r] = "killed"
	nw.failMu.Unlock()
	if nw.OnKill != nil {
		nw.OnKill(r)
	}
}

// LocalPeers implements Transport: in memory every rank is on one host.
func (m *Mem) LocalPeers() []int {
	var out []int
	for r := range m.net.ts {
		if r != m.rank {
			out = append(out, r)
		}
	}
	return out
}

// Lost returns the ranks Kill removed (but this one), and why.
func (m *Mem) Lost() map[int]string {
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	return m.lostLocked()
}

// Losses implements Transport: Lost now, and each Kill from now on.
func (m *Mem) Losses() (lost map[int]string, news <-chan Loss, cancel func()) {
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	news, cancel = m.losses.subscribe()
	return m.lostLocked(), news, cancel
}

// lostLocked is Lost, under the network's failMu.
func (m *Mem) lostLocked() map[int]string {
	out := map[int]string{}
	for r, why := range m.net.killed {
		if r != m.rank {
			out[r] = why
		}
	}
	return out
}

// Rank implements Transport.
func (m *Mem) Rank() int { return m.rank }

// Size implements Transport.
func (m *Mem) Size() int { return len(m.net.ts) }

// Err implements Transport.
func (m *Mem) Err() error { return m.w.Err() }

// Failed implements Transport.
func (m *Mem) Failed() <-chan struct{} { return m.w.Failed() }

// Send implements Transport.
func (m *Mem) Send(ctx context.Context, to int, h Header, payload []byte) error {
	if err := m.w.checkPeer(to); err != nil {
		return err
	}
	if err := m.w.Err(); err != nil {
		return err
	}
	h.Type = TypeData
	h.Len = uint32(len(payload))
	if hook := m.net.BeforeSend; hook != nil {
		m.net.mu.Lock()
		ok := hook(m.rank, to, h)
		m.net.mu.Unlock()
		if err := m.w.Err(); err != nil {
			return err
		}
		if !ok {
			return nil
		}
	}
	p := getBuf(len(payload))
	copy(p, payload)
	dst := m.net.ts[to]
	select {
	case dst.w.peer(m.rank).inbox <- Frame{Header: h, Payload: p, release: putBuf}:
		m.sent.Add(1)
		return nil
	case <-dst.w.failed:
		putBuf(p)
		m.net.failMu.Lock()
		err := m.w.Err()
		m.net.failMu.Unlock()
		if err != nil {
			return err
		}
		return &PeerLostError{Rank: to, Reason: "its transport failed"}
	case <-m.w.failed:
		putBuf(p)
		return m.w.Err()
	case <-ctx.Done():
		putBuf(p)
		return ctxErr(ctx)
	}
}

// SetWaitMeter makes every later Recv add the time it is blocked for a
// peer's data to wm (nil: stop).
func (m *Mem) SetWaitMeter(wm *WaitMeter) { m.w.SetWaitMeter(wm) }

// Recv implements Transport.
func (m *Mem) Recv(ctx context.Context, from int) (Frame, error) { return m.w.recv(ctx, from) }

// Abort implements Transport.
func (m *Mem) Abort(err error) {
	if m.w.Err() != nil {
		return
	}
	p := abortPayload(err)
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	for i, t := range m.net.ts {
		if i != m.rank {
			t.w.fail(parseAbort(m.rank, p))
		}
	}
	m.w.fail(err)
}

// Close implements Transport; peers see a clean departure.
func (m *Mem) Close() error {
	m.closeOnce.Do(func() {
		close(m.done) // before the marks: see NewMemNetwork's made
		for i, t := range m.net.ts {
			if i == m.rank {
				continue
			}
			if ps := t.w.peers[m.rank].Load(); ps != nil {
				ps.markLeft()
			}
		}
		m.w.fail(fmt.Errorf("transport: rank %d: %w", m.rank, ErrClosed))
		m.losses.close()
	})
	return nil
}
