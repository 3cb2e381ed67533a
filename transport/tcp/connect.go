package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gorun/gorun/internal/backoff"
	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/wire"
)

// Connections on first use.
//
// A rank connects to a peer when it first sends to it or receives from
// it, not at start: a ring needs two neighbours, recursive doubling
// log2(N) partners, so a rank's connections, handshakes and shared memory
// grow with the peers it talks to, not with the job. Each pair connects
// under its own deadline (Config.ConnectTimeout), retrying a failed
// attempt; a pair that cannot connect in that time loses the peer.
//
// Both ranks of a pair may reach for the connection at once. The lower
// rank's dial wins: a rank that is dialing refuses (statusDuplicate) the
// hello of a higher peer, and a higher rank whose dial was refused waits
// for the lower one's. A rank that is accepting a peer's connection does
// not dial it.
//
// After the handshake the dialer either offers shared memory (when the
// placement says the peer is on its host, or does not say) or declares
// the connection ready at once:
//
//	dialer   -> TypeShmOffer  (host key, segment or the reason for none)
//	acceptor -> TypeShmAnswer (attached, same host, reason)
//	dialer   -> TypeReady
//
// or just TypeReady. The dialer starts using the connection when it has
// sent TypeReady, the acceptor when it has read it: no data frame can
// race the switch to shared memory. An offer whose answer does not come
// in time is dropped with its connection and the pair redials on TCP,
// with one warning. Ranks the placement puts on other hosts exchange no
// offer at all.

// Peer is what a rank knows of another before they connect.
type Peer struct {
	Addr string // where its transport listens
	// Host is its transport's HostKey; "" when unknown, and the pair then
	// learns whether it shares a host while connecting.
	Host string
}

// slot is this rank's side of connecting to one peer; under Mesh.mu.
type slot struct {
	dialing   bool // a dialLoop runs
	waiting   bool // its dial was refused: the peer's own dial comes
	accepting int  // the peer's connections being accepted
	noShm     bool // an offer to the peer timed out: TCP only
	changed   chan struct{}
	stop      context.CancelFunc // ends the running dialLoop's attempts (Revive)
}

// slotOf returns peer's slot; under mu.
func (t *Mesh) slotOf(peer int) *slot {
	s := t.slots[peer]
	if s == nil {
		s = &slot{changed: make(chan struct{})}
		t.slots[peer] = s
	}
	return s
}

// notify wakes everyone waiting on s; under mu.
func (s *slot) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetPeers tells the transport where every rank listens and on which
// host (in rank order; this rank's entry is ignored). Connections are
// then made on first use, or by ConnectTo. It may be called once.
func (t *Mesh) SetPeers(peers []Peer) error {
	if len(peers) != t.cfg.Size {
		return fmt.Errorf("transport: %d peers for %d ranks", len(peers), t.cfg.Size)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peerList != nil {
		return errors.New("transport: SetPeers called twice")
	}
	t.peerList = append([]Peer(nil), peers...)
	known, local := true, 1
	for r, p := range peers {
		if r == t.cfg.Rank {
			continue
		}
		switch p.Host {
		case "":
			known = false
		case t.hostKey:
			local++
		}
	}
	if !known {
		local = t.cfg.Size
	}
	t.hostsKnown = known
	t.ringBytes = ringBytesFor(t.cfg.ShmRingBytes, t.cfg.ShmBudget, local)
	close(t.peersSet)
	return nil
}

// ringBytesFor is one direction's ring capacity for a rank with local-1
// peers on its host: explicit if set, else the largest power of two that
// keeps this rank's share of its pairs' segments (half of each: one ring)
// within budget even if it talks to every local peer, at most
// shmem.MaxRingBytes and at least 64 KiB.
func ringBytesFor(explicit, budget, local int) int {
	if explicit > 0 {
		return shmem.RingCapOf(explicit)
	}
	if budget <= 0 {
		budget = shmem.DefaultBudget
	}
	c := shmem.MaxRingBytes
	for c > 64<<10 && c*(local-1) > budget {
		c /= 2
	}
	return c
}

// Revive lets the restarted process of a lost peer take its place, at p
// (where it listens, and its host): an elastic transport's calls on peer
// wait for it again, and the next one connects to it. The old
// connection is closed; its shared memory stays mapped until Close (a
// caller may still hold a frame in it). Frames still queued from the old
// process are released, and its later reports (a broken connection, a
// goodbye) blame no one. A connection the restarted process already made
// (see successors) stays, with its frames. Only the job's sequencer (gorun, through a view
// that names the joiner) may decide that a rank is back: the caller must
// have made sure that no call of its own is waiting on peer.
func (t *Mesh) Revive(peer int, p Peer) error {
	if !t.cfg.Elastic {
		return fmt.Errorf("transport: rank %d: Revive of rank %d needs an Elastic transport", t.cfg.Rank, peer)
	}
	if err := t.w.CheckPeer(peer); err != nil {
		return err
	}
	t.mu.Lock()
	if shmem.IsClosed(t.closing) {
		t.mu.Unlock()
		return t.closedErr()
	}
	if t.peerList == nil {
		t.mu.Unlock()
		return fmt.Errorf("transport: rank %d: Revive before SetPeers", t.cfg.Rank)
	}
	t.peerList[peer] = p
	// The world's state and the machine's change at one instant (livMu):
	// nothing about the old process can be recorded against the new one.
	t.livMu.Lock()
	pc := t.conns[peer].Load()
	keep := pc != nil && t.successors(pc, p)
	var old *peerConn
	if keep {
		// The restarted process connected before this rank heard of it:
		// its connection, and what came on it, stay.
		t.w.Renew(peer)
	} else {
		if s := t.slots[peer]; s != nil && s.stop != nil {
			s.stop() // its attempts go to the old process
		}
		if old = t.conns[peer].Swap(nil); old != nil {
			t.retired = append(t.retired, old)
		}
		t.slotOf(peer).noShm = false
		t.w.Revive(peer)
	}
	acts := t.stepLocked(liveness.Revive{Peer: peer, Keep: keep})
	t.livMu.Unlock()
	if !keep {
		t.slotOf(peer).notify()
	}
	t.mu.Unlock()
	t.perform(acts)
	if old != nil {
		_ = old.c.Close()
	}
	return nil
}

// successors reports whether pc, the connection to a peer that Revive is
// given p for, is already the restarted process's: it is sound (no
// error read or written on it), and it goes to p's
// address (dialed) or comes from p's host (accepted). The old process's
// is broken by its death, or, if its host died with it, comes from
// another host (a rank is restarted on its own host only while that host
// lives).
func (t *Mesh) successors(pc *peerConn, p Peer) bool {
	if pc.broken.Load() {
		return false
	}
	remote, ok := pc.c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	if pc.dialed {
		return remote.String() == p.Addr
	}
	// Accepted: from p's host, and from the process that listens at p's
	// port (its hello said so). The host alone would take the old
	// process's connection on the same host for the new one's while no
	// error has shown on it yet: the next write to it fails, and the new
	// process is suspected for the old one's death.
	host, port, err := net.SplitHostPort(p.Addr)
	return err == nil && remote.IP.Equal(net.ParseIP(host)) && port == strconv.Itoa(int(pc.port))
}

// port is the port this rank listens on for its peers.
func (t *Mesh) port() uint16 {
	if a, ok := t.ln.Addr().(*net.TCPAddr); ok {
		return uint16(a.Port)
	}
	return 0
}

// ConnectTo connects to the given peers now, in parallel, each under its
// own deadline. The error names the peers that could not be reached.
func (t *Mesh) ConnectTo(ctx context.Context, peers []int) error {
	errs := make([]error, len(peers))
	done := make(chan int, len(peers))
	for i, p := range peers {
		go func() {
			_, errs[i] = t.conn(ctx, p)
			done <- i
		}()
	}
	for range peers {
		<-done
	}
	return errors.Join(errs...)
}

// Connect is SetPeers with addresses alone (hosts learned while
// connecting) followed by ConnectTo every other rank: the full mesh.
func (t *Mesh) Connect(ctx context.Context, addrs []string) error {
	peers := make([]Peer, len(addrs))
	for i, a := range addrs {
		peers[i].Addr = a
	}
	if err := t.SetPeers(peers); err != nil {
		return err
	}
	all := make([]int, 0, t.cfg.Size-1)
	for p := range t.cfg.Size {
		if p != t.cfg.Rank {
			all = append(all, p)
		}
	}
	return t.ConnectTo(ctx, all)
}

// conn returns the connection to peer, making it if there is none.
func (t *Mesh) conn(ctx context.Context, peer int) (*peerConn, error) {
	if err := t.w.CheckPeer(peer); err != nil {
		return nil, err
	}
	for {
		if pc := t.conns[peer].Load(); pc != nil {
			return pc, nil
		}
		select {
		case <-t.peersSet:
		case <-t.w.Failed():
			return nil, t.w.Err()
		case <-ctx.Done():
			return nil, canceled.Cause(ctx)
		}
		t.mu.Lock()
		if pc := t.conns[peer].Load(); pc != nil {
			t.mu.Unlock()
			return pc, nil
		}
		if err := t.w.Err(); err != nil {
			t.mu.Unlock()
			return nil, err
		}
		if t.gone(peer) {
			t.mu.Unlock()
			return nil, t.w.GoneErr(peer)
		}
		s := t.slotOf(peer)
		if !s.dialing && s.accepting == 0 {
			select {
			case <-t.closing:
				t.mu.Unlock()
				return nil, t.closedErr()
			default:
			}
			s.dialing = true
			t.wg.Add(1) // under mu: Close waits after closing, also under mu
			go t.dialLoop(peer)
		}
		changed := s.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-t.w.Peer(peer).Left:
		case <-t.w.Failed():
			return nil, t.w.Err()
		case <-ctx.Done():
			return nil, canceled.Cause(ctx)
		}
	}
}

// dialLoop connects to peer, retrying (paced by RetryPause and
// MaxRetryPause), until it has a connection, the peer is gone (it left, or
// the liveness machine lost it: past ConnectTimeout, say) or the
// transport failed. Each attempt is the machine's news: the first starts
// the ConnectTimeout clock, and a failure of a peer gossip doubts counts
// against it.
//
// A Revive meanwhile ends it quietly: its attempts went to the old
// process, and the callers waiting on the slot start a new one.
func (t *Mesh) dialLoop(peer int) {
	defer t.wg.Done()
	ctx, cancel := context.WithCancel(t.closeCtx)
	defer cancel()
	t.mu.Lock()
	gen := t.gen(peer) // under mu: Revive, which stops the loop, takes it too
	t.slotOf(peer).stop = cancel
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		s := t.slotOf(peer)
		s.dialing, s.waiting, s.stop = false, false, nil
		s.notify()
		t.mu.Unlock()
	}()
	t.perform(t.step(liveness.DialStarted{Peer: peer, Gen: gen}))
	// How long this process waited for a CPU since the last failure
	// (the attempt, and the pause before it): the time the machine
	// counts against the peer.
	var stall cpu.StallMeter
	stall.Longest()
	for attempt := 0; ; attempt++ {
		err := t.dialOnce(ctx, peer, gen)
		if ctx.Err() != nil || errors.Is(err, errReplaced) {
			return
		}
		if err == nil || t.conns[peer].Load() != nil {
			return
		}
		kind := dialKind(err)
		if kind == liveness.DialOther || kind == liveness.DialAuth || kind == liveness.DialAnswered {
			t.perform(t.step(liveness.HostLoad{Load: hostLoad()}, liveness.DialFailed{Peer: peer, Gen: gen, Err: err, Kind: kind, Stall: stall.Longest()}))
		} else {
			t.perform(t.step(liveness.DialFailed{Peer: peer, Gen: gen, Err: err, Kind: kind}))
		}
		if t.w.Err() != nil || t.gone(peer) {
			return // failed, or nothing to connect to
		}
		switch kind {
		case liveness.DialDuplicate:
			if t.awaitPeer(ctx, peer) {
				return
			}
			continue
		case liveness.DialShmTimeout:
			t.mu.Lock()
			t.slotOf(peer).noShm = true
			t.mu.Unlock()
			t.log.Warn("a shared memory offer timed out; TCP to this peer", "rank", t.cfg.Rank, "peer", peer, "err", err)
			continue
		}
		pause := time.NewTimer(backoff.Pause(attempt, t.cfg.RetryPause, t.cfg.MaxRetryPause))
		select {
		case <-ctx.Done():
		case <-t.w.Failed():
		case <-t.w.Peer(peer).Left:
		case <-pause.C:
		}
		pause.Stop()
		if ctx.Err() != nil || t.w.Err() != nil || t.gone(peer) {
			return
		}
	}
}

// awaitPeer waits for the connection of a peer that refused this rank's
// dial because it is dialing too and wins; false if it did not come in
// twice the handshake timeout.
func (t *Mesh) awaitPeer(ctx context.Context, peer int) bool {
	timer := time.NewTimer(2*t.cfg.HandshakeTimeout + t.cfg.DialTimeout)
	defer timer.Stop()
	t.mu.Lock()
	t.slotOf(peer).waiting = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.slotOf(peer).waiting = false
		t.mu.Unlock()
	}()
	for {
		t.mu.Lock()
		changed := t.slotOf(peer).changed
		t.mu.Unlock()
		if t.conns[peer].Load() != nil {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		case <-t.w.Failed():
			return true // nothing more to connect for
		case <-t.w.Peer(peer).Left:
			return true // it left, or was lost
		}
	}
}

// dialOnce makes one attempt (for the peer's generation gen): dial,
// handshake, shared memory, register.
func (t *Mesh) dialOnce(ctx context.Context, peer int, gen uint32) error {
	t.mu.Lock()
	p := t.peerList[peer]
	noShm := t.slotOf(peer).noShm
	t.mu.Unlock()
	c, err := t.dialHello(ctx, p.Addr, peer, t.cfg.HandshakeTimeout, false)
	if err != nil {
		return err
	}
	var sp *shmem.Peer
	sameHost := p.Host != "" && p.Host == t.hostKey
	if p.Host == "" || sameHost {
		off := ""
		switch {
		case !t.cfg.Shm:
			off = fmt.Sprintf("shared memory is off on rank %d", t.cfg.Rank)
		case noShm:
			off = "an earlier offer timed out"
		}
		t.offers.Add(1)
		var a shmem.Answer
		sp, a, err = shmem.MakeOffer(ctx, c, t.shmCfg(off), fmt.Sprintf("%d-%d", t.cfg.Rank, peer))
		if err != nil {
			c.Close()
			return fmt.Errorf("%w: %w", errShmTimeout, err)
		}
		sameHost = a.SameHost
	}
	if _, err := shmem.WriteCtl(ctx, c, t.cfg.HandshakeTimeout, transport.Header{Type: transport.TypeReady}, nil); err != nil {
		sp.Drop()
		c.Close()
		return err
	}
	if err := t.register(peer, c, sp, sameHost, true, 0, gen); err != nil {
		sp.Drop()
		c.Close()
		return err
	}
	return nil
}

var errShmTimeout = errors.New("shared memory offer")

// admit decides on a peer's hello, before the secret is checked: a
// duplicate, or the losing side of two dials at once, is refused.
func (t *Mesh) admit(peer int) byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.taken(peer) {
		return wire.StatusDuplicate
	}
	s := t.slotOf(peer)
	if s.dialing && !s.waiting && t.cfg.Rank < peer {
		return wire.StatusDuplicate // this rank's dial wins
	}
	s.accepting++
	return wire.StatusOK
}

// unadmit ends an admitted accept (registered or not).
func (t *Mesh) unadmit(peer int) {
	t.mu.Lock()
	s := t.slotOf(peer)
	s.accepting--
	s.notify()
	t.mu.Unlock()
}

// acceptSetup is the acceptor's side after the handshake: an offer to
// answer, then TypeReady, or TypeReady alone.
func (t *Mesh) acceptSetup(c net.Conn, peer int, port uint16) error {
	timeout := 2*t.cfg.HandshakeTimeout + t.cfg.DialTimeout
	h, p, err := shmem.ReadCtl(t.closeCtx, c, timeout)
	if err != nil {
		return err
	}
	var sp *shmem.Peer
	sameHost := false
	if h.Type == transport.TypeShmOffer {
		off := ""
		if !t.cfg.Shm {
			off = fmt.Sprintf("shared memory is off on rank %d", t.cfg.Rank)
		}
		if t.cfg.shmAnswerDelay > 0 && hasSegment(p) {
			time.Sleep(t.cfg.shmAnswerDelay)
		}
		if sp, sameHost, err = shmem.AnswerOffer(t.closeCtx, c, p, t.shmCfg(off), fmt.Sprintf("%d-%d", peer, t.cfg.Rank)); err != nil {
			return err
		}
		if h, _, err = shmem.ReadCtl(t.closeCtx, c, timeout); err != nil {
			sp.Drop()
			return err
		}
	}
	if h.Type != transport.TypeReady {
		sp.Drop()
		return &wire.FrameError{Msg: fmt.Sprintf("frame type %d where the connection's setup was due", h.Type)}
	}
	if err := t.register(peer, c, sp, sameHost, false, port, 0); err != nil {
		sp.Drop()
		return err
	}
	return nil
}

// hasSegment reports whether an offer's payload offers a segment (tests).
func hasSegment(p []byte) bool {
	o, err := shmem.DecodeOffer(p)
	return err == nil && o.Path != ""
}

// probe checks that peer is alive, which gossip doubts, by connecting to
// it: any answer to a hello (also a refusal) is life. A knock (the peer
// is connected) asks more: that the peer refuses the connection as a
// duplicate, which it does while its process runs and holds this rank's
// connection; an acceptance says it holds none, and a refusal for any
// other reason is another process's.
func (t *Mesh) probe(ctx context.Context, peer int, knock bool) bool {
	t.mu.Lock()
	var addr string
	if t.peerList != nil {
		addr = t.peerList[peer].Addr
	}
	t.mu.Unlock()
	if addr == "" {
		return false
	}
	c, err := t.dialHello(ctx, addr, peer, t.cfg.HandshakeTimeout, true)
	if knock {
		if c != nil {
			c.Close()
		}
		return errors.Is(err, wire.ErrDuplicate)
	}
	if err != nil {
		return errors.Is(err, transport.ErrAuth) || errors.Is(err, wire.ErrAnswered)
	}
	c.Close()
	return true
}

// dialHello dials peer at addr and runs the handshake, within
// handshakeTimeout; the connection is closed if the handshake fails. With
// within set (a probe), the handshake ends by ctx's deadline instead,
// counted from after the dial, and when ctx ends (Close): a handshake
// with a stopped process waits for its deadline alone.
func (t *Mesh) dialHello(ctx context.Context, addr string, peer int, handshakeTimeout time.Duration, within bool) (net.Conn, error) {
	d := net.Dialer{Timeout: t.cfg.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := func() bool { return true }
	if within {
		if dl, ok := ctx.Deadline(); ok {
			handshakeTimeout = max(time.Until(dl), time.Millisecond)
		}
		stop = context.AfterFunc(ctx, func() { c.Close() })
	}
	err = wire.DialHandshake(c, t.cfg.JobID, t.cfg.Secret, wire.Ends{From: t.cfg.Rank, To: peer, Size: t.cfg.Size, Port: t.port()}, handshakeTimeout)
	if !stop() && (err == nil || errors.Is(err, net.ErrClosed)) {
		err = context.Cause(ctx) // closed when ctx ended
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// offerCount is how many shared memory offers this rank has made (to peers
// on its host, or whose host it did not know).
func (t *Mesh) offerCount() int { return int(t.offers.Load()) }

// connectedPeers lists the peers this rank holds a connection to.
func (t *Mesh) connectedPeers() []int { return t.peersWhere(func(*peerConn) bool { return true }) }
