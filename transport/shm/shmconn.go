// Package shm upgrades an authenticated connection between two processes
// on one host to shared memory: ParamHub's links (package ps) call Offer
// on the dialing side and Answer on the accepting side, right after the
// handshake (transport/wire), and get back a net.Conn whose bytes go
// through two rings in a shared segment (transport/internal/shmem), or
// the connection itself when the peer declined or is on another host.
//
// The returned conn's Read and Write are each for one goroutine at a
// time; Close may come from any goroutine. What is written is copied
// into the ring: the caller's buffer is its own again when Write
// returns. When the peer dies, its end of the socket (kept open for just
// this) ends: a waiting Read returns io.EOF once all the peer wrote is
// read, a waiting Write fails, and no one hangs.
package shm

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
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/wire"
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

// Options configure the shared-memory upgrade of one connection.
type Options struct {
	// Enabled offers (or accepts) shared memory; off, the offer declines.
	Enabled bool
	// Dir is where the segment is created (/dev/shm if empty).
	Dir string
	// RingBytes is the capacity of each direction, rounded up to a power
	// of two (2 MiB if 0).
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
	// and answer exchange; 0 is DefaultTimeout.
	Timeout time.Duration
	// Logger gets the warning when shared memory fails (not when it is
	// declined by choice or because the peer is on another host).
	Logger *slog.Logger

	reserve func(fd int, size int64) error // tests: a full Dir
}

func (o *Options) dir() string {
	if o.Dir != "" {
		return o.Dir
	}
	return shmem.DefaultDir
}

func (o *Options) hostKey() string { return shmem.HostKey(o.HostKey) }

func (o *Options) log() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// DefaultTimeout bounds each step of a connection's shared-memory
// upgrade unless Options.Timeout says otherwise.
const DefaultTimeout = 10 * time.Second

func (o *Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

func (o *Options) negotiation() shmem.Negotiation {
	off := ""
	if !o.Enabled {
		off = "shared memory is off"
	}
	return shmem.Negotiation{HostKey: o.hostKey(), RingCap: shmem.RingCapOf(o.RingBytes), Off: off, Dir: o.dir(), JobID: o.JobID,
		Reserve: o.reserve, Timeout: o.timeout(), Log: o.log(), Bells: true}
}

// Offer is the dialing side of the upgrade of c, an authenticated
// connection. It returns a connection over shared memory when the peer
// mapped the segment, else c itself; an error only when the exchange
// failed (c is then closed).
func Offer(ctx context.Context, c net.Conn, o Options) (net.Conn, error) {
	sp, _, err := shmem.MakeOffer(ctx, c, o.negotiation(), o.Name)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: shared memory offer: %w", err)
	}
	if sp == nil {
		return c, nil
	}
	return newConn(c, sp, o), nil
}

// Answer is the accepting side of the upgrade of c: it reads the offer,
// maps the segment if it can, and answers. It returns a connection over
// shared memory, or c itself; an error only when the exchange failed (c
// is then closed).
func Answer(ctx context.Context, c net.Conn, o Options) (net.Conn, error) {
	h, p, err := shmem.ReadCtl(ctx, c, o.timeout())
	if err == nil && h.Type != transport.TypeShmOffer {
		err = &wire.FrameError{Msg: fmt.Sprintf("frame type %d where a shared memory offer was due", h.Type)}
	}
	var sp *shmem.Peer
	if err == nil {
		sp, _, err = shmem.AnswerOffer(ctx, c, p, o.negotiation(), o.Name)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: shared memory offer: %w", err)
	}
	if sp == nil {
		return c, nil
	}
	return newConn(c, sp, o), nil
}

// shmConn is a byte stream over a pair of shared rings, with the socket it
// was upgraded from kept for liveness. Reads and writes are each for one
// goroutine at a time (as ParamHub's links use them); Close may come from
// any goroutine.
type conn struct {
	sock net.Conn
	sp   *shmem.Peer
	opts Options

	rmu sync.Mutex
	cur []byte // the unread rest of the record being read
	end uint64 // where that record ends, freed when it is read

	wmu sync.Mutex

	use      sync.RWMutex // Close takes it to unmap
	unmapped bool         // under use

	bells        *shmem.Bells
	gone         chan struct{} // the socket ended: the peer closed or died
	goneOnce     sync.Once
	listening    atomic.Bool   // a sleeper reads the bell
	rbell, wbell chan struct{} // a bell came (or a deadline moved)
	closed       chan struct{}
	closeOnce    sync.Once

	rdl, wdl atomic.Int64 // deadlines, unix nanoseconds; 0: none
}

func newConn(sock net.Conn, sp *shmem.Peer, o Options) *conn {
	c := &conn{sock: sock, sp: sp, opts: o, bells: sp.Bells, gone: make(chan struct{}), closed: make(chan struct{}),
		rbell: make(chan struct{}, 1), wbell: make(chan struct{}, 1)}
	for _, r := range []*shmem.Ring{sp.In, sp.Out} {
		r.Wake = c.ringBell
	}
	go c.watch()
	return c
}

// ringBell tells the peer, asleep on a ring, that the ring moved.
func (c *conn) ringBell(*atomic.Uint32) { shmem.RingBell(c.bells.OutRC) }

// watch reads the socket until it ends (nothing more is sent on it once
// upgraded): then the peer is gone, and this side's sleepers wake.
func (c *conn) watch() {
	var b [64]byte
	for {
		_, err := c.sock.Read(b[:])
		if errors.Is(err, os.ErrDeadlineExceeded) && !shmem.IsClosed(c.closed) {
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
func (c *conn) kick() {
	shmem.RingBell(c.bells.InRC)
	c.wake()
}

// sleep waits for a bell, for at most shmSleep. The first of this side's
// sleepers (a reader, a writer) reads the bell itself, which saves a
// hand-off between goroutines per wake-up; the other waits on its
// channel, and the reader of the bell rings it when it is done.
func (c *conn) sleep(bell chan struct{}) {
	if c.listening.CompareAndSwap(false, true) {
		_ = c.bells.In.SetReadDeadline(time.Now().Add(shmem.Sleep))
		var b [64]byte
		_, _ = c.bells.In.Read(b[:])
		c.listening.Store(false)
		c.wake()
		return
	}
	t := time.NewTimer(shmem.Sleep)
	defer t.Stop()
	select {
	case <-bell:
	case <-c.closed:
	case <-c.gone:
	case <-t.C:
	}
}

// wake wakes this side's sleepers that wait on their channels.
func (c *conn) wake() {
	for _, bell := range []chan struct{}{c.rbell, c.wbell} {
		select {
		case bell <- struct{}{}:
		default:
		}
	}
}

// shmTimeout is the error of a passed deadline (a net.Error that times out).
type timeoutError struct{}

func (timeoutError) Error() string   { return "transport: shared memory i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
func (timeoutError) Is(target error) bool {
	return target == os.ErrDeadlineExceeded
}

func (c *conn) wait(word, sleeping *atomic.Uint32, bell chan struct{}, dl *atomic.Int64, ready func() (bool, error), peerGone error) error {
	// A deadline is looked at before every poll (and a sleep lasts at most
	// shmSleep), so that one set while waiting takes effect.
	return shmem.Poll(word, sleeping, shmem.Wait{Spin: c.opts.SpinTime, Yield: c.opts.SpinYield}, ready, func() error {
		switch {
		case shmem.IsClosed(c.closed):
			return net.ErrClosed
		case shmem.IsClosed(c.gone):
			return peerGone
		}
		if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
			return timeoutError{}
		}
		return nil
	}, func(uint32) { c.sleep(bell) })
}

// enter starts a Read (mu is rmu) or a Write (wmu): one of each at a
// time, and the segment mapped until leave.
func (c *conn) enter(mu *sync.Mutex) (leave func(), err error) {
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
func (c *conn) Read(p []byte) (int, error) {
	leave, err := c.enter(&c.rmu)
	if err != nil {
		return 0, err
	}
	defer leave()
	if len(p) == 0 {
		return 0, nil
	}
	r := c.sp.In
	if c.cur == nil {
		var rec shmem.Record
		err := c.wait(r.PSeq, r.PWait, c.rbell, &c.rdl, func() (bool, error) {
			var ok bool
			var err error
			rec, ok, err = r.Next(r.MaxPiece())
			return ok, err
		}, io.EOF)
		if err != nil {
			return 0, err
		}
		if rec.Kind != shmem.RecFrame {
			return 0, shmem.Corrupt("record kind %d in a stream", rec.Kind)
		}
		c.cur, c.end = rec.Payload, rec.End
	}
	n := copy(p, c.cur)
	if c.cur = c.cur[n:]; len(c.cur) == 0 {
		c.cur = nil
		r.Hold(c.end)
		r.Release()
	}
	return n, nil
}

// Write implements net.Conn: p is copied into the ring, in pieces if it
// is long, waiting for the peer to make room.
func (c *conn) Write(p []byte) (int, error) {
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
func (c *conn) WriteBuffers(bufs [][]byte) (int64, error) {
	leave, err := c.enter(&c.wmu)
	if err != nil {
		return 0, err
	}
	defer leave()
	r := c.sp.Out
	var n int64
	var rec [][]byte
	size := 0
	flush := func() error {
		if size == 0 {
			return nil
		}
		err := c.wait(r.CSeq, r.CWait, c.wbell, &c.wdl, func() (bool, error) { return r.Fits(size), nil }, io.ErrClosedPipe)
		if err != nil {
			return err
		}
		r.Put(shmem.RecFrame, transport.Header{Type: transport.TypeData, Len: uint32(size)}, rec...)
		n += int64(size)
		rec, size = rec[:0], 0
		return nil
	}
	for _, b := range bufs {
		for len(b) > 0 {
			k := min(len(b), r.MaxPiece()-size)
			rec, size, b = append(rec, b[:k]), size+k, b[k:]
			if size == r.MaxPiece() {
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
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.sock.Close()
		c.kick()
		c.use.Lock()
		c.unmapped = true
		_ = shmem.Unmap(c.sp.Mem)
		c.bells.Close()
		c.use.Unlock()
	})
	return nil
}

// LocalAddr implements net.Conn.
func (c *conn) LocalAddr() net.Addr { return c.sock.LocalAddr() }

// RemoteAddr implements net.Conn.
func (c *conn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// SetDeadline implements net.Conn.
func (c *conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *conn) SetReadDeadline(t time.Time) error { c.rdl.Store(unixNano(t)); c.wake(); return nil }

// SetWriteDeadline implements net.Conn.
func (c *conn) SetWriteDeadline(t time.Time) error { c.wdl.Store(unixNano(t)); c.wake(); return nil }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// IsConn reports whether c runs over shared memory (an upgraded connection).
func IsConn(c net.Conn) bool {
	_, ok := c.(*conn)
	return ok
}
