package shm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/wire"
)

// upgradePair connects two ends over loopback TCP and runs the upgrade
// with the dialing side's options dial and the accepting side's acc.
func upgradePair(t *testing.T, dial, acc Options) (offered, answered net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := Answer(ctx, s, acc)
		ch <- res{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	offered, err = Offer(ctx, d, dial)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { offered.Close(); r.c.Close() })
	return offered, r.c
}

func shmOpts(t *testing.T, dir string) Options {
	return Options{Enabled: true, Dir: dir, RingBytes: 4096, JobID: "job/" + t.Name(), Name: "w0-hub0", SpinTime: 50 * time.Microsecond}
}

// stream writes random chunks (up to several ring capacities) from a to
// b and from b to a at once, and checks every byte.
func stream(t *testing.T, a, b net.Conn, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var sizes []int
	for sum := 0; sum < len(data); {
		n := min(len(data)-sum, []int{0, 1, 7, 2008, 2009, 4096, 65537}[rng.IntN(7)])
		sizes = append(sizes, n)
		sum += n
	}
	errs := make(chan error, 4)
	for _, p := range [][2]net.Conn{{a, b}, {b, a}} {
		go func() {
			off := 0
			for _, n := range sizes {
				if _, err := p[0].Write(data[off : off+n]); err != nil {
					errs <- err
					return
				}
				off += n
			}
			errs <- nil
		}()
		go func() {
			got := make([]byte, len(data))
			if _, err := io.ReadFull(p[1], got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, data) {
				errs <- errors.New("the stream arrived changed")
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestShmConnStream: two ends on one host upgrade to shared memory, the
// segment's name is gone once both mapped it, a megabyte in odd pieces
// goes both ways unchanged, and closing one end ends the other's stream
// after what was written before.
func TestShmConnStream(t *testing.T) {
	dir := t.TempDir()
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	o := shmOpts(t, dir)
	a, b := upgradePair(t, o, o)
	if !IsConn(a) || !IsConn(b) {
		t.Fatalf("not upgraded: %T %T", a, b)
	}
	noSegments(t, dir, o.JobID)
	stream(t, a, b, 1)
	if _, err := a.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close() // idempotent
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "last words" {
		t.Fatalf("after the peer closed: %q, %v", got, err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestShmConnDeclined: shared memory off on either side, another host, or
// a full directory keeps the socket, says why once when it is a failure,
// and the stream still works.
func TestShmConnDeclined(t *testing.T) {
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	for _, c := range []struct {
		name string
		edit func(dial, acc *Options)
		warn string
	}{
		{"off at the dialer", func(d, a *Options) { d.Enabled = false }, ""},
		{"off at the acceptor", func(d, a *Options) { a.Enabled = false }, ""},
		{"another host", func(d, a *Options) { d.HostKey, a.HostKey = "h1", "h2" }, ""},
		{"another job", func(d, a *Options) { a.JobID = "other" }, ""},
		{"full", func(d, a *Options) { d.reserve = func(int, int64) error { return syscall.ENOSPC } }, "no space left on device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs logBuf
			d, a := shmOpts(t, dir), shmOpts(t, dir)
			d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c.edit(&d, &a)
			x, y := upgradePair(t, d, a)
			if IsConn(x) || IsConn(y) {
				t.Fatalf("upgraded: %T %T", x, y)
			}
			stream(t, x, y, 2)
			if got := strings.Count(logs.String(), "shared memory unavailable"); (c.warn != "") != (got == 1) || !strings.Contains(logs.String(), c.warn) {
				t.Fatalf("warnings:\n%s", logs.String())
			}
			left, _ := os.ReadDir(dir)
			if len(left) != 0 {
				t.Fatalf("left in %s: %v", dir, left)
			}
		})
	}
}

// TestShmConnPeerGone: the peer's socket ending (it died) wakes a reader
// asleep on the ring, and a reader's deadline wakes it as a timeout.
func TestShmConnPeerGone(t *testing.T) {
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	o := shmOpts(t, t.TempDir())
	a, b := upgradePair(t, o, o)
	_ = b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	start := time.Now()
	_, err := b.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("read past its deadline: %v after %v", err, time.Since(start))
	}
	_ = b.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the reader fall asleep
	_ = a.(*conn).sock.Close()         // as a killed process's socket ends
	select {
	case err := <-done:
		if err != io.EOF {
			t.Fatalf("read from a dead peer: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a reader asleep on the ring never saw its peer die")
	}
}

// TestShmConnCorrupt: a peer that scribbles on its ring makes the reader
// fail with a malformed-frame error, never a crash.
func TestShmConnCorrupt(t *testing.T) {
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	o := shmOpts(t, t.TempDir())
	a, b := upgradePair(t, o, o)
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	out := a.(*conn).sp.Out
	copy(out.Data()[:8], []byte{0xff, 0xff, 0xff, 0x7f, 9, 0, 0, 0})
	if _, err := b.Read(make([]byte, 10)); !errors.Is(err, wire.ErrFrame) {
		t.Fatalf("read of a scribbled ring: %v", err)
	}
}

// TestShmConnGarbageOffer: an accepting side that gets garbage instead of
// an offer fails with an error that says so and closes the socket.
func TestShmConnGarbageOffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n" + strings.Repeat("x", 64)))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Answer(context.Background(), s, Options{Enabled: true, Timeout: 5 * time.Second}); !errors.Is(err, wire.ErrFrame) || !strings.Contains(err.Error(), "shared memory offer") {
		t.Fatalf("garbage offer: %v", err)
	}
}

// TestShmConnSocketDeadline: a deadline left on the socket under an
// upgraded connection (the upgrade's cancellation sets one) is not the
// peer's end: the connection stays up and carries its stream.
func TestShmConnSocketDeadline(t *testing.T) {
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	o := shmOpts(t, t.TempDir())
	a, b := upgradePair(t, o, o)
	_ = a.(*conn).sock.SetDeadline(time.Now())
	time.Sleep(50 * time.Millisecond)
	if shmem.IsClosed(a.(*conn).gone) {
		t.Fatal("a deadline on the socket was taken for the peer's end")
	}
	stream(t, a, b, 3)
}

// TestShmConnOfferWithoutBells: a connection's answering side refuses a
// segment offered without bells (an older gorun, which would never ring
// them), with a reason that says so, and the pair stays on its socket;
// an offer with bells decodes as such and one byte more is malformed.
func TestShmConnOfferWithoutBells(t *testing.T) {
	if !shmem.Supported {
		t.Skip("no shared memory on this platform")
	}
	dir := t.TempDir()
	o := shmOpts(t, dir)
	n := o.negotiation()
	off, mem, err := shmem.OfferSegment(n.HostKey, n.RingCap, "", dir, o.JobID, o.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer shmem.DropSegment(off.Path, mem)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	type res struct {
		sp  *shmem.Peer
		err error
	}
	done := make(chan res, 1)
	go func() {
		sp, _, err := shmem.AnswerOffer(context.Background(), b, off.Encode(), n, o.Name)
		done <- res{sp, err}
	}()
	_, p, err := shmem.ReadCtl(context.Background(), a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	ans := shmem.DecodeAnswer(p)
	if r.err != nil || r.sp != nil || ans.Attached || !strings.Contains(ans.Reason, "bells") {
		t.Fatalf("an offer without bells: attached %v, reason %q, %v", ans.Attached, ans.Reason, r.err)
	}
	with := off
	with.Bells = true
	got, err := shmem.DecodeOffer(with.Encode())
	if err != nil || !got.Bells {
		t.Fatalf("an offer with bells decoded as %+v, %v", got, err)
	}
	if _, err := shmem.DecodeOffer(append(with.Encode(), 1)); !errors.Is(err, wire.ErrFrame) {
		t.Fatalf("an offer with a byte too many: %v", err)
	}
}

func noSegments(t *testing.T, dir, job string) {
	t.Helper()
	left, _ := filepath.Glob(jobenv.ShmPattern(dir, job))
	if len(left) > 0 {
		t.Fatalf("segments left in %s: %v", dir, left)
	}
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
