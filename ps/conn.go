package ps

import (
	"bufio"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
)

// HubTag is added to a hub's number in the To field of the handshake, so
// that a connection meant for the rank mesh is never taken for one to a
// hub (or the other way round).
const HubTag = 1 << 30

// link is one framed connection with a writer goroutine and an unbounded
// queue, so that the side that produces messages never blocks on a slow
// socket. The queue holds references, not copies, of the data.
type link struct {
	c    net.Conn
	r    *wire.Reader
	mu   sync.Mutex
	q    []outFrame
	wake chan struct{}
	dead bool
	done chan struct{} // closed when the writer has stopped
	sent func(n int)   // counts payload bytes queued
}

type outFrame struct {
	typ     transport.Type
	hdr     []byte // message header and key
	data    []byte
	release func() // runs once data is written (the writer keeps no reference)
}

func newLink(c net.Conn, maxFrame int, sent func(int)) *link {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	// A connection over shared memory is read straight: each read copies
	// out of the ring, and a buffer between would copy a frame twice.
	var rd io.Reader = c
	if !shm.IsConn(c) {
		rd = bufio.NewReaderSize(c, 256<<10)
	}
	l := &link{c: c, r: wire.NewReader(rd, maxFrame), wake: make(chan struct{}, 1), done: make(chan struct{}), sent: sent}
	go l.writer()
	return l
}

// send queues m; it returns false once the link is dead.
func (l *link) send(m *message) bool {
	return l.queue(outFrame{typ: transport.TypeData, hdr: m.appendHeader(make([]byte, 0, msgHeaderSize+pad8(len(m.Key)))), data: m.Data, release: m.release})
}

// control queues a frame of another type (ping, pong, bye).
func (l *link) control(t transport.Type) bool { return l.queue(outFrame{typ: t}) }

func (l *link) queue(f outFrame) bool {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return false
	}
	l.q = append(l.q, f)
	l.mu.Unlock()
	if l.sent != nil {
		// Counted when queued: a call's bytes are all counted when its
		// answer arrives, whatever the writer is doing.
		l.sent(len(f.hdr) + len(f.data))
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

func (l *link) writer() {
	defer close(l.done)
	var fh [wire.HeaderSize]byte
	for {
		l.mu.Lock()
		q := l.q
		l.q = nil
		dead := l.dead
		l.mu.Unlock()
		for _, f := range q {
			n := len(f.hdr) + len(f.data)
			wire.PutHeader(fh[:], transport.Header{Type: f.typ, Len: uint32(n)})
			var err error
			if bw, ok := l.c.(shm.BuffersWriter); ok {
				_, err = bw.WriteBuffers([][]byte{fh[:], f.hdr, f.data})
			} else {
				bufs := net.Buffers{fh[:], f.hdr, f.data}
				_, err = bufs.WriteTo(l.c)
			}
			if err != nil {
				l.kill()
				_ = l.c.Close()
				return
			}
			if f.release != nil {
				f.release()
			}
		}
		if dead && len(q) == 0 {
			return
		}
		if len(q) == 0 {
			<-l.wake
		}
	}
}

// kill stops queueing; the writer flushes what is queued and stops.
func (l *link) kill() {
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// close flushes the queue for at most d, then closes the connection.
func (l *link) close(d time.Duration) {
	l.kill()
	select {
	case <-l.done:
	case <-time.After(d):
	}
	_ = l.c.Close()
	<-l.done
}
