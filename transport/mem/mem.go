// Package mem is an in-memory transport.Transport: a Network of n ranks
// in one process, for tests of gorun's algorithms and of users' own
// training loops (memberlist's mock transport is the model), and an
// in-memory net.Listener (Listener) that servers written for a socket
// (a ParamHub hub) run on in tests and in collective.NewLocal.
//
// Send copies the payload, as a wire would: the caller's buffer is its
// own again when Send returns, and a received Frame's payload is a pooled
// buffer that Release gives back. A rank dies only when the test says so
// (Network.Kill): every other rank then fails with its PeerLostError, as
// over TCP (with Network.Elastic, only their calls that involve it). A
// rank that closes leaves cleanly: a Recv from it fails once its frames
// are used up.
package mem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/world"
)

// Network connects n in-memory transports, one per rank, in one
// process. Payloads are copied as if they had crossed a wire. It is meant
// for tests: of gorun's algorithms, and of users' own training loops.
type Network struct {
	ts []*Transport

	// failMu makes an abort or a kill reach every rank at once, as seen by
	// Send: a rank that finds a peer failed also finds the reason.
	failMu sync.Mutex
	killed map[int]string // under failMu

	mu sync.Mutex
	// BeforeSend, if set, is called before every data frame is sent. It may
	// call Kill; if it returns false the frame is dropped silently.
	BeforeSend func(from, to int, h transport.Header) bool
	// Elastic makes Kill a loss of one rank, as Config.Elastic does over
	// TCP: the others' calls that wait on it or send to it fail with its
	// PeerLostError, and nothing else fails. OnKill, if set, is called
	// after each Kill (the in-memory elastic job's sequencer). Set both
	// before any traffic.
	Elastic bool
	OnKill  func(r int)
	// Try, if set, makes TrySend send a frame at once when Try(from, to)
	// says so and the peer's inbox has room for it; unset, TrySend sends
	// nothing at once (every executor's frames go from its writer
	// goroutine). Set it before any traffic.
	Try func(from, to int) bool
}

// Transport is one rank's end of a Network.
type Transport struct {
	net       *Network
	rank      int
	w         *world.World
	closeOnce sync.Once
	done      chan struct{}
	sent      atomic.Int64 // data frames sent
	losses    world.Feed   // published under the network's failMu
}

var _ transport.Transport = (*Transport)(nil)

// NewNetwork returns n connected in-memory transports. A rank's state
// for a peer is made when the two first exchange a frame, as the TCP
// transport connects on first use: a rank costs memory for the peers it
// talks to, so that jobs of thousands of ranks fit in one process.
func NewNetwork(n int) *Network {
	nw := &Network{ts: make([]*Transport, n)}
	for r := range n {
		m := &Transport{net: nw, rank: r, w: world.New(r, n), done: make(chan struct{})}
		m.w.Made = func(peer int, ps *world.PeerState) {
			// A peer that closed before this rank first waited for it
			// has left (Close marks only the states it finds).
			select {
			case <-nw.ts[peer].done:
				ps.MarkLeft()
			default:
			}
		}
		nw.ts[r] = m
	}
	return nw
}

// Links returns how many peers rank r has exchanged frames with (sent to,
// received from or waited for): the connections it would hold over TCP.
func (nw *Network) Links(r int) int {
	m := nw.ts[r]
	seen := map[int]bool{}
	for _, p := range m.w.Known() {
		seen[p] = true
	}
	for p, t := range nw.ts {
		if p != r && t.w.Peers[r].Load() != nil {
			seen[p] = true
		}
	}
	return len(seen)
}

// Frames returns how many data frames rank r has sent.
func (nw *Network) Frames(r int) int64 { return nw.ts[r].sent.Load() }

// Size is the number of ranks.
func (nw *Network) Size() int { return len(nw.ts) }

// Transport returns rank r's transport.
func (nw *Network) Transport(r int) *Transport { return nw.ts[r] }

// Kill makes rank r vanish as a SIGKILL would: every other rank sees it as
// lost, and r's own calls fail.
func (nw *Network) Kill(r int) {
	nw.failMu.Lock()
	if _, again := nw.killed[r]; again {
		nw.failMu.Unlock()
		return
	}
	nw.ts[r].w.Fail(fmt.Errorf("transport: rank %d was killed: %w", r, transport.ErrClosed))
	for i, t := range nw.ts {
		if i == r {
			continue
		}
		if nw.Elastic {
			t.w.LosePeer(r, &transport.PeerLostError{Rank: r, Reason: "killed"})
		} else {
			t.w.Fail(&transport.PeerLostError{Rank: r, Reason: "killed"})
		}
		t.losses.Publish(transport.Loss{Rank: r, Reason: "killed"})
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
func (m *Transport) LocalPeers() []int {
	var out []int
	for r := range m.net.ts {
		if r != m.rank {
			out = append(out, r)
		}
	}
	return out
}

// Lost returns the ranks Kill removed (but this one), and why.
func (m *Transport) Lost() map[int]string {
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	return m.lostLocked()
}

// Losses implements Transport: Lost now, and each Kill from now on.
func (m *Transport) Losses() (lost map[int]string, news <-chan transport.Loss, cancel func()) {
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	news, cancel = m.losses.Subscribe()
	return m.lostLocked(), news, cancel
}

// lostLocked is Lost, under the network's failMu.
func (m *Transport) lostLocked() map[int]string {
	out := map[int]string{}
	for r, why := range m.net.killed {
		if r != m.rank {
			out[r] = why
		}
	}
	return out
}

// Rank implements Transport.
func (m *Transport) Rank() int { return m.rank }

// Size implements Transport.
func (m *Transport) Size() int { return len(m.net.ts) }

// Err implements Transport.
func (m *Transport) Err() error { return m.w.Err() }

// Failed implements Transport.
func (m *Transport) Failed() <-chan struct{} { return m.w.Failed() }

// TrySend implements transport.TrySender (see Network.Try).
func (m *Transport) TrySend(to int, h transport.Header, payload []byte) bool {
	if m.net.Try == nil || m.net.BeforeSend != nil || m.w.CheckPeer(to) != nil || m.w.Err() != nil || !m.net.Try(m.rank, to) {
		return false
	}
	dst := m.net.ts[to]
	if dst.w.Err() != nil {
		return false
	}
	h.Type, h.Len = transport.TypeData, uint32(len(payload))
	p := transport.GetBuf(len(payload))
	copy(p, payload)
	select {
	case dst.w.Peer(m.rank).Inbox <- transport.NewFrame(h, p, transport.PutBuf):
		m.sent.Add(1)
		return true
	default:
		transport.PutBuf(p)
		return false
	}
}

// Send implements Transport.
func (m *Transport) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if err := m.w.CheckPeer(to); err != nil {
		return err
	}
	if err := m.w.Err(); err != nil {
		return err
	}
	h.Type = transport.TypeData
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
	p := transport.GetBuf(len(payload))
	copy(p, payload)
	dst := m.net.ts[to]
	select {
	case dst.w.Peer(m.rank).Inbox <- transport.NewFrame(h, p, transport.PutBuf):
		m.sent.Add(1)
		return nil
	case <-dst.w.Failed():
		transport.PutBuf(p)
		m.net.failMu.Lock()
		err := m.w.Err()
		m.net.failMu.Unlock()
		if err != nil {
			return err
		}
		return &transport.PeerLostError{Rank: to, Reason: "its transport failed"}
	case <-m.w.Failed():
		transport.PutBuf(p)
		return m.w.Err()
	case <-ctx.Done():
		transport.PutBuf(p)
		return canceled.Cause(ctx)
	}
}

// SetWaitMeter makes every later Recv add the time it is blocked for a
// peer's data to wm (nil: stop).
func (m *Transport) SetWaitMeter(wm *transport.WaitMeter) { m.w.SetWaitMeter(wm) }

// Recv implements Transport.
func (m *Transport) Recv(ctx context.Context, from int) (transport.Frame, error) {
	return m.w.Recv(ctx, from)
}

// Abort implements Transport.
func (m *Transport) Abort(err error) {
	if m.w.Err() != nil {
		return
	}
	p := transport.EncodeAbort(err)
	m.net.failMu.Lock()
	defer m.net.failMu.Unlock()
	for i, t := range m.net.ts {
		if i != m.rank {
			t.w.Fail(transport.DecodeAbort(m.rank, p))
		}
	}
	m.w.Fail(err)
}

// Close implements Transport; peers see a clean departure.
func (m *Transport) Close() error {
	m.closeOnce.Do(func() {
		close(m.done) // before the marks: see NewNetwork's made
		for i, t := range m.net.ts {
			if i == m.rank {
				continue
			}
			if ps := t.w.Peers[m.rank].Load(); ps != nil {
				ps.MarkLeft()
			}
		}
		m.w.Fail(fmt.Errorf("transport: rank %d: %w", m.rank, transport.ErrClosed))
		m.losses.Close()
	})
	return nil
}
