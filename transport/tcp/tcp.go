package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/canceled"
	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/internal/world"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/wire"
)

// Mesh is a Transport over one TCP connection per pair of ranks that
// talk, made on first use (see connect.go); through shared memory for
// pairs on one host.
type Mesh struct {
	cfg Config
	log *slog.Logger
	ln  net.Listener
	w   *world.World

	// forwards counts aborts being passed on in the background
	// (forwardAbort), which WaitNotices waits for.
	forwards atomic.Int32
	// holdHellos makes the acceptor answer no connection, as a stopped
	// process's does not (tests of a loss).
	holdHellos atomic.Bool

	mu         sync.Mutex
	conns      []atomic.Pointer[peerConn] // set once, under mu (again after a Revive)
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

	// Peer liveness (live.go): the machine, stepped under livMu (taken
	// after mu when both are held), the deadline livenessLoop waits for,
	// a wake-up for it when the deadline moves earlier, the last
	// connection's number, and the subscribers to losses.
	livMu    sync.Mutex
	live     *liveness.Machine
	armed    time.Time
	rearm    chan struct{}
	lastConn liveness.ConnID
	losses   world.Feed

	// retired are connections Revive replaced: their shared memory stays
	// mapped until Close, as a caller may still hold a frame in it (under mu).
	retired []*peerConn

	shmWarn sync.Once
	hostKey string // see hostKey
}

var _ transport.Transport = (*Mesh)(nil)

type peerConn struct {
	peer int
	id   liveness.ConnID // its number for the liveness machine
	c    net.Conn
	// wmu is held (a value in it) by the write in progress; a writer
	// waits for it only as long as its context lets it (a ping, with no
	// deadline, may hold it while the peer reads nothing).
	wmu chan struct{}
	hdr [wire.HeaderSize]byte
	// rest, under wmu, is what a write cut short by its context left of
	// a frame already begun: it goes out before anything else, so that
	// the stream stays whole.
	rest []byte
	spin spinState

	shm      atomic.Pointer[shmem.Peer] // set before the connection is published, if the pair shares memory
	sameHost bool                       // the peer's host key is this rank's
	dialed   bool                       // this rank dialed it (its remote address is where the peer listens)
	port     uint16                     // accepted: the port the peer listens on (its hello's)
	broken   atomic.Bool                // an error was read or written on it (set with the machine's step: stepBroken)
	// reads counts the reads of it that returned data (the pieces of a
	// long frame each count), and stuck is set while its reader waits for
	// room in the peer's inbox (this rank's own collectives are behind):
	// what a Sample of the liveness machine asks (a peer gossip declared
	// dead that goes on sending is alive, even if its answer to a ping
	// waits behind its data). stall measures how long this process was
	// kept from running between two Samples, and pinging counts the pings
	// being written to it.
	reads   atomic.Uint64
	stuck   atomic.Bool
	stall   cpu.StallMeter
	pinging atomic.Int32
	// outwaited is set when Close's linger ran out on it: the peer had
	// neither read the goodbye nor closed.
	outwaited atomic.Bool
}

// Listen starts listening; the transport is usable after Connect.
func Listen(cfg Config) (*Mesh, error) {
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
	t, err := listenOn(cfg, ln)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return t, nil
}

// listenOn starts a transport that accepts on ln; cfg is valid.
func listenOn(cfg Config, ln net.Listener) (*Mesh, error) {
	live, err := newMachine(cfg)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Mesh{
		cfg: cfg, log: log, ln: ln, w: world.New(cfg.Rank, cfg.Size),
		conns:    make([]atomic.Pointer[peerConn], cfg.Size),
		slots:    map[int]*slot{},
		peersSet: make(chan struct{}),
		closing:  make(chan struct{}),
		live:     live,
		rearm:    make(chan struct{}, 1),
	}
	t.hostKey = shmem.HostKey(cfg.HostKey)
	t.closeCtx, t.cancel = context.WithCancel(context.Background())
	t.w.OnFail = func() {
		t.unblock()
		t.shmWakeAll()
		t.perform(t.step(liveness.Failed{}))
	}
	t.wg.Add(2)
	go t.acceptLoop()
	go t.livenessLoop()
	return t, nil
}

// HostKey is what ranks compare to find peers on their host (Config's
// HostKey or the hostname, and the kernel's boot id): publish it with
// Addr, and give it back as Peer.Host.
func (t *Mesh) HostKey() string { return t.hostKey }

// Addr is the address the transport listens on.
func (t *Mesh) Addr() net.Addr { return t.ln.Addr() }

// Rank implements Transport.
func (t *Mesh) Rank() int { return t.cfg.Rank }

// Size implements Transport.
func (t *Mesh) Size() int { return t.cfg.Size }

// Err implements Transport.
func (t *Mesh) Err() error { return t.w.Err() }

// Failed implements Transport.
func (t *Mesh) Failed() <-chan struct{} { return t.w.Failed() }

func (t *Mesh) acceptLoop() {
	wire.AcceptLoop(t.ln, t.closing, t.cfg.AcceptPause, &t.wg, func(err error) { t.log.Warn("accept failed; retrying", "err", err) }, t.accept)
}

func (t *Mesh) accept(c net.Conn) {
	if t.holdHellos.Load() {
		// A stopped process, in tests: the kernel took the connection,
		// nobody answers it.
		<-t.closing
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	stop := context.AfterFunc(t.closeCtx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	admitted := -1
	h, err := wire.AcceptHello(c, t.cfg.Secret, func(h *wire.Hello) byte {
		switch {
		case h.Version != wire.ProtocolVersion:
			return wire.StatusVersion
		case h.JobID != t.cfg.JobID:
			return wire.StatusJob
		case int(h.To) != t.cfg.Rank || int(h.Size) != t.cfg.Size || int(h.From) >= t.cfg.Size || int(h.From) == t.cfg.Rank:
			return wire.StatusRanks
		}
		st := t.admit(int(h.From))
		if st == wire.StatusOK {
			admitted = int(h.From)
		}
		return st
	})
	if admitted >= 0 {
		defer t.unadmit(admitted)
	}
	if err != nil {
		if !errors.Is(err, wire.ErrDuplicate) {
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
func (t *Mesh) taken(peer int) bool {
	select {
	case <-t.closing:
		return true
	default:
	}
	return t.conns[peer].Load() != nil
}

// register publishes a set-up connection to peer (with its shared memory,
// if any) and starts its reader. A dialed connection was made for the
// peer's generation gen (when its dial loop began); an accepted one is the
// current generation's. It fails with wire.ErrDuplicate if peer already has a
// connection, and with errReplaced if Revive gave the peer a new process
// since gen.
func (t *Mesh) register(peer int, c net.Conn, sp *shmem.Peer, sameHost, dialed bool, port uint16, gen uint32) error {
	t.mu.Lock()
	if t.taken(peer) {
		t.mu.Unlock()
		return wire.ErrDuplicate
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	t.livMu.Lock()
	if !dialed {
		gen = t.live.Gen(peer)
	} else if gen != t.live.Gen(peer) {
		t.livMu.Unlock()
		t.mu.Unlock()
		return errReplaced
	}
	t.lastConn++
	pc := &peerConn{peer: peer, id: t.lastConn, c: c, wmu: make(chan struct{}, 1), sameHost: sameHost, dialed: dialed, port: port}
	if sp != nil {
		t.attach(pc, sp)
	}
	t.w.Peer(peer) // its inbox, before the reader delivers
	t.conns[peer].Store(pc)
	acts := t.stepLocked(liveness.Connected{Peer: peer, Gen: gen, Conn: pc.id}) // before the reader's first event
	t.livMu.Unlock()
	t.wg.Add(1)
	t.readers.Add(1)
	go t.readLoop(pc)
	t.slotOf(peer).notify()
	t.mu.Unlock()
	t.perform(acts)
	if t.cfg.OnConnect != nil {
		t.cfg.OnConnect(peer, sp != nil)
	}
	return nil
}

var errReplaced = errors.New("the peer was given a new process meanwhile (Revive)")

func (t *Mesh) readLoop(pc *peerConn) {
	defer t.wg.Done()
	defer t.readers.Done()
	alive := func() bool { return t.w.Err() == nil }
	r := countReads{newSpinReader(pc.c, &pc.spin, t.wait(), alive), &pc.reads}
	fr := wire.NewReader(bufio.NewReaderSize(r, readBufferSize), t.cfg.MaxPayload)
	for {
		h, p, err := fr.Next(transport.GetBuf)
		if err != nil {
			if t.lingering.Load() || shmem.IsClosed(t.closing) {
				// Close is waiting for this: the end is expected, or its
				// wait ran out.
				pc.broken.Store(true)
				pc.outwaited.Store(t.lingering.Load() && errors.Is(err, os.ErrDeadlineExceeded))
				return
			}
			t.perform(t.stepBroken(pc, liveness.ReadEnded{Peer: pc.peer, Conn: pc.id, Err: err, Malformed: errors.Is(err, wire.ErrFrame)}))
			return
		}
		switch h.Type {
		case transport.TypeData:
			// After a failure the frame is dropped, but reading goes on so
			// that the peer's last words (an abort) are still seen.
			f := transport.NewFrame(h, p, transport.PutBuf)
			if !t.w.TryDeliver(pc.peer, f) {
				pc.stuck.Store(true)
				t.w.Deliver(pc.peer, f, t.closing)
				pc.stuck.Store(false)
			}
			if pc.spin.hot.Load() > 0 {
				// Let the waiting receiver run now, on this thread.
				runtime.Gosched()
			}
		case transport.TypeAbort:
			origin := pc.peer
			if h.Step > 0 && int(h.Step) <= t.cfg.Size {
				origin = int(h.Step) - 1 // forwarded: the rank it came from first
			}
			if t.w.Fail(transport.DecodeAbort(origin, p)) {
				// Peers this rank talks to may not talk to the origin:
				// pass the abort on, once, so that it floods the job.
				t.forwardAbort(pc.peer, origin, p)
			} else {
				transport.PutBuf(p)
			}
		case transport.TypeBye:
			transport.PutBuf(p)
			t.perform(t.step(liveness.Bye{Peer: pc.peer, Conn: pc.id}))
			// The peer is closing and waits (LingerTimeout) until this
			// side has read all it sent, the goodbye last: say so by
			// half-closing. Nothing written to it now would be read.
			if tc, ok := pc.c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		case transport.TypePing:
			t.wg.Add(1) // safe: this reader holds a count until it returns
			go func() {
				defer t.wg.Done()
				// No deadline: a write cut short by one leaves half a
				// frame in the stream, and every later frame unreadable
				// (a peer too busy to read for a while is not lost: it
				// finds the pong behind the data). The transport's
				// closing ends a write to a peer that never reads.
				_ = t.write(t.closeCtx, pc, transport.Header{Type: transport.TypePong}, nil)
			}()
		case transport.TypePong:
			t.perform(t.step(liveness.Pong{Peer: pc.peer, Conn: pc.id}))
		default: // setup frames after the setup: ignored
			transport.PutBuf(p)
		}
	}
}

// countReads counts the reads of r that return data in n.
type countReads struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countReads) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if k > 0 {
		c.n.Add(1)
	}
	return k, err
}

// readBufferSize is a reader's buffer. It lets one read take in many small
// frames; a large payload is read straight into its own buffer, except for
// the part the buffer took in with the header, so a small buffer copies
// less.
const readBufferSize = 64 << 10

// Send implements Transport.
func (t *Mesh) Send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	if err := t.w.CheckPeer(to); err != nil {
		return err
	}
	if err := t.w.Err(); err != nil {
		return err
	}
	if len(payload) > t.cfg.MaxPayload {
		return fmt.Errorf("transport: payload of %d bytes exceeds the %d byte cap", len(payload), t.cfg.MaxPayload)
	}
	if t.cfg.Elastic && t.gone(to) {
		return t.w.GoneErr(to)
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
	h.Type = transport.TypeData
	shmem.RaceRelease() // see race_on.go: a reply may come back through shared memory
	err := t.write(ctx, pc, h, payload)
	if err == nil {
		return nil
	}
	if werr := t.w.Err(); werr != nil {
		return werr
	}
	if ctx.Err() != nil {
		return canceled.Cause(ctx)
	}
	t.perform(t.stepBroken(pc, liveness.SendFailed{Peer: to, Conn: pc.id, Err: err}))
	if t.conns[to].Load() != pc {
		// Revive replaced the connection under this call: the peer's
		// restarted process is reached anew.
		return t.Send(ctx, to, h, payload)
	}
	// The machine blames the peer after ExplainWait, unless the job
	// fails meanwhile (a peer that exits on another rank's failure sends
	// that failure first): wait for its decision, so that the error says
	// which. (The timer is a backstop: the decision comes on the
	// machine's clock.)
	timer := time.NewTimer(t.cfg.ExplainWait + time.Second)
	defer timer.Stop()
	select {
	case <-t.w.Failed():
	case <-t.w.Peer(to).Left:
	case <-t.closing:
	case <-ctx.Done():
	case <-timer.C:
	}
	if werr := t.w.Err(); werr != nil {
		return werr
	}
	return &transport.PeerLostError{Rank: to, Reason: "send failed: " + err.Error()}
}

// write writes one frame on pc, waiting for the write in progress, if
// any, as long as ctx lets it.
func (t *Mesh) write(ctx context.Context, pc *peerConn, h transport.Header, payload []byte) error {
	select {
	case pc.wmu <- struct{}{}:
	default:
		select {
		case pc.wmu <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	defer func() { <-pc.wmu }()
	_ = pc.c.SetWriteDeadline(time.Time{})
	if ctx.Done() != nil {
		// A context that ends as this write returns has its deadline set
		// in a goroutine of its own: wait for it, or it lands on the next
		// write, whose context may be fine, and fails that one.
		set := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { _ = pc.c.SetWriteDeadline(time.Now()); close(set) })
		defer func() {
			if !stop() {
				<-set
			}
		}()
	}
	if len(pc.rest) > 0 {
		n, err := pc.c.Write(pc.rest)
		pc.rest = pc.rest[n:]
		if err != nil {
			return err
		}
		pc.rest = nil
	}
	h.Len = uint32(len(payload))
	wire.PutHeader(pc.hdr[:], h)
	bufs := net.Buffers{pc.hdr[:], payload}
	n, err := bufs.WriteTo(pc.c)
	if err != nil && n > 0 && int(n) < wire.HeaderSize+len(payload) {
		// Begun but not finished (its context ended): keep the rest, as
		// the peer's reader waits for it; the payload is the caller's
		// again once this returns.
		pc.rest = make([]byte, 0, wire.HeaderSize+len(payload)-int(n))
		if int(n) < wire.HeaderSize {
			pc.rest = append(pc.rest, pc.hdr[n:]...)
			pc.rest = append(pc.rest, payload...)
		} else {
			pc.rest = append(pc.rest, payload[int(n)-wire.HeaderSize:]...)
		}
	}
	return err
}

// SetWaitMeter makes every later Recv add the time it is blocked for a
// peer's data (over a socket or shared memory) to m (nil: stop).
func (t *Mesh) SetWaitMeter(m *transport.WaitMeter) { t.w.SetWaitMeter(m) }

// Recv implements Transport.
func (t *Mesh) Recv(ctx context.Context, from int) (transport.Frame, error) {
	var pc *peerConn
	if from >= 0 && from < t.cfg.Size {
		pc = t.conns[from].Load()
	}
	if pc == nil {
		var err error
		if pc, err = t.conn(ctx, from); err != nil {
			return transport.Frame{}, err
		}
	}
	if sp := pc.shm.Load(); sp != nil {
		if err := t.w.Err(); err != nil {
			return transport.Frame{}, err
		}
		return t.shmRecv(ctx, sp)
	}
	if t.cfg.SpinTime > 0 {
		select {
		case f := <-t.w.Peer(from).Inbox:
			shmem.RaceAcquire()
			return f, nil
		default:
		}
		defer pc.spin.warm(pc.c)()
	}
	f, err := t.w.Recv(ctx, from)
	shmem.RaceAcquire() // see race_on.go: what was sent through shared memory came first
	return f, err
}

// Abort implements Transport: it sends err to every peer (best effort,
// bounded by AbortTimeout) and then fails this transport with err.
func (t *Mesh) Abort(err error) {
	if t.w.Err() != nil {
		return
	}
	t.broadcastAbort(err, -1, t.cfg.AbortTimeout)
	t.w.Fail(err)
}

// broadcastAbort sends an abort frame with err to every peer but skip, in
// parallel, each bounded by timeout.
func (t *Mesh) broadcastAbort(err error, skip int, timeout time.Duration) {
	t.sendAbort(transport.EncodeAbort(err), skip, -1, timeout)
}

// forwardAbort passes on an abort (payload p, a pooled buffer) that came
// from origin through peer from, in the background, within
// NoticeTimeout.
func (t *Mesh) forwardAbort(from, origin int, p []byte) {
	t.wg.Add(1) // safe: called by a reader, which holds a count
	t.forwards.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.forwards.Add(-1)
		t.sendAbort(p, from, origin, t.cfg.NoticeTimeout)
		transport.PutBuf(p)
	}()
}

// WaitNotices waits (NoticeTimeout at most, as each send is bounded) for
// the aborts this rank is passing on to its peers, so that a program that
// exits on the error it got does not leave its peers blaming it instead
// of the rank that failed first.
func (t *Mesh) WaitNotices() {
	deadline := time.Now().Add(t.cfg.NoticeTimeout)
	for t.forwards.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// sendAbort sends an abort frame with payload to every connected peer
// but skip; origin (-1: this rank) is the rank that aborted first.
func (t *Mesh) sendAbort(payload []byte, skip, origin int, timeout time.Duration) {
	h := transport.Header{Type: transport.TypeAbort}
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

func (t *Mesh) peers() []*peerConn {
	var out []*peerConn
	for i := range t.conns {
		if pc := t.conns[i].Load(); pc != nil {
			out = append(out, pc)
		}
	}
	return out
}

// unblock wakes every blocked write once the world has failed. Blocked
// Recv calls wake on the failure itself; the readers keep draining.
func (t *Mesh) unblock() {
	for _, pc := range t.peers() {
		_ = pc.c.SetWriteDeadline(time.Now())
	}
}

// Close says goodbye to every peer, closes every connection and waits for
// the transport's goroutines. If the transport had failed, the goodbye is
// the failure's cause, so that peers learn why this rank is going. It is
// idempotent.
func (t *Mesh) Close() error {
	t.closeOnce.Do(func() {
		t.perform(t.step(liveness.Closing{})) // ends of connections are expected from here
		failed := t.w.Err()
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ByeTimeout)
		var wg sync.WaitGroup
		for _, pc := range t.peers() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if failed != nil {
					_ = t.write(ctx, pc, transport.Header{Type: transport.TypeAbort}, transport.EncodeAbort(failed))
				} else {
					_ = t.write(ctx, pc, transport.Header{Type: transport.TypeBye}, nil)
				}
				if tc, ok := pc.c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}()
		}
		wg.Wait()
		cancel()
		t.w.Fail(fmt.Errorf("transport: rank %d: %w", t.cfg.Rank, transport.ErrClosed))
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
		t.losses.Close()
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
		t.w.Drain()
		t.closeShm()
	})
	return nil
}

func (t *Mesh) waitReaders(d time.Duration) {
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
