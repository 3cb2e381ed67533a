package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/world"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/wire"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// listenAll starts n TCP transports on loopback, closed at the test's end.
func listenAll(t *testing.T, n int, tweak func(r int, c *Config)) []*Mesh {
	t.Helper()
	ts := make([]*Mesh, n)
	for r := range n {
		cfg := DefaultConfig()
		cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret, cfg.ListenAddr = r, n, testJob, testSecret, "127.0.0.1:0"
		if tweak != nil {
			tweak(r, &cfg)
		}
		tr, err := Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts[r] = tr
	}
	return ts
}

// mesh starts n TCP transports on loopback and connects them.
func mesh(t *testing.T, n int, tweak func(r int, c *Config)) []*Mesh {
	t.Helper()
	ts := listenAll(t, n, tweak)
	addrs := make([]string, n)
	for r, tr := range ts {
		addrs[r] = tr.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = ts[r].Connect(ctx, addrs) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ts
}

// sendNumbered sends n frames of size bytes (at least 1) from tr to peer:
// frame i has step i and first byte i, as recvNumbered checks.
func sendNumbered(tr *Mesh, peer, n, size int) error {
	b := make([]byte, size)
	for i := range n {
		b[0] = byte(i)
		if err := tr.Send(context.Background(), peer, transport.Header{Step: uint32(i)}, b); err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
	}
	return nil
}

// recvNumbered receives sendNumbered's n frames from peer, in order.
func recvNumbered(t *testing.T, tr *Mesh, peer, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		f, err := tr.Recv(ctx, peer)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Header.Step != uint32(i) || len(f.Payload) == 0 || f.Payload[0] != byte(i) {
			first := -1
			if len(f.Payload) > 0 {
				first = int(f.Payload[0])
			}
			t.Fatalf("frame %d: step %d, %d bytes, first byte %d", i, f.Header.Step, len(f.Payload), first)
		}
		f.Release()
	}
}

func TestTCPExchange(t *testing.T) {
	ts := mesh(t, 3, nil)
	ctx := context.Background()
	for from := range ts {
		for to := range ts {
			if from == to {
				continue
			}
			payload := []byte(fmt.Sprintf("%d->%d", from, to))
			if err := ts[from].Send(ctx, to, transport.Header{Seq: uint32(from), Count: 9}, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	for to := range ts {
		for from := range ts {
			if from == to {
				continue
			}
			f, err := ts[to].Recv(ctx, from)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d->%d", from, to); string(f.Payload) != want || f.Seq != uint32(from) || f.Count != 9 {
				t.Fatalf("got %q %+v, want %q", f.Payload, f.Header, want)
			}
			f.Release()
		}
	}
}

func TestTCPWrongSecret(t *testing.T) {
	n := 2
	ts := make([]*Mesh, n)
	for r := range n {
		cfg := DefaultConfig()
		cfg.Rank, cfg.Size, cfg.JobID, cfg.ListenAddr = r, n, testJob, "127.0.0.1:0"
		cfg.Secret = testSecret
		if r == 1 {
			cfg.Secret = bytes.Repeat([]byte("x"), 32)
		}
		tr, err := Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ts[r] = tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := ts[0].Connect(ctx, []string{ts[0].Addr().String(), ts[1].Addr().String()})
	if !errors.Is(err, transport.ErrAuth) || !strings.Contains(err.Error(), "wrong job secret") {
		t.Fatalf("got %v, want a wrong-secret error", err)
	}
}

// TestTCPGarbageConnection: a stranger that connects and sends garbage, or
// the wrong job id, is dropped; the job goes on.
func TestTCPGarbageConnection(t *testing.T) {
	ts := mesh(t, 2, nil)
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		(&wire.Hello{Version: wire.ProtocolVersion, From: 1, To: 0, Size: 2, JobID: "other-job"}).Append(nil),
		(&wire.Hello{Version: 99, From: 1, To: 0, Size: 2, JobID: testJob}).Append(nil),
		(&wire.Hello{Version: wire.ProtocolVersion, From: 1, To: 0, Size: 2, JobID: testJob}).Append(nil), // no proof follows
	} {
		c, err := net.Dial("tcp", ts[0].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(junk)
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 64)
		_, _ = c.Read(buf)
		c.Close()
	}
	ctx := context.Background()
	if err := ts[1].Send(ctx, 0, transport.Header{}, []byte("still fine")); err != nil {
		t.Fatal(err)
	}
	f, err := ts[0].Recv(ctx, 1)
	if err != nil || string(f.Payload) != "still fine" {
		t.Fatalf("after garbage: %v %q", err, f.Payload)
	}
}

// TestTCPGarbageFromPeer: an authenticated peer that sends a malformed
// frame is reported as lost, by rank.
func TestTCPGarbageFromPeer(t *testing.T) {
	ts := mesh(t, 2, nil)
	pc := ts[1].peers()[0]
	_, _ = pc.c.Write([]byte("this is not a frame at all, not even close"))
	_, err := ts[0].Recv(context.Background(), 1)
	var pl *transport.PeerLostError
	if !errors.As(err, &pl) || pl.Rank != 1 || !strings.Contains(err.Error(), "malformed frame") {
		t.Fatalf("got %v, want rank 1 lost for a malformed frame", err)
	}
}

func TestTCPPeerLostAndLeft(t *testing.T) {
	ts := mesh(t, 3, nil)
	ctx := context.Background()
	// A clean Close after sending: the data is still delivered, then the
	// peer counts as gone for this pair only.
	if err := ts[2].Send(ctx, 0, transport.Header{}, []byte("last words")); err != nil {
		t.Fatal(err)
	}
	ts[2].Close()
	f, err := ts[0].Recv(ctx, 2)
	if err != nil || string(f.Payload) != "last words" {
		t.Fatalf("got %v %q", err, f.Payload)
	}
	if _, err := ts[0].Recv(ctx, 2); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("recv from a closed peer: %v", err)
	}
	if ts[0].Err() != nil {
		t.Fatalf("a clean departure failed the world: %v", ts[0].Err())
	}
	// An abrupt end (no goodbye) fails everyone, naming the rank.
	ts[1].peers()[0].c.Close()
	_, err = ts[0].Recv(ctx, 1)
	var pl *transport.PeerLostError
	if !errors.As(err, &pl) || pl.Rank != 1 {
		t.Fatalf("got %v, want rank 1 lost", err)
	}
}

func TestTCPAbortAndCancel(t *testing.T) {
	ts := mesh(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ts[0].Recv(ctx, 1)
	if !transport.IsCanceled(err) {
		t.Fatalf("got %v, want a cancellation", err)
	}
	ts[0].Abort(fmt.Errorf("rank 0: %w", err))
	for _, r := range []int{1, 2} {
		_, err := ts[r].Recv(context.Background(), 0)
		var re *transport.RemoteError
		if !errors.As(err, &re) || re.Rank != 0 || !transport.IsCanceled(err) {
			t.Fatalf("rank %d: got %v, want rank 0's abort", r, err)
		}
	}
}

func TestTCPPayloadCap(t *testing.T) {
	ts := mesh(t, 2, func(r int, c *Config) { c.MaxPayload = 1024 })
	if err := ts[0].Send(context.Background(), 1, transport.Header{}, make([]byte, 2048)); err == nil {
		t.Fatal("oversized send accepted")
	}
	if err := ts[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestMemKill(t *testing.T) {
	nw := mem.NewNetwork(3)
	ctx := context.Background()
	if err := nw.Transport(1).Send(ctx, 0, transport.Header{Count: 3}, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	nw.Kill(2)
	for _, r := range []int{0, 1} {
		_, err := nw.Transport(r).Recv(ctx, 2)
		var pl *transport.PeerLostError
		if !errors.As(err, &pl) || pl.Rank != 2 {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestGossipVerdictConfirmed: a rank gossip declares dead is kept on its
// pong; one that then reads nothing, sends nothing and answers no
// connection (rank 1, its reader waiting on its full inbox and its
// acceptor held: a stopped process) is lost, naming both: on gossip's
// second verdict, or with none (standing), on the first verdict, which
// stands (gossip declares a rank dead once, and a kept rank is checked
// again).
func TestGossipVerdictConfirmed(t *testing.T) {
	for _, c := range []struct {
		name  string
		again bool // gossip declares the stopped rank dead again
		want  []string
	}{
		{"verdict again", true, []string{"no answer on its data connection", "nor to a connection"}},
		{"standing", false, []string{"declared dead by gossip, and no answer on its data connection"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuf
			ts := mesh(t, 2, func(r int, c *Config) {
				c.ConfirmTimeout, c.Shm = 300*time.Millisecond, false
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			ts[0].PeerLost(1, "declared dead by gossip")
			proctest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "answered on the data plane; keeping it") }, "rank 0 keeps rank 1 on its pong")
			if err := ts[0].Err(); err != nil {
				t.Fatalf("a rank that answers its pings was lost: %v", err)
			}
			// Rank 1 never receives, so its reader blocks once its inbox is full.
			big := make([]byte, 1<<20)
			for range world.InboxDepth + 2 {
				if err := ts[0].Send(context.Background(), 1, transport.Header{}, big); err != nil {
					t.Fatal(err)
				}
			}
			ts[1].holdHellos.Store(true)
			if c.again {
				ts[0].PeerLost(1, "declared dead by gossip")
			}
			// The window stretches on a loaded machine (liveness.DefaultPolicy): up to
			// MaxStretch (120) times 300 ms.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := ts[0].Recv(ctx, 1)
			var pl *transport.PeerLostError
			if !errors.As(err, &pl) || pl.Rank != 1 {
				t.Fatalf("got %v, want rank 1 lost after an unanswered ping and knock", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("got %v, want rank 1 lost saying %q", err, w)
				}
			}
		})
	}
}

// TestGossipVerdictBehindOwnInbox: a rank gossip declares dead whose own
// collectives are behind (its reader waits for room in its inbox from
// this rank, so this rank's ping waits unread, and it sends nothing) is
// alive: its process answers the knock, it is asked again window after
// window, and it is kept on its pong once it takes its frames. It is the
// rank TestGossipVerdictConfirmed loses, but running.
func TestGossipVerdictBehindOwnInbox(t *testing.T) {
	var logs logBuf
	ts := mesh(t, 2, func(r int, c *Config) {
		c.ConfirmTimeout, c.Shm = 300*time.Millisecond, false
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const frames = world.InboxDepth + 2
	if err := sendNumbered(ts[0], 1, frames, 1<<20); err != nil {
		t.Fatal(err)
	}
	ts[0].PeerLost(1, "declared dead by gossip")
	// A window that finds this rank starved proves nothing (and asks again
	// for that, not for the knock), for up to MaxStretch windows.
	proctest.WaitFor(t, 40*time.Second, func() bool {
		return strings.Contains(logs.String(), "its process answers a connection")
	}, "rank 0 asks rank 1 again on its knock's answer")
	time.Sleep(time.Second) // three more windows, or more
	if err := ts[0].Err(); err != nil {
		t.Fatalf("a rank whose reader waits on its own inbox was lost: %v", err)
	}
	recvNumbered(t, ts[1], 0, frames)
	proctest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "answered on the data plane; keeping it") }, "rank 1's pong, read once its frames were taken, keeps it")
	if err := ts[0].Err(); err != nil {
		t.Fatalf("lost after it took its frames: %v", err)
	}
}

// TestGossipVerdictBehindData: a rank gossip declares dead whose answer
// to the ping waits behind the data it sent (this rank's inbox from it is
// full: this rank's own collective is behind) is alive: it is asked again
// until the data is taken and its answer read, and is never lost, even
// with the window long past.
func TestGossipVerdictBehindData(t *testing.T) {
	var logs logBuf
	ts := mesh(t, 2, func(r int, c *Config) {
		c.ConfirmTimeout, c.Shm = 200*time.Millisecond, false
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const frames = world.InboxDepth + 8
	sent := make(chan error, 1)
	go func() { sent <- sendNumbered(ts[1], 0, frames, 256<<10) }()
	// Rank 0's reader stalls on its full inbox from rank 1.
	time.Sleep(300 * time.Millisecond)
	ts[0].PeerLost(1, "declared dead by gossip")
	// A window passes with nothing read (the reader waits on the full
	// inbox): the old rule lost it there.
	proctest.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "still sending on the data plane; asking it again")
	}, "rank 0 asks rank 1 again")
	time.Sleep(400 * time.Millisecond) // two more windows
	if err := ts[0].Err(); err != nil {
		t.Fatalf("a rank still sending was lost: %v", err)
	}
	recvNumbered(t, ts[0], 1, frames)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "answered on the data plane; keeping it") }, "its answer, read after its data, keeps rank 1")
	if err := ts[0].Err(); err != nil {
		t.Fatalf("lost after its data was taken: %v", err)
	}
}

// TestLostAfterFailure: a peer that gossip declares dead and that does not
// answer its ping is recorded in Lost even when the transport had already
// failed on another rank's abort.
func TestLostAfterFailure(t *testing.T) {
	ts := mesh(t, 3, func(r int, c *Config) { c.ConfirmTimeout = 300 * time.Millisecond })
	ts[2].Abort(errors.New("rank 2 gives up"))
	deadline := time.Now().Add(5 * time.Second)
	for ts[0].Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ts[0].Err() == nil {
		t.Fatal("rank 2's abort never arrived")
	}
	// Rank 1 vanishes without a word (its connections just close).
	for _, pc := range ts[1].peers() {
		_ = pc.c.Close()
	}
	ts[0].PeerLost(1, "declared dead by gossip")
	for time.Now().Before(deadline) {
		if reason, ok := ts[0].Lost()[1]; ok {
			if !strings.Contains(reason, "declared dead by gossip") {
				t.Fatalf("reason %q", reason)
			}
			if _, ok := ts[0].Lost()[2]; ok {
				t.Fatal("rank 2 (which aborted cleanly) recorded as lost")
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("rank 1 not in Lost: %v", ts[0].Lost())
}

// TestTCPSpinModes moves frames of many sizes (below, at and above the
// reader's buffer) in both directions while the receivers park, spin, or
// spin yielding, and checks every byte and the order. Some frames come
// after the receiver's spin has run out, so it must park and still wake.
func TestTCPSpinModes(t *testing.T) {
	modes := []struct {
		name  string
		spin  time.Duration
		yield bool
	}{{"park", 0, false}, {"spin", 100 * time.Microsecond, false}, {"yield", 2 * time.Millisecond, true}}
	sizes := []int{0, 1, 7, wire.HeaderSize, readBufferSize - wire.HeaderSize, readBufferSize, readBufferSize + 1, 3*readBufferSize + 5, 1 << 20}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := mesh(t, 2, func(_ int, c *Config) { c.SpinTime, c.SpinYield = m.spin, m.yield })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			payload := func(from, i int) []byte {
				b := make([]byte, sizes[i%len(sizes)])
				for j := range b {
					b[j] = byte(from*31 + i*7 + j)
				}
				return b
			}
			const frames = 40
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for r := range 2 {
				wg.Add(2)
				go func() {
					defer wg.Done()
					for i := range frames {
						if i%10 == 9 {
							time.Sleep(5 * time.Millisecond) // outlast the spin
						}
						if err := ts[r].Send(ctx, 1-r, transport.Header{Step: uint32(i)}, payload(r, i)); err != nil {
							errs[r] = err
							return
						}
					}
				}()
				go func() {
					defer wg.Done()
					for i := range frames {
						f, err := ts[r].Recv(ctx, 1-r)
						if err != nil {
							errs[2+r] = err
							return
						}
						if f.Step != uint32(i) || !bytes.Equal(f.Payload, payload(1-r, i)) {
							errs[2+r] = fmt.Errorf("rank %d frame %d: step %d, %d bytes, wrong content", r, i, f.Step, len(f.Payload))
						}
						f.Release()
						if errs[2+r] != nil {
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGossipLeftAfterData: gossip's word that a peer left can overtake
// the peer's last frames on its connection; they are still delivered, and
// only the connection's own goodbye ends the pair. A peer never connected
// counts as gone once ConfirmTimeout passes without a connection.
func TestGossipLeftAfterData(t *testing.T) {
	for i := range 20 {
		ts := mesh(t, 2, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ts[0].PeerLeft(1) // gossip first, while rank 0 already waits
		type got struct {
			f   transport.Frame
			err error
		}
		res := make(chan got, 1)
		go func() { f, err := ts[0].Recv(ctx, 1); res <- got{f, err} }()
		time.Sleep(time.Duration(i%3) * 10 * time.Millisecond)
		if err := ts[1].Send(ctx, 0, transport.Header{Step: uint32(i)}, []byte("last words")); err != nil {
			t.Fatal(err)
		}
		r := <-res
		f, err := r.f, r.err
		if err != nil || string(f.Payload) != "last words" {
			t.Fatalf("round %d: got %v %q, want the frame sent before leaving", i, err, f.Payload)
		}
		ts[1].Close()
		if _, err := ts[0].Recv(ctx, 1); !errors.Is(err, transport.ErrPeerLost) {
			t.Fatalf("round %d: recv after the goodbye: %v", i, err)
		}
		cancel()
	}
	ts := lazyMesh(t, 3, nil, func(r int, c *Config) { c.ConfirmTimeout = 200 * time.Millisecond })
	ts[2].Close()
	ts[0].PeerLeft(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pl *transport.PeerLostError
	if _, err := ts[0].Recv(ctx, 2); !errors.As(err, &pl) || pl.Rank != 2 {
		t.Fatalf("recv from an unconnected rank that left: %v", err)
	}
}

// flakyListener fails its first fails accepts with a transient error (as
// when the process is out of file descriptors), then accepts.
type flakyListener struct {
	net.Listener
	fails  int
	failed atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if int(l.failed.Load()) < l.fails {
		l.failed.Add(1)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestAcceptSurvivesTransientErrors: failed accepts pause the accept loop
// (AcceptPause) without ending it; a peer then connects, and Close still
// returns.
func TestAcceptSurvivesTransientErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret = 0, 2, testJob, testSecret
	cfg.AcceptPause = 5 * time.Millisecond
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln, fails: 3}
	t0, err := listenOn(cfg, fl)
	if err != nil {
		t.Fatal(err)
	}
	defer t0.Close()
	t1 := listenAll(t, 2, nil)[1]
	peers := []Peer{{Addr: t0.Addr().String()}, {Addr: t1.Addr().String()}}
	for _, tr := range []*Mesh{t0, t1} {
		if err := tr.SetPeers(peers); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t1.Send(ctx, 0, transport.Header{Seq: 1}, []byte("hi")); err != nil { // rank 1 dials rank 0
		t.Fatal(err)
	}
	f, err := t0.Recv(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Payload) != "hi" {
		t.Fatalf("got %q", f.Payload)
	}
	f.Release()
	if n := fl.failed.Load(); n != 3 {
		t.Fatalf("%d accepts failed, want 3", n)
	}
}

func TestConfigValidatesTimings(t *testing.T) {
	base := DefaultConfig()
	base.Rank, base.Size, base.JobID, base.Secret = 0, 2, testJob, testSecret
	if err := base.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, tweak := range map[string]func(*Config){
		"AbortTimeout":  func(c *Config) { c.AbortTimeout = 0 },
		"NoticeTimeout": func(c *Config) { c.NoticeTimeout = 0 },
		"ByeTimeout":    func(c *Config) { c.ByeTimeout = 0 },
		"AcceptPause":   func(c *Config) { c.AcceptPause = 0 },
		"RetryPause":    func(c *Config) { c.RetryPause = 0 },
		"MaxRetryPause": func(c *Config) { c.MaxRetryPause = c.RetryPause - 1 },
		"ExplainWait":   func(c *Config) { c.ExplainWait = -1 },
		"DrainTimeout":  func(c *Config) { c.DrainTimeout = -1 },
	} {
		c := base
		tweak(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v, want an error naming it", name, err)
		}
	}
	c := base
	c.ExplainWait, c.DrainTimeout = 0, 0
	if err := c.validate(); err != nil {
		t.Errorf("ExplainWait and DrainTimeout of 0: %v", err)
	}
}
