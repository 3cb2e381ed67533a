package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/jobtest"
)

func tcpConfigs(t testing.TB, n int, secret string) []Config {
	seeds := jobtest.LoopbackAddrs(t, n)
	cfgs := make([]Config, n)
	for r := range n {
		c := DefaultConfig()
		c.Rank, c.Size, c.JobID, c.Secret = r, n, "testjob", []byte(secret)
		c.Seeds, c.AdvertiseAddr, c.DataListen = seeds, "127.0.0.1", "127.0.0.1:0"
		_, port, _ := net.SplitHostPort(seeds[r])
		fmt.Sscan(port, &c.GossipPort)
		c.JoinTimeout = 10 * time.Second
		// Up to 9 ranks in one process under -race on 2 cores: slow
		// gossip timers, so that a starved process does not declare its
		// own ranks dead (these tests are not about failure detection).
		c.ProbeTimeout, c.SuspicionMult = 500*time.Millisecond, 8
		cfgs[r] = c
	}
	return cfgs
}

func newAll(cfgs []Config) ([]*Comm, []error) {
	comms := make([]*Comm, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The rank's goroutines carry its number, as a profile label,
			// for a dump of them (dumpGoroutines).
			pprof.Do(context.Background(), rankLabel(r), func(ctx context.Context) {
				comms[r], errs[r] = New(ctx, cfgs[r])
			})
		}()
	}
	wg.Wait()
	return comms, errs
}

func rankLabel(r int) pprof.LabelSet { return pprof.Labels("rank", strconv.Itoa(r)) }

// dumpGoroutines writes every goroutine's stack, grouped and labelled by
// rank, to a file, and says where: what a failure at many ranks in one
// process leaves to read (which rank's reader waited, and on what).
func dumpGoroutines(t *testing.T) {
	f, err := os.CreateTemp("", "gorun-"+t.Name()+"-goroutines-*.txt")
	if err != nil {
		t.Logf("no goroutine dump: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		t.Logf("goroutine dump: %v", err)
	}
	t.Logf("goroutines at the first failure: %s", f.Name())
}

// TestNewOverTCP joins 4 ranks by gossip over loopback, runs collectives
// over TCP, and checks that Close leaves no goroutine behind.
func TestNewOverTCP(t *testing.T) {
	before := runtime.NumGoroutine()
	comms, errs := newAll(tcpConfigs(t, 4, "a-secret-of-the-right-length"))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	const n = 300007
	var wg sync.WaitGroup
	out := make([][]int64, 4)
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]int64, n)
			for i := range buf {
				buf[i] = int64(i * (c.Rank() + 1))
			}
			if err := AllReduce(context.Background(), c, buf, Sum); err != nil {
				t.Error(err)
			}
			if err := c.Barrier(context.Background()); err != nil {
				t.Error(err)
			}
			out[c.Rank()] = buf
		}()
	}
	wg.Wait()
	for r := range comms {
		for i := range n {
			if out[r][i] != int64(i*10) {
				t.Fatalf("rank %d [%d] = %d, want %d", r, i, out[r][i], i*10)
			}
		}
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMissingRankNamed(t *testing.T) {
	cfgs := tcpConfigs(t, 3, "a-secret-of-the-right-length")
	for r := range cfgs {
		cfgs[r].JoinTimeout = 1500 * time.Millisecond
	}
	_, errs := newAll(cfgs[:2])
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks [2] never appeared") {
			t.Fatalf("rank %d: got %v, want a timeout naming rank 2", r, err)
		}
	}
}

func TestWrongSecret(t *testing.T) {
	cfgs := tcpConfigs(t, 3, "a-secret-of-the-right-length")
	cfgs[2].Secret = []byte("some-other-secret-entirely")
	for r := range cfgs {
		cfgs[r].JoinTimeout = 2 * time.Second
	}
	comms, errs := newAll(cfgs)
	for r, err := range errs {
		if err == nil {
			comms[r].Close()
			t.Fatalf("rank %d joined a job with a mismatched secret", r)
		}
		t.Logf("rank %d: %v", r, err)
	}
	if !strings.Contains(errs[2].Error(), "ranks [0 1] never appeared") || !strings.Contains(errs[2].Error(), "wrong job secret") {
		t.Fatalf("rank 2: %v", errs[2])
	}
	for _, r := range []int{0, 1} {
		if !strings.Contains(errs[r].Error(), "ranks [2] never appeared") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
}

// TestCloseDuringCollective: under both strategies, Close makes a
// collective blocked in another goroutine return ErrClosed (not a lost
// peer, not the hub client's own error), and so does every later call.
func TestCloseDuringCollective(t *testing.T) {
	for _, strategy := range []string{StrategyRing, StrategyHub} {
		t.Run(strategy, func(t *testing.T) {
			comms := strategyComms(t, 3, strategy)
			c := comms[0]
			blocked := make(chan error, 1)
			go func() { blocked <- AllReduce(context.Background(), c, make([]float32, 1000), Sum) }()
			// Rank 0 alone is in the all-reduce: it waits for ranks 1 and 2.
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-blocked:
				t.Fatalf("all-reduce returned before Close: %v", err)
			default:
			}
			c.Close()
			if err := <-blocked; !errors.Is(err, ErrClosed) || errors.Is(err, ErrPeerLost) {
				t.Fatalf("got %v, want ErrClosed", err)
			}
			if err := c.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("a call after Close: %v", err)
			}
		})
	}
}

// TestWaitForTurnHonoursContext: a call that waits for another
// goroutine's collective returns when its context ends, and since this
// rank will never issue the collective its peers expect next, every rank's
// call fails instead of hanging.
func TestWaitForTurnHonoursContext(t *testing.T) {
	comms := strategyComms(t, 3, StrategyRing)
	blocked := make(chan error, 1)
	go func() { blocked <- AllReduce(context.Background(), comms[0], make([]float32, 1000), Sum) }()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := comms[0].Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call waiting for its turn: got %v, want its context's deadline", err)
	}
	if err := <-blocked; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the call it waited for: got %v, want the abort it caused", err)
	}
	for _, c := range comms[1:] {
		// Rank 0's all-reduce frames may reach it before the abort does.
		if err := c.Barrier(context.Background()); !errors.Is(err, ErrAborted) && !errors.Is(err, ErrSizeMismatch) {
			t.Fatalf("rank %d: got %v, want ErrAborted (or the mismatch with rank 0's all-reduce)", c.Rank(), err)
		}
	}
}

func strategyComms(t *testing.T, n int, strategy string) []*Comm {
	t.Helper()
	cfgs := tcpConfigs(t, n, "a-secret-of-the-right-length")
	for i := range cfgs {
		cfgs[i].Strategy, cfgs[i].CloseTimeout = strategy, time.Second
	}
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(comms) })
	return comms
}

// TestLoopbackJobListensOnLoopback: ranks that others reach at a loopback
// address (a job on one host) bind the listeners that would take any
// address to it, gossip's and the data plane's; other addresses, and a
// DataListen of one host, are left as configured.
func TestLoopbackJobListensOnLoopback(t *testing.T) {
	for _, c := range []struct {
		advertise, listen  string
		wantData, wantBind string
	}{
		{"127.0.0.1", "0.0.0.0:0", "127.0.0.1:0", "127.0.0.1"},
		{"127.0.0.2", ":7000", "127.0.0.2:7000", "127.0.0.2"},
		{"::1", "[::]:0", "[::1]:0", "::1"},
		{"10.1.2.3", "0.0.0.0:0", "0.0.0.0:0", "0.0.0.0"},
		{"127.0.0.1", "10.1.2.3:0", "10.1.2.3:0", "0.0.0.0"},
		{"node7", "0.0.0.0:0", "0.0.0.0:0", "0.0.0.0"},
	} {
		cfg := DefaultConfig()
		cfg.AdvertiseAddr, cfg.DataListen = c.advertise, c.listen
		tc := transportConfig(cfg, nil)
		mc := membershipConfig(cfg, "", "", nil)
		if tc.ListenAddr != c.wantData || mc.BindAddr != c.wantBind {
			t.Errorf("advertise %s, DataListen %s: data on %s, gossip on %s; want %s and %s", c.advertise, c.listen, tc.ListenAddr, mc.BindAddr, c.wantData, c.wantBind)
		}
	}
	cfgs := tcpConfigs(t, 2, "a-secret-of-the-right-length")
	for r := range cfgs {
		cfgs[r].DataListen = DefaultConfig().DataListen
	}
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		defer c.Close()
		a, ok := c.tr.(interface{ Addr() net.Addr })
		if !ok {
			t.Fatalf("rank %d: the transport %T has no address", c.Rank(), c.tr)
		}
		if ip := a.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			t.Errorf("rank %d: the data plane listens on %v", c.Rank(), a.Addr())
		}
	}
	// And they talk: a sum over the data plane.
	if err := runAll(comms, func(c *Comm) error {
		b := []float32{float32(c.Rank() + 1)}
		if err := AllReduce(context.Background(), c, b, Sum); err != nil {
			return err
		}
		if b[0] != 3 {
			return fmt.Errorf("sum %v, want 3", b[0])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
