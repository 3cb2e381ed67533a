package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Shared memory under a net.Conn.
//
// ParamHub's links are byte streams (net.Conn), not the rank mesh's
// frames. When a worker and a hub share a host, the two ends of an
// authenticated connection upgrade it: the dialing side creates a segment
// as a rank does for its mesh peer, and two bells beside it (FIFOs), and
// offers it over the connection; the accepting side maps it, opens the
// bells and answers, and from then on the stream's bytes go through the
// segment's two rings. A side that sleeps on a ring sleeps on its bell
// in Go's network poller, which leaves the thread free for the process's
// other goroutines (a hub serves many workers), and the other side rings
// it with one byte when it moves that ring: a write to a pipe, a few
// microseconds where a byte on the loopback socket took tens. The socket
// stays open for liveness: its end (the peer exited, was killed, or
// closed) wakes every waiter, so a dead peer is seen as quickly as over
// TCP. Both sides always exchange the offer and the answer, also when
// shared memory is off or impossible, so the protocol does not depend on
// settings; any refusal keeps the socket.

// ShmOptions configure the shared-memory upgrade of one connection.
type ShmOptions struct {
	// Enabled offers (or accepts) shared memory; off, the offer declines.
	Enabled bool
	// Dir is where the segment is created (DefaultShmDir if empty).
	Dir string
	// RingBytes is the capacity of each direction, rounded up to a power
	// of two (DefaultShmRingBytes if 0).
	RingBytes int
	// HostKey names this host (the hostname if empty); the kernel's boot
	// id is added. Both ends must compute the same key to share memory.
	HostKey string
	// JobID names the job: segments are named after it, so that the
	// launcher's agents remove leftovers, and a peer only maps a segment
	// of its own job.
	JobID string
	// Name tells this connection's segment from the job's others.
	Name string
	// SpinTime and SpinYield are the waiting policy, as in Config.
	SpinTime  time.Duration
	SpinYield bool
	// Timeout bounds each step (one frame written or read) of the offer
	// and answer exchange; 0 is DefaultShmTimeout.
	Timeout time.Duration
	// Logger gets the warning when shared memory fails (not when it is
	// declined by choice or because the peer is on another host).
	Logger *slog.Logger

	reserve func(fd int, size int64) error // tests: a full Dir
}

func (o *ShmOptions) dir() string {
	if o.Dir != "" {
		return o.Dir
	}
	return DefaultShmDir
}

func (o *ShmOptions) hostKey() string { return hostKey(Config{HostKey: o.HostKey}) }

func (o *ShmOptions) log() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// DefaultShmTimeout bounds each step of a connection's shared-memory
// upgrade unless ShmOptions.Timeout says otherwise.
const DefaultShmTimeout = 10 * time.Second

func (o *ShmOptions) timeout() time.Duration {
	if o.Timeout <= 0 {
		return DefaultShmTimeout
	}
	return o.Timeout
}

// shmCtlMax caps the payload of a control frame (an offer, an answer, a
// ready) read while a connection is set up: a protocol bound, far above
// what an offer needs, not a tuning knob.
const shmCtlMax = 4 << 10

func (o *ShmOptions) negotiation() shmNegotiation {
	off := ""
	if !o.Enabled {
		off = "shared memory is off"
	}
	return shmNegotiation{hostKey: o.hostKey(), ringCap: ringCapOf(o.RingBytes), off: off, dir: o.dir(), jobID: o.JobID,
		reserve: o.reserve, timeout: o.timeout(), log: o.log(), bells: true}
}

// OfferShm is the dialing side of the upgrade of c, an authenticated
// connection. It returns a connection over shared memory when the peer
// mapped the segment, else c itself; an error only when the exchange
// failed (c is then closed).
func OfferShm(ctx context.Context, c net.Conn, o ShmOptions) (net.Conn, error) {
	sp, _, err := makeOffer(ctx, c, o.negotiation(), o.Name)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: shared memory offer: %w", err)
	}
	if sp == nil {
		return c, nil
	}
	return newShmConn(c, sp, o), nil
}

// AnswerShm is the accepting side of the upgrade of c: it reads the offer,
// maps the segment if it can, and answers. It returns a connection over
// shared memory, or c itself; an error only when the exchange failed (c
// is then closed).
func AnswerShm(ctx context.Context, c net.Conn, o ShmOptions) (net.Conn, error) {
	h, p, err := readCtl(ctx, c, o.timeout())
	if err == nil && h.Type != TypeShmOffer {
		err = &FrameError{Msg: fmt.Sprintf("frame type %d where a shared memory offer was due", h.Type)}
	}
	var sp *shmPeer
	if err == nil {
		sp, _, err = answerOffer(ctx, c, p, o.negotiation(), o.Name)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: shared memory offer: %w", err)
	}
	if sp == nil {
		return c, nil
	}
	return newShmConn(c, sp, o), nil
}

// readCtl reads one control frame from c, straight from the socket (no
// read-ahead: what follows belongs to whoever reads c next), within
// timeout and ctx.
func readCtl(ctx context.Context, c net.Conn, timeout time.Duration) (Header, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	return NewReader(c, shmCtlMax).Next(nil)
}

// writeCtl writes one control frame within timeout (and ctx).
func writeCtl(ctx context.Context, c net.Conn, timeout time.Duration, h Header, payload []byte) (int, error) {
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	defer c.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	return c.Write(AppendFrame(nil, h, payload))
}

// exchangeCtl writes a control frame and reads the answer, of type want.
func exchangeCtl(ctx context.Context, c net.Conn, timeout time.Duration, h Header, payload []byte, want Type) ([]byte, error) {
	if _, err := writeCtl(ctx, c, timeout, h, payload); err != nil {
		return nil, err
	}
	ah, p, err := readCtl(ctx, c, timeout)
	if err != nil {
		return nil, err
	}
	if ah.Type != want {
		return nil, &FrameError{Msg: fmt.Sprintf("frame type %d where type %d was due", ah.Type, want)}
	}
	return p, nil
}

func ringCapOf(bytes int) int {
	if bytes <= 0 {
		bytes = DefaultShmRingBytes
	}
	p := 4096
	for p < bytes {
		p *= 2
	}
	return p
}

// shmConn is a byte stream over a pair of shared rings, with the socket it
// was upgraded from kept for liveness. Reads and writes are each for one
// goroutine at a time (as ParamHub's links use them); Close may come from
// any goroutine.
type shmConn struct {
	sock net.Conn
	sp   *shmPeer
	opts ShmOptions

	rmu sync.Mutex
	cur []byte // the unread rest of the record being read
	end uint64 // where that record ends, freed when it is read

	wmu sync.Mutex

	use      sync.RWMutex // Close takes it to unmap
	unmapped bool         // under use

	bells        *bells
	gone         chan struct{} // the socket ended: the peer closed or died
	goneOnce     sync.Once
	listening    atomic.Bool   // a sleeper reads the bell
	rbell, wbell chan struct{} // a bell came (or a deadline moved)
	closed       chan struct{}
	closeOnce    sync.Once

	rdl, wdl atomic.Int64 // deadlines, unix nanoseconds; 0: none
}

func newShmConn(sock net.Conn, sp *shmPeer, o ShmOptions) *shmConn {
	c := &shmConn{sock: sock, sp: sp, opts: o, bells: sp.bells, gone: make(chan struct{}), closed: make(chan struct{}),
		rbell: make(chan struct{}, 1), wbell: make(chan struct{}, 1)}
	for _, r := range []*shmRing{sp.in, sp.out} {
		r.wake = c.ringBell
	}
	go c.watch()
	return c
}

// ringBell tells the peer, asleep on a ring, that the ring moved.
func (c *shmConn) ringBell(*atomic.Uint32) { ring(c.bells.outRC) }

// watch reads the socket until it ends (nothing more is sent on it once
// upgraded): then the peer is gone, and this side's sleepers wake.
func (c *shmConn) watch() {
	var b [64]byte
	for {
		_, err := c.sock.Read(b[:])
		if errors.Is(err, os.ErrDeadlineExceeded) && !isClosed(c.closed) {
			// A deadline the upgrade's cancellation left on the socket
			// (readCtl, writeCtl): not the peer's end.
			_ = c.sock.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			break
		}
	}
	c.goneOnce.Do(func() { close(c.gone) })
	c.kick()
}

// kick wakes every sleeper of this side: the one on the bell (this side
// rings its own bell) and the ones on their channels.
func (c *shmConn) kick() {
	ring(c.bells.inRC)
	c.wake()
}

// sleep waits for a bell, for at most shmSleep. The first of this side's
// sleepers (a reader, a writer) reads the bell itself, which saves a
// hand-off between goroutines per wake-up; the other waits on its
// channel, and the reader of the bell rings it when it is done.
func (c *shmConn) sleep(bell chan struct{}) {
	if c.listening.CompareAndSwap(false, true) {
		_ = c.bells.in.SetReadDeadline(time.Now().Add(shmSleep))
		var b [64]byte
		_, _ = c.bells.in.Read(b[:])
		c.listening.Store(false)
		c.wake()
		return
	}
	t := time.NewTimer(shmSleep)
	defer t.Stop()
	select {
	case <-bell:
	case <-c.closed:
	case <-c.gone:
	case <-t.C:
	}
}

// wake wakes this side's sleepers that wait on their channels.
func (c *shmConn) wake() {
	for _, bell := range []chan struct{}{c.rbell, c.wbell} {
		select {
		case bell <- struct{}{}:
		default:
		}
	}
}

// shmTimeout is the error of a passed deadline (a net.Error that times out).
type shmTimeout struct{}

func (shmTimeout) Error() string   { return "transport: shared memory i/o timeout" }
func (shmTimeout) Timeout() bool   { return true }
func (shmTimeout) Temporary() bool { return true }
func (shmTimeout) Is(target error) bool {
	return target == os.ErrDeadlineExceeded
}

func (c *shmConn) wait(word, sleeping *atomic.Uint32, bell chan struct{}, dl *atomic.Int64, ready func() (bool, error), peerGone error) error {
	// A deadline is looked at before every poll (and a sleep lasts at most
	// shmSleep), so that one set while waiting takes effect.
	return shmPoll(word, sleeping, c.opts.SpinTime, c.opts.SpinYield, ready, func() error {
		switch {
		case isClosed(c.closed):
			return net.ErrClosed
		case isClosed(c.gone):
			return peerGone
		}
		if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
			return shmTimeout{}
		}
		return nil
	}, func(uint32) { c.sleep(bell) })
}

// enter starts a Read (mu is rmu) or a Write (wmu): one of each at a
// time, and the segment mapped until leave.
func (c *shmConn) enter(mu *sync.Mutex) (leave func(), err error) {
	mu.Lock()
	c.use.RLock()
	if c.unmapped {
		c.use.RUnlock()
		mu.Unlock()
		return nil, net.ErrClosed
	}
	return func() { c.use.RUnlock(); mu.Unlock() }, nil
}

// Read implements net.Conn: what the peer wrote, in order; io.EOF once the
// peer is gone and everything it wrote has been read.
func (c *shmConn) Read(p []byte) (int, error) {
	leave, err := c.enter(&c.rmu)
	if err != nil {
		return 0, err
	}
	defer leave()
	if len(p) == 0 {
		return 0, nil
	}
	r := c.sp.in
	if c.cur == nil {
		var rec record
		err := c.wait(r.pseq, r.pwait, c.rbell, &c.rdl, func() (bool, error) {
			var ok bool
			var err error
			rec, ok, err = r.next(r.maxPiece())
			return ok, err
		}, io.EOF)
		if err != nil {
			return 0, err
		}
		if rec.kind != recFrame {
			return 0, shmCorrupt("record kind %d in a stream", rec.kind)
		}
		c.cur, c.end = rec.payload, rec.end
	}
	n := copy(p, c.cur)
	if c.cur = c.cur[n:]; len(c.cur) == 0 {
		c.cur = nil
		r.hold(c.end)
		r.release()
	}
	return n, nil
}

// Write implements net.Conn: p is copied into the ring, in pieces if it
// is long, waiting for the peer to make room.
func (c *shmConn) Write(p []byte) (int, error) {
	n, err := c.WriteBuffers([][]byte{p})
	return int(n), err
}

// BuffersWriter is a connection that writes several buffers as one
// stream write (a frame's header and body in one record of a
// shared-memory connection, so one wake-up of the reader).
type BuffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// WriteBuffers implements BuffersWriter: the buffers' bytes in order, in
// as few records as the ring allows.
func (c *shmConn) WriteBuffers(bufs [][]byte) (int64, error) {
	leave, err := c.enter(&c.wmu)
	if err != nil {
		return 0, err
	}
	defer leave()
	r := c.sp.out
	var n int64
	var rec [][]byte
	size := 0
	flush := func() error {
		if size == 0 {
			return nil
		}
		err := c.wait(r.cseq, r.cwait, c.wbell, &c.wdl, func() (bool, error) { return r.fits(size), nil }, io.ErrClosedPipe)
		if err != nil {
			return err
		}
		r.put(recFrame, Header{Type: TypeData, Len: uint32(size)}, rec...)
		n += int64(size)
		rec, size = rec[:0], 0
		return nil
	}
	for _, b := range bufs {
		for len(b) > 0 {
			k := min(len(b), r.maxPiece()-size)
			rec, size, b = append(rec, b[:k]), size+k, b[k:]
			if size == r.maxPiece() {
				if err := flush(); err != nil {
					return n, err
				}
			}
		}
	}
	return n, flush()
}

// Close implements net.Conn; it is idempotent. Closing the socket tells
// the peer; the segment is unmapped once no Read or Write is inside.
func (c *shmConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.sock.Close()
		c.kick()
		c.use.Lock()
		c.unmapped = true
		_ = unmapSegment(c.sp.mem)
		c.bells.close()
		c.use.Unlock()
	})
	return nil
}

// bells are a connection's two FIFOs: in is read by this side's sleeper,
// out rung for the peer's. The raw conns write without waiting.
type bells struct {
	in, out     *os.File
	inRC, outRC syscall.RawConn
}

func newBells(in, out *os.File) (*bells, error) {
	inRC, err := in.SyscallConn()
	var outRC syscall.RawConn
	if err == nil {
		outRC, err = out.SyscallConn()
	}
	if err != nil {
		_, _ = in.Close(), out.Close()
		return nil, err
	}
	return &bells{in: in, out: out, inRC: inRC, outRC: outRC}, nil
}

// close closes both ends; nil does nothing.
func (b *bells) close() {
	if b != nil {
		_, _ = b.in.Close(), b.out.Close()
	}
}

// bellPath names bell i of the segment at path: it matches the job's
// segment pattern, so the launcher's agents remove leftovers.
func bellPath(path string, i int) string { return fmt.Sprintf("%s-bell%d", path, i) }

// removeBells removes the bells' names (their opened ends stay).
func removeBells(path string) {
	for i := range 2 {
		_ = os.Remove(bellPath(path, i))
	}
}

// LocalAddr implements net.Conn.
func (c *shmConn) LocalAddr() net.Addr { return c.sock.LocalAddr() }

// RemoteAddr implements net.Conn.
func (c *shmConn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// SetDeadline implements net.Conn.
func (c *shmConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *shmConn) SetReadDeadline(t time.Time) error { c.rdl.Store(unixNano(t)); c.wake(); return nil }

// SetWriteDeadline implements net.Conn.
func (c *shmConn) SetWriteDeadline(t time.Time) error { c.wdl.Store(unixNano(t)); c.wake(); return nil }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// IsShm reports whether c runs over shared memory (an upgraded connection).
func IsShm(c net.Conn) bool {
	_, ok := c.(*shmConn)
	return ok
}
