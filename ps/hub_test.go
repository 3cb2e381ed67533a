package ps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/liveness"
	"github.com/gorun/gorun/transport/mem"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
)

const testSecret = "a-hub-secret-of-enough-length"

// startHubs starts k hubs for n workers on loopback.
func startHubs(t testing.TB, k, n int, elastic bool) ([]*Hub, []string) {
	t.Helper()
	return startHubsShm(t, k, n, elastic, shm.Options{})
}

// startHubsShm starts hubs that accept shared memory as shm says.
func startHubsShm(t testing.TB, k, n int, elastic bool, shm shm.Options) ([]*Hub, []string) {
	t.Helper()
	var hubs []*Hub
	var addrs []string
	for i := range k {
		cfg := DefaultHubConfig()
		cfg.Index, cfg.Workers, cfg.JobID, cfg.Secret = i, n, "job", []byte(testSecret)
		cfg.ListenAddr, cfg.Elastic, cfg.Shm = "127.0.0.1:0", elastic, shm
		h, err := NewHub(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hubs = append(hubs, h)
		addrs = append(addrs, h.Addr().String())
	}
	return hubs, addrs
}

// startMemHubs starts k hubs for n workers on in-memory listeners, for
// tests in a synctest bubble (a socket does not block durably, a pipe
// does), and returns the dial function that reaches them by address.
func startMemHubs(t testing.TB, k, n int, elastic bool) ([]*Hub, []string, wire.DialFunc) {
	t.Helper()
	var hubs []*Hub
	var addrs []string
	lns := map[string]*mem.Listener{}
	for i := range k {
		addr := fmt.Sprintf("in-memory-hub-%d", i)
		ln := mem.NewListener(addr)
		cfg := DefaultHubConfig()
		cfg.Index, cfg.Workers, cfg.JobID, cfg.Secret = i, n, "job", []byte(testSecret)
		cfg.Listener, cfg.Elastic = ln, elastic
		h, err := NewHub(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hubs, lns[addr] = append(hubs, h), ln
		addrs = append(addrs, addr)
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		ln, ok := lns[addr]
		if !ok {
			return nil, fmt.Errorf("no in-memory hub at %q", addr)
		}
		return ln.Dial(ctx)
	}
	return hubs, addrs, dial
}

// dialAllMem connects n workers to in-memory hubs (startMemHubs).
func dialAllMem(t testing.TB, n int, addrs []string, dial wire.DialFunc, partBytes int) []*Client {
	t.Helper()
	return dialAllWith(t, n, addrs, partBytes, func(cfg *ClientConfig) { cfg.Dial = dial })
}

func clientConfig(w, n int, addrs []string, partBytes int) ClientConfig {
	cfg := DefaultClientConfig()
	cfg.Worker, cfg.Workers, cfg.Hubs, cfg.JobID, cfg.Secret = w, n, addrs, "job", []byte(testSecret)
	cfg.PartitionBytes = partBytes
	// HubTimeout stays the default: under a loaded machine's race-detector
	// runs a hub summing a 200 000-element round answered no ping for over
	// a second, and the test took it for lost. The tests of a frozen hub
	// run on synctest's clock, where any timeout is exact.
	return cfg
}

func dialAll(t testing.TB, n int, addrs []string, partBytes int) []*Client {
	t.Helper()
	return dialAllShm(t, n, addrs, partBytes, shm.Options{})
}

func dialAllShm(t testing.TB, n int, addrs []string, partBytes int, shm shm.Options) []*Client {
	t.Helper()
	return dialAllWith(t, n, addrs, partBytes, func(cfg *ClientConfig) { cfg.Shm = shm })
}

// dialAllWith connects n workers, each with clientConfig changed by set.
func dialAllWith(t testing.TB, n int, addrs []string, partBytes int, set func(*ClientConfig)) []*Client {
	t.Helper()
	cs := make([]*Client, n)
	for w := range n {
		cfg := clientConfig(w, n, addrs, partBytes)
		set(&cfg)
		c, err := Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[w] = c
	}
	return cs
}

// each runs f for every worker concurrently and joins the errors.
func each(n int, f func(w int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = f(w)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shmSupported reports whether this platform has the shared memory of
// shm.Offer.
func shmSupported() bool { return runtime.GOOS == "linux" }

func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// TestHubBSPMatchesTable runs BSP training rounds through real hubs over
// TCP (keys cut into many partitions over 1 or 3 hubs) and compares every
// worker's pulled values with a Table fed the same pushes.
func TestHubBSPMatchesTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{1, 2, 3, 5} {
		for _, k := range []int{1, 3} {
			for _, mode := range []UpdateMode{Sum, SGD} {
				t.Run(fmt.Sprintf("n%d/k%d/mode%d", n, k, mode), func(t *testing.T) {
					// Odd sizes run over shared memory (hubs and workers on
					// one host), even ones over TCP.
					var so shm.Options
					if n%2 == 1 && shmSupported() {
						so = shm.Options{Enabled: true, Dir: t.TempDir(), RingBytes: 8192}
					}
					hubs, addrs := startHubsShm(t, k, n, false, so)
					cs := dialAllShm(t, n, addrs, 64, so) // 16 float32s per partition
					for w, c := range cs {
						if got := len(c.SharedMemoryHubs()); so.Enabled != (got == k) || !so.Enabled && got != 0 {
							t.Fatalf("worker %d reaches hubs %v over shared memory", w, c.SharedMemoryHubs())
						}
					}
					for i, h := range hubs {
						// A hub counts a link once its answer is written;
						// the worker may be first to know.
						for deadline := time.Now().Add(5 * time.Second); h.Stats().ShmLinks != n && so.Enabled && time.Now().Before(deadline); {
							time.Sleep(time.Millisecond)
						}
						if got := h.Stats().ShmLinks; so.Enabled != (got == n) {
							t.Fatalf("hub %d has %d workers on shared memory", i, got)
						}
					}
					keys := map[string]int{"w": 1 + rng.IntN(100), "b": rng.IntN(3), "big": 37 + rng.IntN(80)}
					names := []string{"w", "b", "big"}
					ref := NewTable(n)
					for _, name := range names {
						kc := KeyConfig{Len: keys[name], Update: mode, LR: 0.1, Momentum: 0.9}
						kc.Init = make([]float64, kc.Len)
						for i := range kc.Init {
							kc.Init[i] = rng.NormFloat64()
						}
						if err := ref.Declare(name, kc); err != nil {
							t.Fatal(err)
						}
						if err := each(n, func(w int) error { return cs[w].Declare(context.Background(), name, kc) }); err != nil {
							t.Fatal(err)
						}
					}
					for round := range 4 {
						grads := make([]map[string][]float64, n)
						samples := make([]int, n)
						for w := range n {
							samples[w] = 1 + rng.IntN(9)
							grads[w] = map[string][]float64{}
							for _, name := range names {
								g := make([]float64, keys[name])
								for i := range g {
									g[i] = rng.NormFloat64()
								}
								grads[w][name] = g
								if err := ref.Push(name, w, round, g, samples[w]); err != nil {
									t.Fatal(err)
								}
							}
						}
						got := make([]map[string][]float64, n)
						err := each(n, func(w int) error {
							got[w] = map[string][]float64{}
							var hs []*Handle
							for _, name := range names {
								dst := make([]float64, keys[name])
								got[w][name] = dst
								hs = append(hs, PushPull(cs[w], name, grads[w][name], samples[w], dst))
							}
							for _, h := range hs {
								if err := h.Wait(context.Background()); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							t.Fatal(err)
						}
						for _, name := range names {
							want, ready, _, err := ref.Pull(name, 0, round+1)
							if err != nil || !ready {
								t.Fatalf("reference pull: %v %v", ready, err)
							}
							for w := range n {
								for i := range want {
									if !closeTo(got[w][name][i], want[i]) {
										t.Fatalf("round %d worker %d %s[%d] = %v, want %v", round, w, name, i, got[w][name][i], want[i])
									}
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestHubFloat32Keys pushes float32 gradients: the wire carries float32
// and the sums match a float64 reference within float32 rounding.
func TestHubFloat32Keys(t *testing.T) {
	_, addrs := startHubs(t, 2, 3, false)
	cs := dialAll(t, 3, addrs, 40)
	const n = 53
	if err := each(3, func(w int) error { return cs[w].Declare(context.Background(), "g", KeyConfig{Len: n}) }); err != nil {
		t.Fatal(err)
	}
	got := make([][]float32, 3)
	err := each(3, func(w int) error {
		g := make([]float32, n)
		for i := range g {
			g[i] = float32(w*1000 + i)
		}
		got[w] = make([]float32, n)
		return PushPull(cs[w], "g", g, 1, got[w]).Wait(context.Background())
	})
	if err != nil {
		t.Fatal(err)
	}
	for w := range 3 {
		for i := range n {
			if want := float32(3000 + 3*i); got[w][i] != want {
				t.Fatalf("worker %d [%d] = %v, want %v", w, i, got[w][i], want)
			}
		}
	}
}

// TestHubSSPBoundUnderDelays: each worker pushes a one-hot 1 into its own
// element at every clock, with random delays. A pull at clock c with
// staleness s must see at least c-s pushes from every worker (all clocks
// <= c-s-1) and never more than the pushes made so far.
func TestHubSSPBoundUnderDelays(t *testing.T) {
	for _, s := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("s%d", s), func(t *testing.T) {
			const n, clocks = 4, 12
			_, addrs := startHubs(t, 2, n, false)
			cs := dialAll(t, n, addrs, 8) // one float64 per partition... two hubs
			if err := each(n, func(w int) error {
				return cs[w].Declare(context.Background(), "c", KeyConfig{Len: n, Staleness: s})
			}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			pushed := make([]int, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := each(n, func(w int) error {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(s)))
				for c := 1; c <= clocks; c++ {
					g := make([]float64, n)
					g[w] = 1
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
					mu.Lock()
					pushed[w]++ // before the push: the hub may apply it before Wait returns
					mu.Unlock()
					if err := Push(cs[w], "c", g, 1).Wait(ctx); err != nil {
						return err
					}
					v := make([]float64, n)
					if err := Pull(cs[w], "c", v).Wait(ctx); err != nil {
						return err
					}
					mu.Lock()
					snapshot := append([]int(nil), pushed...)
					mu.Unlock()
					for o := range n {
						if int(v[o]) < c-s {
							return fmt.Errorf("worker %d at clock %d saw %v pushes of worker %d, bound s=%d needs >= %d", w, c, v[o], o, s, c-s)
						}
						if int(v[o]) > snapshot[o] {
							return fmt.Errorf("worker %d saw %v pushes of worker %d, only %d made", w, v[o], o, snapshot[o])
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHubASPStraggler: worker 0 computes 7 ms per iteration, the others
// 1 ms, on synctest's clock over in-memory hubs, so that every time is
// exact. Under ASP the fast workers finish their 20 iterations at 20 ms,
// when the slow one has done 2; under BSP they finish with it, at 140 ms,
// as each of their rounds waits for its push.
func TestHubASPStraggler(t *testing.T) {
	const n, iters, fast, slow = 3, 20, time.Millisecond, 7 * time.Millisecond
	for _, mode := range []struct {
		name    string
		stale   int
		fastEnd time.Duration
	}{{"ASP", Async, iters * fast}, {"BSP", 0, iters * slow}} {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, addrs, dial := startMemHubs(t, 1, n, false)
				cs := dialAllMem(t, n, addrs, dial, 1<<10)
				if err := each(n, func(w int) error {
					return cs[w].Declare(context.Background(), "w", KeyConfig{Len: 4, Update: SGD, LR: 0.01, Staleness: mode.stale})
				}); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // on the bubble's clock
				defer cancel()
				start := time.Now()
				var mu sync.Mutex
				slowIters, slowAtFastEnd := 0, -1
				end := make([]time.Duration, n)
				err := each(n, func(w int) error {
					v := make([]float64, 4)
					for range iters {
						if w == 0 {
							time.Sleep(slow)
						} else {
							time.Sleep(fast)
						}
						if err := PushPull(cs[w], "w", []float64{1, 1, 1, 1}, 1, v).Wait(ctx); err != nil {
							return err
						}
						if w == 0 {
							mu.Lock()
							slowIters++
							mu.Unlock()
						}
					}
					end[w] = time.Since(start)
					if w != 0 {
						mu.Lock()
						slowAtFastEnd = slowIters
						mu.Unlock()
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if end[0] != iters*slow || end[1] != mode.fastEnd || end[2] != mode.fastEnd {
					t.Fatalf("workers finished at %v, want %v for the slow one and %v for the fast ones", end, iters*slow, mode.fastEnd)
				}
				// (Under BSP the slow worker's last answer and the fast ones'
				// come at one instant: its count may or may not have moved.)
				if want := int(iters * fast / slow); mode.stale == Async && slowAtFastEnd != want {
					t.Fatalf("the slow worker had done %d of %d iterations when the fast ones finished, want %d", slowAtFastEnd, iters, want)
				}
			})
		})
	}
}

// TestHubSharesFollowSpeed: worker 0 reports 4x the compute time per
// sample; the hub's shares converge to a 1:4:4 split of the batch.
func TestHubSharesFollowSpeed(t *testing.T) {
	const n, total = 3, 900
	_, addrs := startHubs(t, 1, n, false)
	cs := dialAll(t, n, addrs, 1<<10)
	shares := []int{total / n, total / n, total / n}
	for range 20 {
		next := make([]int, n)
		if err := each(n, func(w int) error {
			per := time.Millisecond
			if w == 0 {
				per *= 4
			}
			var err error
			next[w], err = cs[w].Share(context.Background(), total, shares[w], time.Duration(shares[w])*per)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		shares = next
	}
	want := []int{100, 400, 400}
	sum := 0
	for w := range n {
		sum += shares[w]
		if d := shares[w] - want[w]; d < -2 || d > 2 {
			t.Errorf("worker %d share %d, want about %d (all: %v)", w, shares[w], want[w], shares)
		}
	}
	if sum != total {
		t.Errorf("shares %v add up to %d, want %d", shares, sum, total)
	}
}

// kill drops a client's connections without a goodbye or last words, all
// at once, as a crash does.
func kill(c *Client) {
	c.failOnce.Do(func() { // so that nothing more is said
		c.err = errors.New("crashed")
		close(c.failed)
	})
	for _, h := range c.links() {
		_ = h.l.c.Close()
	}
	c.Close()
}

// TestHubLostWorker: a worker that dies mid-round is reported to the
// others with its number; with the elastic option the round completes
// from the survivors, weighted by the samples they pushed.
func TestHubLostWorker(t *testing.T) {
	for _, elastic := range []bool{false, true} {
		t.Run(fmt.Sprintf("elastic=%v", elastic), func(t *testing.T) {
			const n = 4
			hubs, addrs := startHubs(t, 2, n, elastic)
			cs := dialAll(t, n, addrs, 16)
			if err := each(n, func(w int) error {
				return cs[w].Declare(context.Background(), "w", KeyConfig{Len: 6, Update: SGD, LR: 1})
			}); err != nil {
				t.Fatal(err)
			}
			got := make([][]float64, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := each(n, func(w int) error {
				if w == 2 {
					kill(cs[2])
					return nil
				}
				g := []float64{float64(w), float64(w), float64(w), float64(w), float64(w), float64(w)}
				got[w] = make([]float64, 6)
				return PushPull(cs[w], "w", g, w+1, got[w]).Wait(ctx)
			})
			if !elastic {
				if err == nil || !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), "rank 2 lost") {
					t.Fatalf("got %v, want every survivor to name worker 2", err)
				}
				if strings.Count(err.Error(), "rank 2 lost") != 3 {
					t.Fatalf("not every survivor was told: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// weighted mean of survivors 0, 1, 3 with samples 1, 2, 4
			want := -(0*1 + 1*2 + 3*4) / 7.0
			for _, w := range []int{0, 1, 3} {
				for i, v := range got[w] {
					if !closeTo(v, want) {
						t.Fatalf("worker %d [%d] = %v, want %v", w, i, v, want)
					}
				}
			}
			if hubs[0].Stats().Removed != 1 {
				t.Errorf("hub stats %+v: want one worker removed", hubs[0].Stats())
			}
		})
	}
}

// TestHubLost: a hub that dies is reported by every worker waiting on
// it, by number and address (a frozen one: TestHubFrozen).
func TestHubLost(t *testing.T) {
	const n = 3
	hubs, addrs := startHubs(t, 2, n, false)
	cs := dialAll(t, n, addrs, 8)
	if err := each(n, func(w int) error { return cs[w].Declare(context.Background(), "w", KeyConfig{Len: 4}) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := each(n, func(w int) error {
		if w == 0 {
			hubs[1].Close()
			return nil
		}
		// A push-pull waits for round 0, which needs worker 0's push. (A
		// plain Pull at clock 0 is answered at once with the initial
		// value, which made this test depend on the hub closing first.)
		return PushPull(cs[w], "w", make([]float64, 4), 1, make([]float64, 4)).Wait(ctx)
	})
	// Each waiting worker names hub 1: from its own connection to it
	// (ErrHubLost), or from hub 0, which worker 0 told that hub 1 was lost
	// (worker 0's client saw the loss first and aborted: ErrAborted).
	if err == nil || strings.Count(err.Error(), "hub 1 at "+addrs[1]+" lost") != 2 ||
		!(errors.Is(err, ErrHubLost) || errors.Is(err, transport.ErrAborted)) {
		t.Fatalf("got %v, want both waiting workers to name hub 1", err)
	}
}

// TestHubFrozen: a hub that accepts and then never answers is lost when
// it has been silent for HubTimeout with a request outstanding, on an
// idle host; on a host with 5 times the runnable tasks its CPUs take (20
// on 2: the window stretches 5 times, as the transport's confirmation
// windows do) only after 5 HubTimeouts. On synctest's clock the
// watchdog's ticks (every HubTimeout/6) are exact: the loss comes at the
// first tick past the window, the seventh or the thirty-first.
func TestHubFrozen(t *testing.T) {
	for _, c := range []struct {
		name  string
		load  liveness.Load
		ticks int
	}{{"idle", liveness.Load{Runnable: 1, CPUs: 2}, 7}, {"busy", liveness.Load{Runnable: 20, CPUs: 2}, 31}} {
		t.Run(c.name, func(t *testing.T) { hubFrozen(t, c.load, c.ticks) })
	}
}

func hubFrozen(t *testing.T, load liveness.Load, ticks int) {
	synctest.Test(t, func(t *testing.T) {
		ln := mem.NewListener("frozen-hub")
		thaw := make(chan struct{})
		served := make(chan struct{})
		defer func() { ln.Close(); close(thaw); <-served }()
		go func() {
			defer close(served)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			if fakeHubAccept(c) == nil {
				<-thaw // reads nothing, says nothing
			}
		}()
		cfg := clientConfig(0, 1, []string{ln.Addr().String()}, 64)
		cfg.Dial = func(ctx context.Context, _ string) (net.Conn, error) { return ln.Dial(ctx) }
		cfg.load = func() liveness.Load { return load }
		c, err := Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		t0 := time.Now()
		err = c.Declare(context.Background(), "x", KeyConfig{Len: 1})
		took := time.Since(t0)
		want := time.Duration(ticks) * (cfg.HubTimeout / 6)
		if !errors.Is(err, ErrHubLost) || !strings.Contains(err.Error(), "no answer for "+want.Round(time.Millisecond).String()) || took != want {
			t.Fatalf("frozen hub: %v after %v, want ErrHubLost after %v", err, took, want)
		}
	})
}

// rawClient is an authenticated connection that sends hand-made frames.
func rawClient(t *testing.T, addr string, w, n int) (net.Conn, *wire.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := wire.DialHandshake(c, "job", []byte(testSecret), wire.Ends{From: w, To: HubTag, Size: n}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := shm.Offer(context.Background(), c, shm.Options{}); err != nil {
		t.Fatal(err)
	}
	return c, wire.NewReader(c, 1<<20)
}

// fakeHubAccept is a hand-made hub's side of a new connection: the
// handshake, and a refusal of shared memory.
func fakeHubAccept(c net.Conn) error {
	if _, err := wire.AcceptHandshake(c, "job", []byte(testSecret), func(wire.Ends) bool { return true }, time.Second); err != nil {
		return err
	}
	_, err := shm.Answer(context.Background(), c, shm.Options{})
	return err
}

func rawCall(t *testing.T, c net.Conn, r *wire.Reader, payload []byte) message {
	t.Helper()
	if _, err := c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, payload)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, p, err := r.Next(nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHubBadInput: garbage on the hub port, a malformed request, an
// unknown key, shape mismatches and a push from the wrong clock each get
// a clear error, and the hub goes on serving.
func TestHubBadInput(t *testing.T) {
	hubs, addrs := startHubs(t, 1, 2, false)
	// Garbage instead of a handshake.
	g, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	_, _ = g.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("\xff", 100)))
	g.Close()
	// A wrong secret.
	bad := clientConfig(0, 2, addrs, 64)
	bad.Secret = []byte("not-the-right-secret-at-all")
	bad.ConnectTimeout = 2 * time.Second
	if _, err := Dial(context.Background(), bad); !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("wrong secret: %v", err)
	}

	c, r := rawClient(t, addrs[0], 0, 2)
	m := rawCall(t, c, r, []byte("garbage that is no message"))
	if m.Type != msgError || m.Code != codeBadRequest || !strings.Contains(string(m.Data), "shorter than") {
		t.Fatalf("garbage message: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgPush, ID: 7, Key: "nope", DType: 2, Samples: 1, Data: make([]byte, 8)}).encode())
	if m.Type != msgError || m.ID != 7 || m.Code != codeUnknownKey || !strings.Contains(string(m.Data), `"nope"`) {
		t.Fatalf("unknown key: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgDeclare, ID: 8, Key: "k", Count: 3}).encode())
	if m.Type != msgReply || m.ID != 8 {
		t.Fatalf("declare: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgDeclare, ID: 9, Key: "k", Count: 4}).encode())
	if m.Code != codeShape || !strings.Contains(string(m.Data), "length 3") {
		t.Fatalf("redeclare with another length: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgPush, ID: 10, Key: "k", DType: 2, Samples: 1, Data: make([]byte, 16)}).encode())
	if m.Code != codeShape || !strings.Contains(string(m.Data), "has 3 elements, push from worker 0 has 2") {
		t.Fatalf("shape: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgPush, ID: 11, Key: "k", Clock: 5, DType: 2, Samples: 1, Data: make([]byte, 24)}).encode())
	if m.Code != codeClock {
		t.Fatalf("clock: %+v %q", m, m.Data)
	}
	m = rawCall(t, c, r, (&message{Type: msgPush, ID: 12, Key: "k", DType: 3, Samples: 1, Data: make([]byte, 12)}).encode())
	if m.Code != codeBadRequest || !strings.Contains(string(m.Data), "int32") {
		t.Fatalf("int key: %+v %q", m, m.Data)
	}
	// A collective round whose parts disagree between the two workers.
	c1, r1 := rawClient(t, addrs[0], 1, 2)
	round := func(w uint32, count uint64) []byte {
		return (&message{Type: msgRound, ID: 20 + w, Kind: kindReduce, Code: 1, DType: 4, Clock: 1, Count: count, N: 1, WantLen: 1, Data: make([]byte, 8)}).encode()
	}
	if _, err := c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, round(0, 1))); err != nil {
		t.Fatal(err)
	}
	m = rawCall(t, c1, r1, round(1, 2))
	if m.Code != codeMismatch || !strings.Contains(string(m.Data), "buffer length") {
		t.Fatalf("mismatch: %+v %q", m, m.Data)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, p, err := r.Next(nil); err != nil {
		t.Fatal(err)
	} else if m, _ := decodeMessage(p); m.Code != codeMismatch || m.ID != 20 {
		t.Fatalf("the other side of the mismatch: %+v %q", m, m.Data)
	}
	// Still serving.
	m = rawCall(t, c, r, (&message{Type: msgPush, ID: 30, Key: "k", DType: 2, Samples: 1, Data: make([]byte, 24)}).encode())
	if m.Type != msgReply || m.ID != 30 {
		t.Fatalf("hub stopped serving: %+v %q", m, m.Data)
	}
	if hubs[0].Stats().Requests < 8 {
		t.Errorf("stats %+v", hubs[0].Stats())
	}
}

// TestHubCostModel: a reduce round over one hub moves N·S bytes in and
// N·S out of it; over K hubs each hub moves about N·S/K.
func TestHubCostModel(t *testing.T) {
	const n, count = 4, 1 << 16 // 256 KiB of float32 per worker
	for _, k := range []int{1, 2, 4} {
		hubs, addrs := startHubs(t, k, n, false)
		cs := dialAll(t, n, addrs, 16<<10)
		if err := each(n, func(w int) error {
			buf := make([]byte, 4*count)
			return cs[w].Collective(context.Background(), Collective{Seq: 1, Kind: RoundReduce, Op: 1, DType: 1, Count: count, Send: buf, Recv: buf, WantLen: count})
		}); err != nil {
			t.Fatal(err)
		}
		s := float64(4 * count)
		for i, h := range hubs {
			st := h.Stats()
			model := n * s / float64(k)
			for _, b := range []int64{st.BytesIn, st.BytesOut} {
				if math.Abs(float64(b)-model)/model > 0.05 {
					t.Errorf("k=%d hub %d moved %d bytes in, %d out; model N*S/K = %.0f", k, i, st.BytesIn, st.BytesOut, model)
				}
			}
		}
	}
}

// TestClientRejectsBadReplies: a "hub" that answers a pull with the wrong
// number of bytes is declared lost; the client never copies it.
func TestClientRejectsBadReplies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if err := fakeHubAccept(c); err != nil {
			return
		}
		r := wire.NewReader(c, 1<<20)
		for {
			_, p, err := r.Next(nil)
			if err != nil {
				return
			}
			m, err := decodeMessage(p)
			if err != nil {
				return
			}
			reply := message{Type: msgReply, ID: m.ID, DType: 2, Data: make([]byte, 8*3)}
			if m.Type == msgDeclare {
				reply.Data = nil
			}
			_, _ = c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, reply.encode()))
		}
	}()
	c, err := Dial(context.Background(), clientConfig(0, 1, []string{ln.Addr().String()}, 1024))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Declare(context.Background(), "k", KeyConfig{Len: 4}); err != nil {
		t.Fatal(err)
	}
	dst := []float64{7, 7, 7, 7}
	err = Pull(c, "k", dst).Wait(context.Background())
	if !errors.Is(err, ErrHubLost) || !strings.Contains(err.Error(), "sent 24 bytes where 32 were due") {
		t.Fatalf("got %v", err)
	}
	if dst[0] != 7 {
		t.Fatal("a bad reply was copied")
	}
}

// TestReportLost: a worker that is silent but still connected (frozen)
// holds a BSP round until another worker reports it lost; an elastic hub
// then finishes the round without it. In a synctest bubble over
// in-memory hubs, "holds" is exact: once every goroutine waits, the
// hubs have taken both pushes and the round is still open.
func TestReportLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		_, addrs, dial := startMemHubs(t, 2, n, true)
		cs := dialAllMem(t, n, addrs, dial, 16)
		if err := each(n, func(w int) error { return cs[w].Declare(context.Background(), "w", KeyConfig{Len: 4}) }); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // on the bubble's clock
		defer cancel()
		got := make([][]float64, n)
		hs := make([]*Handle, n)
		for _, w := range []int{0, 1} { // worker 2 never pushes
			got[w] = make([]float64, 4)
			hs[w] = PushPull(cs[w], "w", []float64{1, 1, 1, 1}, 1, got[w])
		}
		synctest.Wait()
		for _, w := range []int{0, 1} {
			select {
			case <-hs[w].Done():
				t.Fatalf("worker %d's round completed without worker 2 and before any report", w)
			default:
			}
		}
		if err := cs[0].ReportLost(ctx, 2, "gossip: no answer"); err != nil {
			t.Fatal(err)
		}
		for _, w := range []int{0, 1} {
			if err := hs[w].Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if got[w][0] != 2 {
				t.Fatalf("worker %d: %v, want the sum of the two survivors", w, got[w])
			}
		}
		if err := cs[0].ReportLost(ctx, 0, "self"); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("reporting itself: %v", err)
		}
	})
}

// TestHubPostHandlesEveryEvent: events posted by many readers at once,
// more than a turn holds, are each handled once: none is stranded when a
// reader finds the turn taken, nor when a long turn hands the rest to a
// goroutine of its own.
func TestHubPostHandlesEveryEvent(t *testing.T) {
	const workers, posters = 3000, 8
	cfg := DefaultHubConfig()
	cfg.Workers, cfg.JobID, cfg.Secret, cfg.ListenAddr = workers, "job", []byte(testSecret), "127.0.0.1:0"
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links := make([]*link, workers)
	for w := range links {
		links[w] = &link{}
	}
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := p; w < workers; w += posters {
				if !h.post(hubEvent{worker: w, l: links[w], joined: true}) {
					t.Error("post refused before Close")
					return
				}
			}
		}()
	}
	wg.Wait()
	waitJoined(t, h, links)

	// A turn that finds three turns' worth queued handles one and leaves
	// the rest to a goroutine of its own.
	h2, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	h2.turn.Lock()
	for w := range 3 * maxQueue {
		h2.queue = append(h2.queue, hubEvent{worker: w, l: links[w], joined: true})
	}
	h2.takeTurn()
	waitJoined(t, h2, links[:3*maxQueue])
}

// waitJoined waits until workers 0..len(links)-1 of h have joined on
// links, for at most 10 s.
func waitJoined(t *testing.T, h *Hub, links []*link) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.turn.Lock()
		missing := 0
		for w, l := range links {
			if h.workers[w] != l {
				missing++
			}
		}
		h.turn.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d joins never handled", missing, len(links))
		}
		time.Sleep(time.Millisecond)
	}
}

// flakyListener fails its first accepts as a process out of descriptors
// would.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestHubAcceptSurvivesTransientErrors: accept failures (EMFILE) pause
// the hub's accept loop instead of ending it; the workers then connect and
// a round gives the exact sum.
func TestHubAcceptSurvivesTransientErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	cfg := DefaultHubConfig()
	cfg.Workers, cfg.JobID, cfg.Secret, cfg.Listener = 2, "job", []byte(testSecret), fl
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	cs := dialAll(t, 2, []string{h.Addr().String()}, 1<<16)
	const count = 1000
	bufs := [][]int32{make([]int32, count), make([]int32, count)}
	err = each(2, func(w int) error {
		for i := range bufs[w] {
			bufs[w][i] = int32(i*(w+1) - 300)
		}
		b := reduce.AsBytes(bufs[w])
		return cs[w].Collective(context.Background(), Collective{Seq: 1, Kind: RoundReduce, Op: reduce.Sum, DType: reduce.Int32, Count: count, Send: b, Recv: b, WantLen: count})
	})
	if err != nil {
		t.Fatal(err)
	}
	if fl.fails.Load() >= 0 {
		t.Fatal("the listener never failed")
	}
	for w := range 2 {
		for i, x := range bufs[w] {
			if want := int32(3*i - 600); x != want {
				t.Fatalf("worker %d [%d] = %d, want %d", w, i, x, want)
			}
		}
	}
}

// TestHubWindow: the hub window is HubTimeout on an idle host or one
// whose load is unknown, stretched by the runnable tasks per CPU past 2,
// and at least 4 times this worker's own latest stall.
func TestHubWindow(t *testing.T) {
	const base = 3 * time.Second
	for _, c := range []struct {
		load  liveness.Load
		stall time.Duration
		want  time.Duration
	}{
		{liveness.Load{}, 0, base},
		{liveness.Load{Runnable: 4, CPUs: 2}, 0, base},
		{liveness.Load{Runnable: 8, CPUs: 2}, 0, 2 * base},
		{liveness.Load{Runnable: 20, CPUs: 2}, 0, 5 * base},
		{liveness.Load{Runnable: 1, CPUs: 2}, 500 * time.Millisecond, base},
		{liveness.Load{Runnable: 1, CPUs: 2}, 2 * time.Second, 8 * time.Second},
		{liveness.Load{Runnable: 1 << 20, CPUs: 1}, time.Hour, liveness.MaxStretch * base},
	} {
		if got := hubWindow(base, c.load, c.stall); got != c.want {
			t.Errorf("hubWindow(%v, %+v, %v) = %v, want %v", base, c.load, c.stall, got, c.want)
		}
	}
}
