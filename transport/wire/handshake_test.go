package wire

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
)

// breakWriter breaks off a handshake at its write number at (0 counts
// from the first): it closes the connection there (closes), or drops
// that write saying it wrote it, a peer that stops answering.
type breakWriter struct {
	net.Conn
	at, writes int
	closes     bool
}

func (c *breakWriter) Write(p []byte) (int, error) {
	n := c.writes
	c.writes++
	switch {
	case n != c.at:
		return c.Conn.Write(p)
	case c.closes:
		c.Conn.Close()
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

// TestDialAnswered: a dialed handshake that breaks off after the peer's
// reply is ErrAnswered (the peer's process ran); one that breaks off
// before it, or a refusal, is not.
func TestDialAnswered(t *testing.T) {
	secret := []byte("0123456789abcdef")
	cases := []struct {
		name string
		// accept runs the acceptor's side on c.
		accept       func(c net.Conn)
		err          bool
		answered     bool
		auth         bool
		timeoutShort bool
	}{
		{name: "accepted", accept: func(c net.Conn) {
			_, _ = AcceptHello(c, secret, func(*Hello) byte { return StatusOK })
		}},
		{name: "closed before the reply", err: true, accept: func(c net.Conn) {
			_, _ = readHello(c)
			c.Close()
		}},
		{name: "silent before the reply", err: true, timeoutShort: true, accept: func(c net.Conn) {
			_, _ = readHello(c)
		}},
		{name: "refused", err: true, auth: true, accept: func(c net.Conn) {
			_, _ = AcceptHello(c, secret, func(*Hello) byte { return StatusJob })
		}},
		{name: "closed before the status", err: true, answered: true, accept: func(c net.Conn) {
			_, _ = AcceptHello(&breakWriter{Conn: c, at: 1, closes: true}, secret, func(*Hello) byte { return StatusOK })
		}},
		{name: "silent before the status", err: true, answered: true, timeoutShort: true, accept: func(c net.Conn) {
			// Reads the proof and writes no status: the dialer's deadline ends it.
			_, _ = AcceptHello(&breakWriter{Conn: c, at: 1}, secret, func(*Hello) byte { return StatusOK })
		}},
		{name: "wrong secret", err: true, auth: true, accept: func(c net.Conn) {
			_, _ = AcceptHello(c, []byte("another secret!!"), func(*Hello) byte { return StatusOK })
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, a := net.Pipe()
			defer d.Close()
			defer a.Close()
			go tc.accept(a)
			timeout := 5 * time.Second
			if tc.timeoutShort {
				timeout = 200 * time.Millisecond
			}
			err := DialHandshake(d, "job", secret, Ends{From: 1, To: 0, Size: 2}, timeout)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want an error %v", err, tc.err)
			}
			if got := errors.Is(err, ErrAnswered); got != tc.answered {
				t.Errorf("%v: ErrAnswered %v, want %v", err, got, tc.answered)
			}
			if got := errors.Is(err, transport.ErrAuth); got != tc.auth {
				t.Errorf("%v: ErrAuth %v, want %v", err, got, tc.auth)
			}
		})
	}
}
