package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// TCP is a Transport over one TCP connection per pair of ranks that
// talk, made on first use (see connect.go); through shared memory for
// pairs on one host.
type TCP struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	w   *world

	// forwards counts aborts being passed on in the background
	// (forwardAbort), which WaitNotices waits for.
	forwards atomic.Int32

	mu         sync.Mutex
	conns      []atomic.Pointer[peerConn] // set once, under mu (again after a Revive)
	revived    []atomic.Uint32            // per peer: how many times Revive gave it a new process
	slots      map[int]*slot              // connecting; under mu
	peerList   []Peer                     // from SetPeers; under mu
	hostsKnown bool                       // every peer's Host was given
	ringBytes  int                        // rings' capacity, from SetPeers
	peersSet   chan struct{}              // closed by SetPeers
	offers     atomic.Int64               // shared memory offers made

	wg        sync.WaitGroup
	readers   sync.WaitGroup
	closing   chan struct{}
	closeCtx  context.Context // cancelled when Close starts tearing down
	cancel    context.CancelFunc
	closeOnce sync.Once
	// lingering is set once Close waits for its readers: a connection
	// that ends now is expected, not a lost peer.
	lingering atomic.Bool

	lostMu sync.Mutex
	lost   map[int]string // peers found lost here (see Lost)
	gone   map[int]string // unconnected peers gossip declared dead (under mu)
	// retired are connections Revive replaced: their shared memory stays
	// mapped until Close, as a caller may still hold a frame in it (under mu).
	retired []*peerConn

	shmWarn sync.Once
	hostKey string // see hostKey
}

var _ Transport = (*TCP)(nil)

type peerConn struct {
	peer int
	c    net.Conn
	wmu  sync.Mutex
	hdr  [HeaderSize]byte
	spin spinState
	pong chan struct{} // signalled when the peer answers a ping

	shm      atomic.Pointer[shmPeer] // set before the connection is published, if the pair shares memory
	sameHost bool                    // the peer's host key is this rank's
	dialed   bool                    // this rank dialed it (its remote address is where the peer listens)
	port     uint16                  // accepted: the port the peer listens on (its hello's)
	broken   atomic.Bool             // an error was read or written on it
	// reads counts the frames read from it, and stuck is set while its
	// reader waits for room in the peer's inbox (this rank's own
	// collectives are behind): a peer gossip declared dead that goes on
	// sending is alive, even if its answer to a ping waits behind its
	// data (see PeerLost).
	reads atomic.Uint64
	stuck atomic.Bool
	// readDone is closed when its reader returns (nil for a connection
	// that never had one).
	readDone chan struct{}
	// outwaited is set when Close's linger ran out on it: the peer had
	// neither read the goodbye nor closed.
	outwaited atomic.Bool
}

// Listen starts listening; the transport is usable after Connect.
func Listen(cfg Config) (*TCP, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = ":0"
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	return listenOn(cfg, ln), nil
}

// listenOn starts a transport that accepts on ln; cfg is valid.
func listenOn(cfg Config, ln net.Listener) *TCP {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &TCP{
		cfg: cfg, log: log, ln: ln, w: newWorld(cfg.Rank, cfg.Size),
		conns:    make([]atomic.Pointer[peerConn], cfg.Size),
		revived:  make([]atomic.Uint32, cfg.Size),
		slots:    map[int]*slot{},
		peersSet: make(chan struct{}),
		closing:  make(chan struct{}),
	}
	t.hostKey = hostKey(cfg)
	t.closeCtx, t.cancel = context.WithCancel(context.Background())
	t.w.onFail = func() { t.unblock(); t.shmWakeAll() }
	t.wg.Add(1)
	go t.acceptLoop()
	return t
}

// HostKey is what ranks compare to find peers on their host (Config's
// HostKey or the hostname, and the kernel's boot id): publish it with
// Addr, and give it back as Peer.Host.
func (t *TCP) HostKey() string { return t.hostKey }

// Addr is the address the transport listens on.
func (t *TCP) Addr() net.Addr { return t.ln.Addr() }

// Rank implements Transport.
func (t *TCP) Rank() int { return t.cfg.Rank }

// Size implements Transport.
func (t *TCP) Size() int { return t.cfg.Size }

// Err implements Transport.
func (t *TCP) Err() error { return t.w.Err() }

// Failed implements Transport.
func (t *TCP) Failed() <-chan struct{} { return t.w.Failed() }

func (t *TCP) acceptLoop() {
	AcceptLoop(t.ln, t.closing, t.cfg.AcceptPause, &t.wg, func(err error) { t.log.Warn("accept failed; retrying", "err", err) }, t.accept)
}

func (t *TCP) accept(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	stop := context.AfterFunc(t.closeCtx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	admitted := -1
	h, err := handshakeAccept(c, t.cfg.Secret, func(h *hello) byte {
		switch {
		case h.Version != ProtocolVersion:
			return statusVersion
		case h.JobID != t.cfg.JobID:
			return statusJob
		case int(h.To) != t.cfg.Rank || int(h.Size) != t.cfg.Size || int(h.From) >= t.cfg.Size || int(h.From) == t.cfg.Rank:
			return statusRanks
		}
		st := t.admit(int(h.From))
		if st == statusOK {
			admitted = int(h.From)
		}
		return st
	})
	if admitted >= 0 {
		defer t.unadmit(admitted)
	}
	if err != nil {
		if !errors.Is(err, errDuplicate) {
			t.log.Warn("dropped a connection that failed the handshake", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if err := t.acceptSetup(c, admitted, h.Port); err != nil {
		t.log.Debug("dropped a connection before it was set up", "rank", admitted, "err", err)
		c.Close()
	}
}

// taken reports, under mu, whether peer can get no new connection: it
// has one, or the transport is closing.
func (t *TCP) taken(peer int) bool {
	select {
	case <-t.closing:
		return true
	default:
	}
	return t.conns[peer].Load() != nil
}

// register publishes a set-up connection to peer (with its shared memory,
// if any) and starts its reader; false if peer already has one.
func (t *TCP) register(peer int, c net.Conn, sp *shmPeer, sameHost, dialed bool, port uint16) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.taken(peer) {
		return false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	pc := &peerConn{peer: peer, c: c, pong: make(chan struct{}, 1), sameHost: sameHost, dialed: dialed, port: port, readDone: make(chan struct{})}
	if sp != nil {
		t.attach(pc, sp)
	}
	t.w.peer(peer) // its inbox, before the reader delivers
	t.conns[peer].Store(pc)
	t.wg.Add(1)
	t.readers.Add(1)
	go t.readLoop(pc)
	t.slotOf(peer).notify()
	return true
}

func (t *TCP) readLoop(pc *peerConn) {
	defer t.wg.Done()
	defer t.readers.Done()
	defer close(pc.readDone)
	alive := func() bool { return t.w.Err() == nil }
	fr := NewReader(bufio.NewReaderSize(newSpinReader(pc.c, &pc.spin, t.cfg.SpinTime, t.cfg.SpinYield, alive), readBufferSize), t.cfg.MaxPayload)
	bye := false
	for {
		h, p, err := fr.Next(getBuf)
		if err == nil {
			pc.reads.Add(1)
		}
		if err != nil {
			pc.broken.Store(true)
			if t.lingering.Load() {
				// Close is waiting for this: the end is expected, or its
				// wait ran out.
				pc.outwaited.Store(errors.Is(err, os.ErrDeadlineExceeded))
				return
			}
			select {
			case <-t.closing:
				return
			default:
			}
			if bye && t.conns[pc.peer].Load() == pc {
				t.w.markLeft(pc.peer)
				return
			}
			reason := "connection lost: " + err.Error()
			if errors.Is(err, ErrFrame) {
				reason = "sent a malformed frame: " + err.Error()
			}
			t.suspect(pc, reason)
			return
		}
		switch h.Type {
		case TypeData:
			// After a failure the frame is dropped, but reading goes on so
			// that the peer's last words (an abort) are still seen.
			f := Frame{Header: h, Payload: p, release: putBuf}
			if !t.w.tryDeliver(pc.peer, f) {
				pc.stuck.Store(true)
				t.w.deliver(pc.peer, f, t.closing)
				pc.stuck.Store(false)
			}
			if pc.spin.hot.Load() > 0 {
				// Let the waiting receiver run now, on this thread.
				runtime.Gosched()
			}
		case TypeAbort:
			origin := pc.peer
			if h.Step > 0 && int(h.Step) <= t.cfg.Size {
				origin = int(h.Step) - 1 // forwarded: the rank it came from first
			}
			if t.w.fail(parseAbort(origin, p)) {
				// Peers this rank talks to may not talk to the origin:
				// pass the abort on, once, so that it floods the job.
				t.forwardAbort(pc.peer, origin, p)
			} else {
				putBuf(p)
			}
		case TypeBye:
			bye = true
			if t.conns[pc.peer].Load() == pc {
				t.w.markLeft(pc.peer)
			}
			putBuf(p)
			// The peer is closing and waits (LingerTimeout) until this
			// side has read all it sent, the goodbye last: say so by
			// half-closing. Nothing written to it now would be read.
			if tc, ok := pc.c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		case TypePing:
			t.wg.Add(1) // safe: this reader holds a count until it returns
			go func() {
				defer t.wg.Done()
				// No deadline: a write cut short by one leaves half a
				// frame in the stream, and every later frame unreadable
				// (a peer too busy to read for a while is not lost: it
				// finds the pong behind the data). The transport's
				// closing ends a write to a peer that never reads.
				_ = t.write(t.closeCtx, pc, Header{Type: TypePong}, nil)
			}()
		case TypePong:
			select {
			case pc.pong <- struct{}{}:
			default:
			}
		default: // setup frames after the setup: ignored
			putBuf(p)
		}
	}
}

// readBufferSize is a reader's buffer. It lets one read take in many small
// frames; a large payload is read straight into its own buffer, except for
// the part the buffer took in with the header, so a small buffer copies
// less.
const readBufferSize = 64 << 10

// Send implements Transport.
func (t *TCP) Send(ctx context.Context, to int, h Header, payload []byte) error {
	if err := t.w.checkPeer(to); err != nil {
		return err
	}
	if err := t.w.Err(); err != nil {
		return err
	}
	if len(payload) > t.cfg.MaxPayload {
		return fmt.Errorf("transport: payload of %d bytes exceeds the %d byte cap", len(payload), t.cfg.MaxPayload)
	}
	if t.cfg.Elastic && t.w.hasLeft(to) {
		return t.w.goneErr(to)
	}
	pc := t.conns[to].Load()
	if pc == nil {
		var err error
		if pc, err = t.conn(ctx, to); err != nil {
			return err
		}
	}
	if sp := pc.shm.Load(); sp != nil {
		return t.shmSend(ctx, sp, h, payload)
	}
	h.Type = TypeData
	shmRaceRelease() // see race_on.go: a reply may come back through shared memory
	err := t.write(ctx, pc, h, payload)
	if err == nil {
		return nil
	}
	if werr := t.w.Err(); werr != nil {
		return werr
	}
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	pc.broken.Store(true)
	if t.conns[to].Load() != pc {
		// Revive replaced the connection under this call: the peer's
		// restarted process is reached anew.
		return t.Send(ctx, to, h, payload)
	}
	t.suspect(pc, "send failed: "+err.Error())
	if werr := t.w.Err(); werr != nil {
		return werr
	}
	return &PeerLostError{Rank: to, Reason: "send failed: " + err.Error()}
}

func (t *TCP) write(ctx context.Context, pc *peerConn, h Header, payload []byte) error {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	_ = pc.c.SetWriteDeadline(time.Time{})
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { _ = pc.c.SetWriteDeadline(time.Now()) })
		defer stop()
	}
	h.Len = uint32(len(payload))
	PutHeader(pc.hdr[:], h)
	bufs := net.Buffers{pc.hdr[:], payload}
	_, err := bufs.WriteTo(pc.c)
	return err
}

// SetWaitMeter makes every later Recv add the time it is blocked for a
// peer's data (over a socket or shared memory) to m (nil: stop).
func (t *TCP) SetWaitMeter(m *WaitMeter) { t.w.SetWaitMeter(m) }

// Recv implements Transport.
func (t *TCP) Recv(ctx context.Context, from int) (Frame, error) {
	var pc *peerConn
	if from >= 0 && from < t.cfg.Size {
		pc = t.conns[from].Load()
	}
	if pc == nil {
		var err error
		if pc, err = t.conn(ctx, from); err != nil {
			return Frame{}, err
		}
	}
	if sp := pc.shm.Load(); sp != nil {
		if err := t.w.Err(); err != nil {
			return Frame{}, err
		}
		return t.shmRecv(ctx, sp)
	}
	if t.cfg.SpinTime > 0 {
		select {
		case f := <-t.w.peer(from).inbox:
			shmRaceAcquire()
			return f, nil
		default:
		}
		defer pc.spin.warm(pc.c)()
	}
	f, err := t.w.recv(ctx, from)
	shmRaceAcquire() // see race_on.go: what was sent through shared memory came first
	return f, err
}

// Abort implements Transport: it sends err to every peer (best effort,
// bounded by AbortTimeout) and then fails this transport with err.
func (t *TCP) Abort(err error) {
	if t.w.Err() != nil {
		return
	}
	t.broadcastAbort(err, -1, t.cfg.AbortTimeout)
	t.w.fail(err)
}

// broadcastAbort sends an abort frame with err to every peer but skip, in
// parallel, each bounded by timeout.
func (t *TCP) broadcastAbort(err error, skip int, timeout time.Duration) {
	t.sendAbort(abortPayload(err), skip, -1, timeout)
}

// forwardAbort passes on an abort (payload p, a pooled buffer) that came
// from origin through peer from, in the background, within
// NoticeTimeout.
func (t *TCP) forwardAbort(from, origin int, p []byte) {
	t.wg.Add(1) // safe: called by a reader, which holds a count
	t.forwards.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.forwards.Add(-1)
		t.sendAbort(p, from, origin, t.cfg.NoticeTimeout)
		putBuf(p)
	}()
}

// WaitNotices waits (NoticeTimeout at most, as each send is bounded) for
// the aborts this rank is passing on to its peers, so that a program that
// exits on the error it got does not leave its peers blaming it instead
// of the rank that failed first.
func (t *TCP) WaitNotices() {
	deadline := time.Now().Add(t.cfg.NoticeTimeout)
	for t.forwards.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// sendAbort sends an abort frame with payload to every connected peer
// but skip; origin (-1: this rank) is the rank that aborted first.
func (t *TCP) sendAbort(payload []byte, skip, origin int, timeout time.Duration) {
	h := Header{Type: TypeAbort}
	if origin >= 0 {
		h.Step = uint32(origin) + 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, pc := range t.peers() {
		if pc.peer == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = t.write(ctx, pc, h, payload)
		}()
	}
	wg.Wait()
}

// lose fails the job because peer is gone. The other peers are told first,
// with the original cause, so that each of them blames the lost rank even
// if this rank exits before they notice the loss themselves.
func (t *TCP) lose(peer int, reason string) { t.loseWith(peer, reason, nil) }

// loseWith is lose with the error that made peer lost.
func (t *TCP) loseWith(peer int, reason string, cause error) {
	if peer >= 0 && peer < t.cfg.Size && t.w.hasLeft(peer) {
		return // it already said goodbye on the data plane
	}
	t.lostMu.Lock()
	if t.lost == nil {
		t.lost = map[int]string{}
	}
	if _, seen := t.lost[peer]; !seen {
		t.lost[peer] = reason
	}
	t.lostMu.Unlock()
	if t.w.Err() != nil {
		return
	}
	err := &PeerLostError{Rank: peer, Reason: reason, Cause: cause}
	if t.cfg.Elastic && peer >= 0 && peer < t.cfg.Size && peer != t.cfg.Rank {
		if t.w.losePeer(peer, err) && t.cfg.OnPeerLost != nil {
			t.cfg.OnPeerLost(peer, reason)
		}
		return
	}
	t.broadcastAbort(err, peer, t.cfg.NoticeTimeout)
	t.w.fail(err)
}

// Lost returns the peers this transport itself found lost, and why, even
// those found after it had failed for another reason (another rank's
// abort, say). Elastic services use it to learn exactly who is gone.
func (t *TCP) Lost() map[int]string {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	return maps.Clone(t.lost)
}

func (t *TCP) peers() []*peerConn {
	var out []*peerConn
	for i := range t.conns {
		if pc := t.conns[i].Load(); pc != nil {
			out = append(out, pc)
		}
	}
	return out
}

// suspect handles a broken connection to a peer. A peer that exits because
// the job already failed tells everyone why before it goes; that reason is
// preferred to blaming the peer itself, if it comes within ExplainWait. A
// connection that Revive replaced meanwhile blames no one: its process is
// gone, and the peer's number belongs to its successor.
func (t *TCP) suspect(pc *peerConn, reason string) {
	if t.cfg.ExplainWait > 0 {
		timer := time.NewTimer(t.cfg.ExplainWait)
		defer timer.Stop()
		select {
		case <-t.w.failed:
			return
		case <-t.closing:
			return
		case <-timer.C:
		}
	}
	if t.conns[pc.peer].Load() != pc {
		return
	}
	t.lose(pc.peer, reason)
}

// PeerLost fails the transport because peer is gone (for example, gossip
// declared it dead).
//
// Gossip can be wrong about a rank whose process is starved of CPU, so its
// verdict is checked first: the rank is pinged on its data connection, and
// only if it does not answer within ConfirmTimeout (stretched on an
// overloaded host: see confirmWindow) is it lost. A stopped or cut-off
// process cannot answer.
func (t *TCP) PeerLost(peer int, reason string) {
	if peer < 0 || peer >= t.cfg.Size || peer == t.cfg.Rank {
		return
	}
	t.mu.Lock()
	pc := t.conns[peer].Load()
	select {
	case <-t.closing:
		t.mu.Unlock()
		return
	default:
	}
	if pc == nil && !t.cfg.WatchAll {
		// Not a peer this rank talks to: remember, so that a later dial
		// to it fails at once.
		if t.gone == nil {
			t.gone = map[int]string{}
		}
		t.gone[peer] = reason
		t.slotOf(peer).notify()
		t.mu.Unlock()
		t.log.Debug("gossip declared an unconnected rank dead", "rank", peer, "reason", reason)
		return
	}
	if t.cfg.ConfirmTimeout <= 0 {
		t.mu.Unlock()
		t.lose(peer, reason)
		return
	}
	gen := t.revived[peer].Load() // a verdict on this process, not on a successor
	t.wg.Add(1)                   // under mu, so never after Close has started waiting
	t.mu.Unlock()
	window := t.confirmWindow()
	if pc == nil {
		// Not a peer this rank talks to: ask it for a handshake.
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(t.closeCtx, window)
			defer cancel()
			if t.probe(ctx, peer) {
				t.log.Warn("gossip declared a rank dead, but it answered a connection; keeping it", "rank", peer)
				return
			}
			select {
			case <-t.closing:
				return
			default:
			}
			if t.revived[peer].Load() != gen {
				return
			}
			t.lose(peer, reason+", and it did not answer a connection for "+window.Round(time.Millisecond).String())
		}()
		return
	}
	go func() {
		defer t.wg.Done()
		select {
		case <-pc.pong: // drop a stale answer
		default:
		}
		for said := false; ; said = true {
			got := t.confirm(pc, window)
			switch got {
			case confirmAnswered:
				t.log.Warn("gossip declared a rank dead, but it answered on the data plane; keeping it", "rank", peer)
				return
			case confirmClosing:
				return
			case confirmSending:
				// Its answer may wait behind the data it sent: in this
				// rank's socket, while this rank's inbox from it is full
				// (its own collectives are behind), or in its own, behind
				// what it sends now. Asked again until it answers, or
				// sends nothing for a window: a stopped or cut-off
				// process sends nothing.
				if !said {
					t.log.Warn("gossip declared a rank dead, but it is still sending on the data plane; asking it again", "rank", peer)
				}
				if t.revived[peer].Load() != gen {
					return
				}
				continue
			}
			if t.revived[peer].Load() != gen {
				return // the process gossip gave up on was replaced meanwhile
			}
			if got == confirmBroken {
				// A peer that said goodbye and exited breaks the ping
				// too: its last frames, the goodbye last, may still wait
				// to be read here (this rank behind, on a busy host).
				// The reader reaches them as long as it makes progress
				// or waits for this rank to take frames from a full
				// inbox; a goodbye among them makes it a peer that left
				// (lose no-ops). A reader that stands still for a window
				// with room in the inbox has nothing more to read.
				t.awaitReader(pc, window)
				if isClosed(t.closing) {
					return
				}
				t.lose(peer, reason+", and its data connection is broken")
				return
			}
			t.lose(peer, reason+", and no answer on its data connection for "+window.Round(time.Millisecond).String())
			return
		}
	}()
}

// awaitReader waits until pc's reader has returned, while it makes
// progress or is stuck on a full inbox, at most a window of neither, or
// until the transport closes.
func (t *TCP) awaitReader(pc *peerConn, window time.Duration) {
	if pc.readDone == nil {
		return
	}
	for {
		reads := pc.reads.Load()
		timer := time.NewTimer(window)
		select {
		case <-pc.readDone:
			timer.Stop()
			return
		case <-t.closing:
			timer.Stop()
			return
		case <-timer.C:
		}
		if !pc.stuck.Load() && pc.reads.Load() == reads {
			return
		}
	}
}

// What a confirmation of gossip's verdict on a connected peer found.
const (
	confirmSilent   = iota // no answer, and nothing read from it
	confirmAnswered        // it answered the ping
	confirmSending         // no answer yet, but frames came from it (or wait to be read)
	confirmClosing         // the transport is closing
	confirmBroken          // the ping could not be written: the connection is broken
)

// confirm pings pc's peer and waits up to window for its answer.
func (t *TCP) confirm(pc *peerConn, window time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	reads := pc.reads.Load()
	if err := t.write(ctx, pc, Header{Type: TypePing}, nil); err == nil {
		select {
		case <-pc.pong:
			return confirmAnswered
		case <-ctx.Done():
		case <-t.closing:
			return confirmClosing
		}
	} else if ctx.Err() == nil {
		return confirmBroken
	}
	select {
	case <-t.closing:
		return confirmClosing
	default:
	}
	if pc.reads.Load() != reads || pc.stuck.Load() {
		return confirmSending
	}
	return confirmSilent
}

// PeerLeft records that gossip says peer left the job cleanly. Gossip
// travels apart from the data: a peer's last frames to this rank may still
// be on their way when its goodbye arrives by gossip, so a peer connected
// to this rank is left to say goodbye on its own connection, after its
// data. One not connected may still have a connection on its way (it
// connected, sent and closed before this rank accepted): it counts as gone
// only if none arrives within ConfirmTimeout.
func (t *TCP) PeerLeft(peer int) {
	if peer < 0 || peer >= t.cfg.Size || peer == t.cfg.Rank || t.conns[peer].Load() != nil {
		return
	}
	t.mu.Lock() // Close closes closing under mu, before it waits for wg
	defer t.mu.Unlock()
	if isClosed(t.closing) {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		timer := time.NewTimer(t.cfg.ConfirmTimeout)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-t.closing:
			return
		}
		if t.conns[peer].Load() == nil {
			t.w.markLeft(peer)
		}
	}()
}

// unblock wakes every blocked write once the world has failed. Blocked
// Recv calls wake on the failure itself; the readers keep draining.
func (t *TCP) unblock() {
	for _, pc := range t.peers() {
		_ = pc.c.SetWriteDeadline(time.Now())
	}
}

// Close says goodbye to every peer, closes every connection and waits for
// the transport's goroutines. If the transport had failed, the goodbye is
// the failure's cause, so that peers learn why this rank is going. It is
// idempotent.
func (t *TCP) Close() error {
	t.closeOnce.Do(func() {
		failed := t.w.Err()
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ByeTimeout)
		var wg sync.WaitGroup
		for _, pc := range t.peers() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if failed != nil {
					_ = t.write(ctx, pc, Header{Type: TypeAbort}, abortPayload(failed))
				} else {
					_ = t.write(ctx, pc, Header{Type: TypeBye}, nil)
				}
				if tc, ok := pc.c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}()
		}
		wg.Wait()
		cancel()
		t.w.fail(fmt.Errorf("transport: rank %d: %w", t.cfg.Rank, ErrClosed))
		// Let the readers take in what peers still send until each peer
		// has read the goodbye and half-closed its side (a healthy
		// transport, within LingerTimeout), or briefly after a failure
		// (DrainTimeout), so that closing does not reset connections
		// whose last frames, either way, are still on the way: a reset
		// drops what the peer has not yet read.
		wait := t.cfg.DrainTimeout
		if failed == nil {
			wait = t.cfg.LingerTimeout
		}
		if wait > 0 {
			t.lingering.Store(true)
			t.waitReaders(wait)
		}
		t.mu.Lock()
		close(t.closing)
		t.cancel()
		conns := t.peers()
		retired := t.retired
		t.mu.Unlock()
		for _, pc := range retired {
			pc.c.Close()
		}
		t.ln.Close()
		for _, pc := range conns {
			if pc != nil {
				pc.c.Close()
			}
		}
		t.wg.Wait()
		t.w.drain()
		t.closeShm()
	})
	return nil
}

func (t *TCP) waitReaders(d time.Duration) {
	deadline := time.Now().Add(d)
	pcs := t.peers()
	for _, pc := range pcs {
		_ = pc.c.SetReadDeadline(deadline)
	}
	t.readers.Wait()
	// Say which peers kept this rank waiting the whole time.
	var slow []int
	for _, pc := range pcs {
		if pc.outwaited.Load() {
			slow = append(slow, pc.peer)
		}
	}
	if len(slow) > 0 {
		t.log.Info("closing: peers had not read the goodbye within the linger", "ranks", slow, "linger", d)
	}
}
