package tcp

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/wire"
)

// Shared memory between ranks on one host.
//
// When a pair of ranks on one host connects (connect.go), the dialer
// creates a segment holding one ring each way (a file in ShmDir, mode
// 0600, named with 128 random bits, every page reserved up front) and
// offers its name and host key over the authenticated connection; the
// acceptor maps it if the host keys match and the file checks out,
// removes the name, and answers. From then on that pair's data frames go
// through the rings, read and written by the calling goroutines (no
// reader goroutine, no hand-off); the TCP connection stays for
// liveness, aborts and goodbyes, so a dead or frozen peer is found as
// before and wakes every waiter. Any refusal (another host, shared memory
// off, a full ShmDir) leaves the pair on TCP, with one warning naming the
// reason when it is a failure rather than a choice.

func (t *Mesh) shmDir() string {
	if t.cfg.ShmDir != "" {
		return t.cfg.ShmDir
	}
	return shmem.DefaultDir
}

// shmCfg is this rank's side of one pair's negotiation; off, if not "",
// is why it offers or accepts no shared memory.
func (t *Mesh) shmCfg(off string) shmem.Negotiation {
	t.mu.Lock()
	ringBytes := t.ringBytes // 0 (the default) if SetPeers has not run: an acceptor's offers are never made
	t.mu.Unlock()
	return shmem.Negotiation{
		HostKey: t.hostKey, RingCap: shmem.RingCapOf(ringBytes), Off: off, Dir: t.shmDir(), JobID: t.cfg.JobID,
		Reserve: t.cfg.shmReserve, Timeout: t.cfg.HandshakeTimeout, Log: t.log, WarnOnce: &t.shmWarn,
	}
}

// LocalPeers implements Transport: the peers whose host key is this
// rank's, from SetPeers, or, where it gave no hosts, learned while
// connecting (so only among connected peers).
func (t *Mesh) LocalPeers() []int {
	t.mu.Lock()
	if t.hostsKnown {
		var out []int
		for r, p := range t.peerList {
			if r != t.cfg.Rank && p.Host == t.hostKey {
				out = append(out, r)
			}
		}
		t.mu.Unlock()
		return out
	}
	t.mu.Unlock()
	return t.peersWhere(func(pc *peerConn) bool { return pc.sameHost })
}

// peersWhere lists, in rank order, the connected peers keep accepts.
func (t *Mesh) peersWhere(keep func(*peerConn) bool) []int {
	t.mu.Lock() // sameHost is written under it
	defer t.mu.Unlock()
	var out []int
	for _, pc := range t.peers() {
		if keep(pc) {
			out = append(out, pc.peer)
		}
	}
	return out
}

func (t *Mesh) attach(pc *peerConn, sp *shmem.Peer) {
	sp.Peer = pc.peer
	sp.Out.Wake, sp.In.Wake = shmem.FutexWake, shmem.FutexWake
	sp.Out.Wide = func() bool { return cpu.Contended(t.cfg.HostRanks) }
	sp.Init(t.cfg.MaxPayload)
	pc.shm.Store(sp)
}

// sharedMemoryPeers lists the peers this rank reaches through shared
// memory.
func (t *Mesh) sharedMemoryPeers() []int {
	return t.peersWhere(func(pc *peerConn) bool { return pc.shm.Load() != nil })
}

// shmWakeAll wakes every goroutine asleep on a ring, after a failure.
func (t *Mesh) shmWakeAll() {
	for _, pc := range t.peers() {
		if sp := pc.shm.Load(); sp != nil {
			sp.In.PSeq.Add(1)
			shmem.FutexWake(sp.In.PSeq)
			sp.Out.CSeq.Add(1)
			shmem.FutexWake(sp.Out.CSeq)
		}
	}
}

// shmWait waits until ready reports true, as shmem.Poll does (its spin
// begun away from the peer's CPU, where), asleep on the futex word, and
// returns early with the world's failure, ctx's error, or (if left is not
// nil and closes) errLeft.
func (t *Mesh) shmWait(ctx context.Context, where shmem.Where, word, sleeping *atomic.Uint32, left <-chan struct{}, ready func() (bool, error)) error {
	sleep := func(seq uint32) {
		wake := context.AfterFunc(ctx, func() { word.Add(1); shmem.FutexWake(word) })
		shmem.FutexWait(word, seq, shmem.Sleep)
		wake()
	}
	done := ctx.Done()
	w := t.wait()
	w.Locked = cpu.LockedThread(ctx)
	w.Where = where
	return shmem.Poll(word, sleeping, w, ready, func() error {
		// One channel at a time: a non-blocking receive from one open
		// channel reads no lock, where a select over three locks all
		// three, and this runs between every two polls.
		switch {
		case shmem.IsClosed(t.w.Failed()):
			return t.w.Err()
		case shmem.IsClosed(done):
			if shmem.IsClosed(t.w.Failed()) { // a failure explains more than the cancellation it caused
				return t.w.Err()
			}
			return canceled.Cause(ctx)
		case shmem.IsClosed(left):
			return errLeft
		}
		return nil
	}, sleep)
}

// errLeft is the error of a wait that the peer's leaving ended.
var errLeft = errors.New("left")

// shmSend writes one frame to sp, in pieces if it is long. If ctx ends
// after the first piece of a long frame, the rest is copied and written
// before the next frame (the receiver waits for it).
func (t *Mesh) shmSend(ctx context.Context, sp *shmem.Peer, h transport.Header, payload []byte) error {
	sp.Use.RLock()
	defer sp.Use.RUnlock()
	if sp.Closed {
		return t.closedErr()
	}
	sp.SMu.Lock()
	defer sp.SMu.Unlock()
	if len(sp.SendRest) > 0 {
		off, err := t.shmPieces(ctx, sp, sp.SendH, sp.SendRest, shmem.RecMore)
		sp.SendRest = sp.SendRest[off:]
		if err != nil {
			return err
		}
		sp.SendRest = nil
	}
	h.Type, h.Len = transport.TypeData, uint32(len(payload))
	kind := shmem.RecFrame
	if len(payload) > sp.Out.MaxPiece() {
		kind = shmem.RecStart
	}
	off, err := t.shmPieces(ctx, sp, h, payload, kind)
	if err != nil && off > 0 && off < len(payload) {
		sp.SendRest, sp.SendH = append([]byte(nil), payload[off:]...), h
	}
	return err
}

// TrySend implements transport.TrySender: a frame goes at once to a peer
// that shares memory with this rank when its ring has room for it as one
// piece and no other send to the peer is under way; nothing goes at once
// over TCP, where a write may wait for the peer.
func (t *Mesh) TrySend(to int, h transport.Header, payload []byte) bool {
	if to < 0 || to >= t.cfg.Size || to == t.cfg.Rank || t.w.Err() != nil || len(payload) > t.cfg.MaxPayload {
		return false
	}
	pc := t.conns[to].Load()
	if pc == nil || t.cfg.Elastic && t.gone(to) {
		return false
	}
	sp := pc.shm.Load()
	if sp == nil {
		return false
	}
	sp.Use.RLock()
	defer sp.Use.RUnlock()
	if sp.Closed || !sp.SMu.TryLock() {
		return false
	}
	defer sp.SMu.Unlock()
	if len(sp.SendRest) > 0 || len(payload) > sp.Out.MaxPiece() || !sp.Out.Fits(len(payload)) {
		return false
	}
	h.Type, h.Len = transport.TypeData, uint32(len(payload))
	sp.Out.Put(shmem.RecFrame, h, payload) // its RaceRelease pairs with the reply's
	return true
}

// shmPieces writes payload to sp's ring in pieces, the first of kind
// first and the rest recMore, and returns how much of it went out.
func (t *Mesh) shmPieces(ctx context.Context, sp *shmem.Peer, h transport.Header, payload []byte, first uint32) (int, error) {
	r := sp.Out
	piece := r.MaxPiece()
	kind := first
	for off := 0; ; {
		p := payload[off:min(off+piece, len(payload))]
		sp.Want = len(p)
		if err := t.shmWait(ctx, shmem.Where{}, r.CSeq, r.CWait, nil, sp.FitsWant); err != nil {
			return off, err
		}
		r.Put(kind, h, p)
		kind = shmem.RecMore
		if off += len(p); off >= len(payload) {
			return off, nil
		}
	}
}

// shmRecv reads the next frame from sp. A whole frame's payload is where
// it lies in shared memory until Release; a long one is gathered into a
// buffer of its own.
func (t *Mesh) shmRecv(ctx context.Context, sp *shmem.Peer) (transport.Frame, error) {
	sp.Use.RLock()
	defer sp.Use.RUnlock()
	if sp.Closed {
		return transport.Frame{}, t.closedErr()
	}
	r := sp.In
	next := sp.NextRec
	if sp.RecvPart == nil {
		if err := t.shmRecvWait(ctx, sp, next); err != nil {
			return transport.Frame{}, err
		}
		rec := sp.Rec
		switch rec.Kind {
		case shmem.RecFrame:
			r.Hold(rec.End)
			return transport.NewFrame(rec.H, rec.Payload, r.Relf), nil
		case shmem.RecMore:
			return transport.Frame{}, t.shmBroken(sp.Peer, shmem.Corrupt("a piece of a frame with no start"))
		}
		sp.RecvPart, sp.RecvH = transport.GetBuf(int(rec.H.Len)), rec.H
		sp.RecvN = copy(sp.RecvPart, rec.Payload)
		r.Hold(rec.End)
		r.Release()
	}
	// A long frame: gather its pieces. If ctx ends first, what is
	// gathered stays in sp for the next Recv.
	buf, total := sp.RecvPart, len(sp.RecvPart)
	for sp.RecvN < total {
		if err := t.shmRecvWait(ctx, sp, next); err != nil {
			return transport.Frame{}, err
		}
		rec := sp.Rec
		if rec.Kind != shmem.RecMore || len(rec.Payload) > total-sp.RecvN {
			sp.RecvPart = nil
			transport.PutBuf(buf)
			return transport.Frame{}, t.shmBroken(sp.Peer, shmem.Corrupt("piece of %d bytes (kind %d) where %d of a frame are due", len(rec.Payload), rec.Kind, total-sp.RecvN))
		}
		sp.RecvN += copy(buf[sp.RecvN:], rec.Payload)
		r.Hold(rec.End)
		r.Release()
	}
	sp.RecvPart = nil
	return transport.NewFrame(sp.RecvH, buf, transport.PutBuf), nil
}

func (t *Mesh) shmRecvWait(ctx context.Context, sp *shmem.Peer, next func() (bool, error)) error {
	r := sp.In
	where := sp.Where()
	var err error
	if m := t.w.Meter.Load(); m != nil {
		// Metered: time the wait only if the data is not here yet.
		var ok bool
		if ok, err = next(); !ok && err == nil {
			t0 := m.Now()
			err = t.shmWait(ctx, where, r.PSeq, r.PWait, t.w.Peer(sp.Peer).Left, next)
			m.AddSince(t0)
		}
	} else {
		err = t.shmWait(ctx, where, r.PSeq, r.PWait, t.w.Peer(sp.Peer).Left, next)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errLeft):
		return t.w.GoneErr(sp.Peer)
	case errors.Is(err, wire.ErrFrame):
		return t.shmBroken(sp.Peer, err)
	}
	return err
}

// shmBroken fails the world over a corrupt ring, naming the peer.
func (t *Mesh) shmBroken(peer int, err error) error {
	lost := &transport.PeerLostError{Rank: peer, Reason: "its shared memory is corrupt: " + err.Error()}
	t.w.Fail(lost)
	return lost
}

func (t *Mesh) closedErr() error {
	if err := t.w.Err(); err != nil {
		return err
	}
	return fmt.Errorf("transport: rank %d: %w", t.cfg.Rank, transport.ErrClosed)
}

// closeShm unmaps every segment once no Send or Recv is using it. A
// segment whose frames the caller still holds (not released) stays mapped:
// unmapping it would pull the payload from under the caller.
func (t *Mesh) closeShm() {
	t.mu.Lock()
	retired := t.retired
	t.mu.Unlock()
	for _, pc := range append(t.peers(), retired...) {
		sp := pc.shm.Load()
		if sp == nil {
			continue
		}
		sp.Use.Lock()
		if !sp.Closed && sp.In.UnmapIfIdle() {
			sp.Closed = true
			_ = shmem.Unmap(sp.Mem)
		}
		sp.Use.Unlock()
	}
}
