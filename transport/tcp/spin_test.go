package tcp

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/transport/internal/shmem"
)

// TestSpinReaderDeadlineIsAKick: while the transport is alive, a read
// deadline that passes is a kick (warm's), whatever order the kicks and
// the reader's own clearing of the deadline came in: the reader goes on
// and returns the data that comes later. Once the transport has failed
// (Close's linger), a deadline ends the read.
func TestSpinReaderDeadlineIsAKick(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var alive atomic.Bool
	alive.Store(true)
	st := &spinState{}
	r := newSpinReader(c, st, shmem.Wait{Spin: time.Millisecond}, alive.Load)
	if _, ok := r.(*spinReader); !ok {
		t.Fatalf("newSpinReader gave %T, want a *spinReader", r)
	}

	// A deadline already past, as a warm's that lost its CPU leaves it.
	_ = c.SetReadDeadline(time.Now())
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = peer.Write([]byte("x"))
	}()
	buf := make([]byte, 8)
	n, err := r.Read(buf)
	if err != nil || n != 1 || buf[0] != 'x' {
		t.Fatalf("alive, after a passed deadline: read %d bytes %q, %v; want \"x\"", n, buf[:n], err)
	}

	// A kick while the reader is parked.
	go func() {
		for !st.parked.Load() {
			time.Sleep(time.Millisecond)
		}
		undo := st.warm(c)
		defer undo()
		time.Sleep(20 * time.Millisecond)
		_, _ = peer.Write([]byte("y"))
	}()
	if n, err = r.Read(buf); err != nil || n != 1 || buf[0] != 'y' {
		t.Fatalf("alive, kicked: read %d bytes %q, %v; want \"y\"", n, buf[:n], err)
	}

	// Failed or closing: a deadline ends the read.
	alive.Store(false)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err = r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("not alive, past a deadline: read %d bytes, %v; want the deadline's error", n, err)
	}
}
