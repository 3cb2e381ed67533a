package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/internal/shmem"
	"github.com/gorun/gorun/transport/internal/world"
)

// lazyMesh starts n transports on loopback and gives each the others'
// addresses and hosts (host[r] names rank r's host; nil: all unknown),
// without connecting.
func lazyMesh(t *testing.T, n int, host []string, tweak func(r int, c *Config)) []*Mesh {
	t.Helper()
	ts := listenAll(t, n, func(r int, c *Config) {
		if host != nil {
			c.HostKey = host[r]
		}
		if tweak != nil {
			tweak(r, c)
		}
	})
	peers := make([]Peer, n)
	for r, tr := range ts {
		peers[r].Addr = tr.Addr().String()
		if host != nil {
			peers[r].Host = tr.HostKey()
		}
	}
	for _, tr := range ts {
		if err := tr.SetPeers(peers); err != nil {
			t.Fatal(err)
		}
	}
	return ts
}

func connected(tr *Mesh) []int { return tr.connectedPeers() }

// ringPass sends one frame from every rank to its right neighbour and
// checks that each rank receives its left neighbour's.
func ringPass(t *testing.T, ts []*Mesh, seq uint32) {
	t.Helper()
	n := len(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Appendf(nil, "%d from %d", seq, r)
			if err := tr.Send(ctx, (r+1)%n, transport.Header{Seq: seq}, msg); err != nil {
				errs[r] = err
				return
			}
			f, err := tr.Recv(ctx, (r+n-1)%n)
			if err != nil {
				errs[r] = err
				return
			}
			if want := fmt.Sprintf("%d from %d", seq, (r+n-1)%n); string(f.Payload) != want || f.Seq != seq {
				errs[r] = fmt.Errorf("rank %d got %q, want %q", r, f.Payload, want)
			}
			f.Release()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestConnectOnFirstUse: ranks that only pass frames around a ring hold
// two connections each, whatever the job's size; shared memory is offered
// only between ranks the placement puts on one host, and used there.
func TestConnectOnFirstUse(t *testing.T) {
	shmDir(t)
	host := []string{"a", "a", "a", "b", "b", "b", "c", "c"}
	ts := lazyMesh(t, len(host), host, nil)
	for _, tr := range ts {
		if got := connected(tr); len(got) != 0 {
			t.Fatalf("rank %d connected to %v before any frame", tr.Rank(), got)
		}
	}
	ringPass(t, ts, 1)
	ringPass(t, ts, 2)
	n := len(ts)
	offers := 0
	for r, tr := range ts {
		left, right := (r+n-1)%n, (r+1)%n
		if got, want := connected(tr), slices.Sorted(slices.Values([]int{left, right})); !slices.Equal(got, want) {
			t.Fatalf("rank %d connected to %v, want its neighbours %v", r, got, want)
		}
		var wantShm []int
		for _, p := range []int{left, right} {
			if host[p] == host[r] && !slices.Contains(wantShm, p) {
				wantShm = append(wantShm, p)
			}
		}
		slices.Sort(wantShm)
		if got := tr.sharedMemoryPeers(); !slices.Equal(got, wantShm) {
			t.Fatalf("rank %d shares memory with %v, want %v", r, got, wantShm)
		}
		var wantLocal []int
		for p := range host {
			if p != r && host[p] == host[r] {
				wantLocal = append(wantLocal, p)
			}
		}
		if got := tr.LocalPeers(); !slices.Equal(got, wantLocal) {
			t.Fatalf("rank %d: local peers %v, want %v (from the placement)", r, got, wantLocal)
		}
		offers += tr.offerCount()
	}
	// One offer per connected pair on one host; none across hosts.
	pairs := 0
	for r := range n {
		if host[r] == host[(r+1)%n] {
			pairs++
		}
	}
	if offers != pairs {
		t.Fatalf("%d shared memory offers, want %d (one per neighbouring pair on one host, none across hosts)", offers, pairs)
	}
}

// TestConcurrentFirstUse: every rank sends to every other at once, from
// several goroutines per pair, so both ranks of every pair reach for the
// connection together: each pair ends with one connection, and every
// frame arrives in order.
func TestConcurrentFirstUse(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		for _, shm := range []bool{false, true} {
			t.Run(fmt.Sprintf("n%d/shm=%v", n, shm), func(t *testing.T) {
				ts := lazyMesh(t, n, nil, func(r int, c *Config) { c.Shm = shm })
				exchange(t, ts, randomMsgs(uint64(n), 0, 1, 100, 70_000))
				for _, tr := range ts {
					if got := connected(tr); len(got) != n-1 {
						t.Fatalf("rank %d connected to %v, want every other rank once", tr.Rank(), got)
					}
					if err := tr.Err(); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// TestShmOfferTimesOut: an offer whose answer does not come in time is
// dropped; the pair connects over TCP, one warning says so, and the frames
// arrive.
func TestShmOfferTimesOut(t *testing.T) {
	dir := shmDir(t)
	var logs logBuf
	ts := lazyMesh(t, 2, []string{"a", "a"}, func(r int, c *Config) {
		c.HandshakeTimeout = 200 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if r == 1 {
			c.shmAnswerDelay = 600 * time.Millisecond
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts[0].Send(ctx, 1, transport.Header{Seq: 7}, []byte("after a timed-out offer")); err != nil {
		t.Fatal(err)
	}
	f, err := ts[1].Recv(ctx, 0)
	if err != nil || string(f.Payload) != "after a timed-out offer" {
		t.Fatalf("got %q, %v", f.Payload, err)
	}
	f.Release()
	if got := ts[0].sharedMemoryPeers(); len(got) != 0 {
		t.Fatalf("rank 0 shares memory with %v after its offer timed out", got)
	}
	if n := strings.Count(logs.String(), "shared memory offer timed out"); n != 1 {
		t.Fatalf("want one warning, got %d:\n%s", n, logs.String())
	}
	for _, tr := range ts {
		if err := tr.Err(); err != nil {
			t.Fatalf("rank %d failed: %v", tr.Rank(), err)
		}
	}
	time.Sleep(700 * time.Millisecond) // the acceptor's abandoned attempt ends
	noSegments(t, dir, testJob)
}

// TestAbortFloods: an abort reaches ranks that never talked to the rank
// that gave up, through the ranks that did, naming the rank it came from.
func TestAbortFloods(t *testing.T) {
	ts := lazyMesh(t, 6, nil, nil)
	ringPass(t, ts, 1)
	ts[0].Abort(fmt.Errorf("rank 0 gives up: %w", transport.ErrSizeMismatch))
	for _, r := range []int{2, 3, 4} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ts[r].Recv(ctx, (r+5)%6)
		cancel()
		var re *transport.RemoteError
		if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, transport.ErrSizeMismatch) || !strings.Contains(err.Error(), "rank 0 gives up") {
			t.Fatalf("rank %d (not connected to rank 0): got %v, want rank 0's abort", r, err)
		}
	}
}

// TestGossipVerdictUnconnected: gossip's verdict on a peer this rank has
// no connection to is checked by connecting: a live peer is kept, a gone
// one lost within ConfirmTimeout.
func TestGossipVerdictUnconnected(t *testing.T) {
	var logs logBuf
	ts := lazyMesh(t, 3, nil, func(r int, c *Config) {
		c.ConfirmTimeout, c.WatchAll = 300*time.Millisecond, true
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	ts[0].PeerLost(1, "declared dead by gossip")
	proctest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "answered a connection; keeping it") }, "rank 0 keeps rank 1 on its answer to a probe")
	if err := ts[0].Err(); err != nil {
		t.Fatalf("a live rank was lost: %v", err)
	}
	ts[2].Close()
	start := time.Now()
	ts[0].PeerLost(2, "declared dead by gossip")
	select {
	case <-ts[0].Failed():
	case <-time.After(15 * time.Second): // 300 ms, stretched by a loaded machine up to 9 s
		t.Fatal("a closed rank was not lost")
	}
	var pl *transport.PeerLostError
	if err := ts[0].Err(); !errors.As(err, &pl) || pl.Rank != 2 {
		t.Fatalf("got %v, want rank 2 lost", err)
	}
	t.Logf("unconnected rank lost %v after gossip's verdict", time.Since(start))
}

// TestGossipVerdictRecorded: without WatchAll, gossip's verdict on an
// unconnected peer fails nothing by itself (the peer may have finished
// and left), but connecting to that peer then fails at once, naming it,
// if it does not answer; a live one (gossip was wrong) is kept.
func TestGossipVerdictRecorded(t *testing.T) {
	// A short confirmation, which a loaded test machine may stretch
	// (liveness.DefaultPolicy) up to 1.5 s.
	ts := lazyMesh(t, 4, nil, func(r int, c *Config) { c.ConfirmTimeout = 50 * time.Millisecond })
	ts[0].PeerLost(3, "declared dead by gossip")
	ringPassPair(t, ts[0], ts[3])
	ts[2].Close()
	ts[0].PeerLost(2, "declared dead by gossip")
	ringPassPair(t, ts[0], ts[1])
	if err := ts[0].Err(); err != nil {
		t.Fatalf("failed on an unconnected rank's departure: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := ts[0].Recv(ctx, 2)
	var pl *transport.PeerLostError
	if !errors.As(err, &pl) || pl.Rank != 2 || !strings.Contains(err.Error(), "declared dead by gossip") || time.Since(start) > 4*time.Second {
		t.Fatalf("got %v after %v, want rank 2 lost within the confirmation window, not ConnectTimeout", err, time.Since(start))
	}
}

func ringPassPair(t *testing.T, a, b *Mesh) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Send(ctx, b.Rank(), transport.Header{}, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	f, err := b.Recv(ctx, a.Rank())
	if err != nil || string(f.Payload) != "hi" {
		t.Fatalf("got %q, %v", f.Payload, err)
	}
	f.Release()
}

// TestConnectTimeout: a peer that never answers (its address listens but
// nothing accepts) is lost once ConnectTimeout has passed, by name.
func TestConnectTimeout(t *testing.T) {
	ts := lazyMesh(t, 2, nil, func(r int, c *Config) {
		c.ConnectTimeout, c.HandshakeTimeout, c.DialTimeout = 700*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	})
	ts[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ts[0].Send(ctx, 1, transport.Header{}, []byte("x"))
	var pl *transport.PeerLostError
	if !errors.As(err, &pl) || pl.Rank != 1 || !strings.Contains(err.Error(), "no connection to it within") {
		t.Fatalf("got %v, want rank 1 lost for want of a connection", err)
	}
}

func TestRingBytesFor(t *testing.T) {
	for _, c := range []struct{ explicit, local, want int }{
		{0, 1, shmem.MaxRingBytes}, {0, 2, shmem.MaxRingBytes}, {0, 3, 8 << 20}, {0, 4, 4 << 20}, {0, 5, 4 << 20},
		{0, 6, 2 << 20}, {0, 9, 2 << 20},
		{0, 10, 1 << 20}, {0, 17, 1 << 20}, {0, 18, 512 << 10}, {0, 33, 512 << 10}, {0, 64, 256 << 10},
		{0, 256, 64 << 10}, {0, 4096, 64 << 10}, {5000, 64, 8192},
	} {
		got := ringBytesFor(c.explicit, 0, c.local)
		if got != c.want {
			t.Errorf("ringBytesFor(%d, %d local) = %d, want %d", c.explicit, c.local, got, c.want)
		}
		if c.explicit == 0 && c.local <= 257 && got*(c.local-1) > shmem.DefaultBudget {
			t.Errorf("%d local ranks: %d byte rings exceed the budget", c.local, got)
		}
	}
}

// TestRevive: in an elastic job, rank 1 vanishes (no goodbye); its
// neighbours lose it (over shared memory and over TCP), and its restarted
// process, listening elsewhere, takes its place once they Revive it:
// frames pass again both ways, the old process's broken connections
// blame no one afterwards, and Lost no longer names it.
func TestRevive(t *testing.T) {
	const n = 3
	host := []string{"a", "a", "b"} // 0-1 share memory, 1-2 use TCP
	var mu sync.Mutex
	lost := map[int][]int{} // by reporting rank
	tweak := func(r int, c *Config) {
		c.Elastic, c.ExplainWait = true, 10*time.Millisecond
		c.OnPeerLost = func(peer int, _ string) {
			mu.Lock()
			lost[r] = append(lost[r], peer)
			mu.Unlock()
		}
	}
	ts := lazyMesh(t, n, host, tweak)
	ringPass(t, ts, 1)
	if sp := ts[0].sharedMemoryPeers(); !slices.Equal(sp, []int{1}) {
		t.Fatalf("rank 0 shares memory with %v, want [1]", sp)
	}
	old := ts[1]
	old.ln.Close()
	for _, pc := range old.peers() {
		pc.c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range []int{0, 2} {
		_, err := ts[r].Recv(ctx, 1)
		var pl *transport.PeerLostError
		if !errors.As(err, &pl) || pl.Rank != 1 {
			t.Fatalf("rank %d: Recv from the vanished rank: %v, want its PeerLostError", r, err)
		}
		if _, ok := ts[r].Lost()[1]; !ok {
			t.Fatalf("rank %d: Lost() = %v, want rank 1 in it", r, ts[r].Lost())
		}
	}
	// Its successor, with the others' addresses.
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret, cfg.ListenAddr, cfg.HostKey = 1, n, testJob, testSecret, "127.0.0.1:0", host[1]
	tweak(1, &cfg)
	nb, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Close() })
	peers := make([]Peer, n)
	for r, tr := range ts {
		peers[r] = Peer{Addr: tr.Addr().String(), Host: tr.HostKey()}
	}
	peers[1] = Peer{Addr: nb.Addr().String(), Host: nb.HostKey()}
	if err := nb.SetPeers(peers); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 2} {
		if err := ts[r].Revive(1, peers[1]); err != nil {
			t.Fatal(err)
		}
	}
	ts[1] = nb
	for seq := uint32(2); seq < 6; seq++ {
		ringPass(t, ts, seq)
	}
	if sp := ts[0].sharedMemoryPeers(); !slices.Equal(sp, []int{1}) {
		t.Fatalf("rank 0 shares memory with %v after the revival, want [1]", sp)
	}
	old.Close()
	time.Sleep(100 * time.Millisecond) // ten ExplainWaits: a late blame would have come
	ringPass(t, ts, 6)
	mu.Lock()
	defer mu.Unlock()
	for _, r := range []int{0, 2} {
		if !slices.Equal(lost[r], []int{1}) {
			t.Errorf("rank %d was told of losses %v, want [1] once", r, lost[r])
		}
		if _, ok := ts[r].Lost()[1]; ok {
			t.Errorf("rank %d: Lost() = %v after the revival", r, ts[r].Lost())
		}
	}
	if err := (&Mesh{cfg: Config{Rank: 0, Size: 2}, w: world.New(0, 2)}).Revive(1, Peer{}); err == nil {
		t.Error("Revive on a transport that is not elastic must fail")
	}
}

// TestReviveKeepsSuccessor: the restarted process of rank 1 connects to
// rank 0, and sends, before rank 0 hears of it (Revive comes after): the
// connection and the frame it brought stay, and no second connection is
// made.
func TestReviveKeepsSuccessor(t *testing.T) {
	ts := lazyMesh(t, 2, []string{"a", "b"}, func(r int, c *Config) { c.Elastic = true })
	ts[1].Close() // the first process, gone without a word to rank 0
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret, cfg.ListenAddr, cfg.HostKey, cfg.Elastic = 1, 2, testJob, testSecret, "127.0.0.1:0", "b", true
	nb, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Close() })
	peers := []Peer{{Addr: ts[0].Addr().String(), Host: ts[0].HostKey()}, {Addr: nb.Addr().String(), Host: nb.HostKey()}}
	if err := nb.SetPeers(peers); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nb.Send(ctx, 0, transport.Header{Seq: 7}, []byte("early")); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 5*time.Second, func() bool { return slices.Equal(ts[0].connectedPeers(), []int{1}) }, "rank 0 accepts the successor")
	first := ts[0].conns[1].Load()
	if err := ts[0].Revive(1, peers[1]); err != nil {
		t.Fatal(err)
	}
	if ts[0].conns[1].Load() != first {
		t.Fatal("Revive dropped the successor's own connection")
	}
	f, err := ts[0].Recv(ctx, 1)
	if err != nil || string(f.Payload) != "early" {
		t.Fatalf("the successor's frame from before the Revive: %q, %v", f.Payload, err)
	}
	f.Release()
	if err := ts[0].Send(ctx, 1, transport.Header{Seq: 8}, []byte("back")); err != nil {
		t.Fatal(err)
	}
	if f, err := nb.Recv(ctx, 0); err != nil || string(f.Payload) != "back" {
		t.Fatalf("successor got %q, %v", f.Payload, err)
	}
}

// TestSuccessorsByPort: an accepted connection from a peer's host is the
// restarted process's only if its hello named the port the new process
// listens on: the old process's connection on the same host, not yet
// known broken, is not taken for it (a rejoin under load fenced the new
// process for a write that failed on the old one's connection).
func TestSuccessorsByPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := &Mesh{}
	old := &peerConn{peer: 1, c: c, port: 40001}
	if tr.successors(old, Peer{Addr: "127.0.0.1:40002"}) {
		t.Fatal("the old process's connection (port 40001) was taken for the new one at port 40002")
	}
	fresh := &peerConn{peer: 1, c: c, port: 40002}
	if !tr.successors(fresh, Peer{Addr: "127.0.0.1:40002"}) {
		t.Fatal("the new process's own connection was not taken")
	}
	if tr.successors(fresh, Peer{Addr: "10.1.2.3:40002"}) {
		t.Fatal("a connection from another host was taken")
	}
	fresh.broken.Store(true)
	if tr.successors(fresh, Peer{Addr: "127.0.0.1:40002"}) {
		t.Fatal("a broken connection was taken")
	}
}
