package tcp

import (
	"context"
	"errors"
	"time"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/wire"
)

// Peer liveness: when a peer is lost or has left. The rules are package
// liveness's Machine; the mesh feeds it what it sees (a connection made,
// a goodbye, a pong or a connection's end read, a failed send or ping,
// gossip's word, a dial's start and failures, the job failing, Close,
// Revive, time passing) and carries out what it answers (see liveness's
// package doc for the owner's contract, and where each rule lived).
//
// Every step is taken under livMu, with the time read under it, and with
// it what must agree with the machine at every instant: the world's
// record of a peer that left or that an elastic job lost, and the news to
// loss subscribers. The other actions are performed after the lock is
// released, in order, by the goroutine that stepped: a ping or a probe in
// a goroutine of its own (neither may hold up the caller), a reader's
// progress at once (a Sample is answered with the reader's counters), a
// loss's abort and the job's failure, log lines. One goroutine
// (livenessLoop) steps a Tick at the machine's Deadline.

// newMachine is cfg's liveness machine.
func newMachine(cfg Config) (*liveness.Machine, error) {
	lc := liveness.DefaultConfig()
	lc.Rank, lc.Size = cfg.Rank, cfg.Size
	lc.ConfirmTimeout = max(cfg.ConfirmTimeout, 0)
	lc.ExplainWait = cfg.ExplainWait
	lc.ConnectTimeout = cfg.ConnectTimeout
	lc.WatchAll, lc.Elastic = cfg.WatchAll, cfg.Elastic
	return liveness.New(lc)
}

// step steps evs, in order, at one instant, and returns the actions to
// perform.
func (t *Mesh) step(evs ...liveness.Event) []liveness.Action {
	t.livMu.Lock()
	defer t.livMu.Unlock()
	return t.stepLocked(evs...)
}

// stepBroken is step for an event that breaks pc (its reader ended, or a
// write on it failed): pc is marked broken at the same instant, so that
// Revive never keeps a connection the machine has dropped.
func (t *Mesh) stepBroken(pc *peerConn, ev liveness.Event) []liveness.Action {
	t.livMu.Lock()
	defer t.livMu.Unlock()
	pc.broken.Store(true)
	return t.stepLocked(ev)
}

// stepLocked steps evs under livMu, records what must agree with the
// machine, and wakes the timer if the deadline moved earlier.
func (t *Mesh) stepLocked(evs ...liveness.Event) []liveness.Action {
	now := time.Now()
	var acts []liveness.Action
	for _, ev := range evs {
		acts = append(acts, t.live.Step(now, ev)...)
	}
	for _, a := range acts {
		switch a := a.(type) {
		case liveness.DeclareLeft:
			t.w.MarkLeft(a.Peer)
		case liveness.DeclareLost:
			t.losses.Publish(transport.Loss{Rank: a.Peer, Reason: a.Reason})
			if a.Then == liveness.DropPeer {
				t.w.LosePeer(a.Peer, lostError(a))
			}
		}
	}
	if at, ok := t.live.Deadline(); ok && (t.armed.IsZero() || at.Before(t.armed)) {
		t.armed = at
		select {
		case t.rearm <- struct{}{}:
		default:
		}
	}
	return acts
}

func lostError(a liveness.DeclareLost) *transport.PeerLostError {
	return &transport.PeerLostError{Rank: a.Peer, Reason: a.Reason, Cause: a.Cause}
}

// perform carries out acts (from step, its lock released), in order; a
// Sample's Progress is stepped at once, and its actions performed after
// the rest.
func (t *Mesh) perform(acts []liveness.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case liveness.Sample:
			if pc := t.connOf(a.Peer, a.Conn); pc != nil {
				acts = append(acts, t.step(liveness.Progress{Peer: a.Peer, Conn: a.Conn, Reads: pc.reads.Load(), Stuck: pc.stuck.Load(), Stall: pc.stall.Longest(), Writing: pc.pinging.Load() > 0})...)
			}
		case liveness.Ping:
			t.ping(a)
		case liveness.Probe:
			t.goTracked(func() {
				ctx, cancel := context.WithTimeout(t.closeCtx, a.Timeout)
				answered := t.probe(ctx, a.Peer, a.Knock)
				cancel()
				t.perform(t.step(liveness.ProbeDone{Peer: a.Peer, Gen: a.Gen, Seq: a.Seq, Answered: answered}))
			})
		case liveness.DeclareLost:
			// Recorded, and told, with the step; the world's record of an
			// elastic job's loss too.
			switch a.Then {
			case liveness.FailJob:
				// The other peers first, with the cause, so that each of
				// them blames the lost rank even if this rank exits
				// before they notice the loss themselves.
				err := lostError(a)
				t.broadcastAbort(err, a.Peer, t.cfg.NoticeTimeout)
				t.w.Fail(err)
			case liveness.DropPeer:
				if t.cfg.OnPeerLost != nil {
					t.cfg.OnPeerLost(a.Peer, a.Reason)
				}
			}
		case liveness.Kept:
			t.log.Warn(liveness.LogMessage(a), "rank", a.Peer)
		case liveness.AskAgain:
			t.log.Warn(liveness.LogMessage(a), "rank", a.Peer)
		case liveness.Doubt:
			t.log.Debug(liveness.LogMessage(a), "rank", a.Peer, "reason", a.Reason)
			t.mu.Lock()
			t.slotOf(a.Peer).notify()
			t.mu.Unlock()
		}
	}
}

// ping writes a ping on the connection a names, in a goroutine: with no
// deadline (a write cut short leaves half a frame in the stream, and every
// later frame unreadable), as a peer that is slow to read is not lost;
// the transport's failure or its closing ends a write that waits.
func (t *Mesh) ping(a liveness.Ping) {
	pc := t.connOf(a.Peer, a.Conn)
	if pc == nil {
		return
	}
	t.goTracked(func() {
		pc.pinging.Add(1)
		err := t.write(t.closeCtx, pc, transport.Header{Type: transport.TypePing}, nil)
		pc.pinging.Add(-1)
		if err != nil {
			t.perform(t.stepBroken(pc, liveness.PingFailed{Peer: a.Peer, Conn: a.Conn, Err: err}))
		}
	})
}

// connOf returns peer's connection if its number is id.
func (t *Mesh) connOf(peer int, id liveness.ConnID) *peerConn {
	if peer < 0 || peer >= t.cfg.Size {
		return nil
	}
	if pc := t.conns[peer].Load(); pc != nil && pc.id == id {
		return pc
	}
	return nil
}

// goTracked runs f in a goroutine that Close waits for, unless the
// transport is closing.
func (t *Mesh) goTracked(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if shmem.IsClosed(t.closing) {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
}

// livenessLoop steps the host's load and a Tick whenever the machine's
// deadline comes, until the transport closes.
func (t *Mesh) livenessLoop() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.livMu.Lock()
		at, ok := t.live.Deadline()
		t.armed = at // zero if none
		t.livMu.Unlock()
		var fire <-chan time.Time
		if ok {
			timer.Reset(time.Until(at))
			fire = timer.C
		} else {
			timer.Stop()
		}
		select {
		case <-fire:
			// The load at a deadline stretches the windows that end then
			// (connecting, a probe).
			t.perform(t.step(liveness.HostLoad{Load: hostLoad()}, liveness.Tick{}))
		case <-t.rearm:
		case <-t.closing:
			return
		}
	}
}

// hostLoad is this host's load, now or over the last minute, whichever
// is more (cpu.Lately), for the confirmation windows (the zero Load
// where it cannot be read): a window opened at a lull of a busy host is
// as long as the host's work says.
func hostLoad() liveness.Load {
	n, cpus := cpu.Host()
	return liveness.Load{Runnable: n, CPUs: cpus}
}

// gone reports whether peer is gone for this rank's calls: it left, or an
// elastic transport lost it (a job that is not elastic fails on a loss,
// and its error says so).
func (t *Mesh) gone(peer int) bool {
	t.livMu.Lock()
	st := t.live.Status(peer)
	t.livMu.Unlock()
	return st == liveness.Left || st == liveness.Lost && t.cfg.Elastic
}

// gen is peer's generation (see Revive).
func (t *Mesh) gen(peer int) uint32 {
	t.livMu.Lock()
	defer t.livMu.Unlock()
	return t.live.Gen(peer)
}

// PeerLost tells the transport that gossip declared peer dead, for
// reason.
//
// Gossip can be wrong about a rank whose process is starved of CPU, so
// its verdict is checked first: a connected rank is pinged on its data
// connection, and only if it does not answer within ConfirmTimeout
// (stretched on an overloaded host: liveness.DefaultPolicy), nor send
// anything for as long, nor answer a knock (a second connection, which
// its running process refuses as a duplicate), is it lost. A stopped or
// cut-off process cannot answer. A rank this one has no connection to is probed with a
// connection (WatchAll), or else remembered, so that connecting to it is
// the check. The rules are package liveness's.
func (t *Mesh) PeerLost(peer int, reason string) {
	t.perform(t.step(liveness.HostLoad{Load: hostLoad()}, liveness.Verdict{Peer: peer, Reason: reason}))
}

// PeerLeft tells the transport that gossip says peer left the job
// cleanly. Gossip travels apart from the data: a peer's last frames to
// this rank may still be on their way when its goodbye arrives by gossip,
// so a peer connected to this rank is left to say goodbye on its own
// connection, after its data. One not connected may still have a
// connection on its way (it connected, sent and closed before this rank
// accepted): it counts as gone only if none arrives within
// ConfirmTimeout.
func (t *Mesh) PeerLeft(peer int) { t.perform(t.step(liveness.GossipLeft{Peer: peer})) }

// PeerAlive tells the transport that gossip holds peer alive again after
// declaring it dead: a verdict the data plane overruled stops being
// checked again.
func (t *Mesh) PeerAlive(peer int) { t.perform(t.step(liveness.GossipAlive{Peer: peer})) }

// Lost returns the peers this transport itself found lost, and why, even
// those found after it had failed for another reason (another rank's
// abort, say); a peer leaves it when Revive gives it a new process.
func (t *Mesh) Lost() map[int]string {
	t.livMu.Lock()
	defer t.livMu.Unlock()
	return t.live.Lost()
}

// Losses implements Transport: Lost now, and each loss found from now on.
func (t *Mesh) Losses() (lost map[int]string, news <-chan transport.Loss, cancel func()) {
	t.livMu.Lock()
	defer t.livMu.Unlock()
	news, cancel = t.losses.Subscribe()
	return t.live.Lost(), news, cancel
}

// dialKind sorts a failed attempt to connect for the machine.
func dialKind(err error) liveness.DialKind {
	switch {
	case errors.Is(err, wire.ErrDuplicate):
		return liveness.DialDuplicate
	case errors.Is(err, errShmTimeout):
		return liveness.DialShmTimeout
	case errors.Is(err, transport.ErrAuth):
		return liveness.DialAuth
	case errors.Is(err, wire.ErrAnswered):
		return liveness.DialAnswered
	}
	return liveness.DialOther
}
