package ps

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// These tests drive the hub's pure core with events, in orders the tests
// choose, with no sockets, goroutines or sleeps.

func f64(b []byte) []float64 { return reduce.FromBytes[float64](b) }

// byWorker sorts replies by worker and checks there is at most one each.
func byWorker(t *testing.T, out []reply) map[int]message {
	t.Helper()
	m := map[int]message{}
	for _, r := range out {
		if _, dup := m[r.worker]; dup {
			t.Fatalf("two replies to worker %d in one step", r.worker)
		}
		m[r.worker] = r.msg
	}
	return m
}

func errOf(m message) error {
	if m.Type != msgError {
		return nil
	}
	return &HubError{Code: m.Code, Msg: string(m.Data)}
}

func joinAll(t *testing.T, c *core) {
	t.Helper()
	for w := range c.workers {
		if err := c.join(w); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCoreRoundFoldsInRankOrder: a reduce round answers nobody until every
// worker's part is in, and gives every worker the same bits, the fold in
// rank order, whatever order the parts arrive in.
func TestCoreRoundFoldsInRankOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 9; n++ {
		const count = 37
		in := make([][]float64, n)
		want := make([]float64, count)
		for w := range in {
			in[w] = make([]float64, count)
			for i := range in[w] {
				in[w][i] = rng.NormFloat64() * 1e3
			}
		}
		copy(want, in[0])
		for w := 1; w < n; w++ {
			for i := range want {
				want[i] += in[w][i]
			}
		}
		for range 5 {
			c := newCore(n, false, 0.3)
			joinAll(t, c)
			order := rng.Perm(n)
			for k, w := range order {
				m := &message{Type: msgRound, ID: uint32(100 + w), Kind: kindReduce, Code: uint8(reduce.Sum), DType: reduce.Float64,
					Clock: 7, Count: count, N: count, WantLen: count, Data: reduce.AsBytes(slices.Clone(in[w]))}
				out, kill := c.request(w, m)
				if len(kill) > 0 {
					t.Fatalf("kill %v", kill)
				}
				if k < n-1 {
					if len(out) > 0 {
						t.Fatalf("n=%d: answered after %d of %d parts", n, k+1, n)
					}
					continue
				}
				got := byWorker(t, out)
				for w := range n {
					r := got[w]
					if r.Type != msgReply || r.ID != uint32(100+w) || !slices.Equal(f64(r.Data), want) {
						t.Fatalf("n=%d order %v: worker %d got %+v", n, order, w, r)
					}
				}
			}
		}
	}
}

// TestCoreRoundMismatch: a part that disagrees with the first fails the
// round for everyone with ErrSizeMismatch naming the worker.
func TestCoreRoundMismatch(t *testing.T) {
	c := newCore(3, false, 0.3)
	joinAll(t, c)
	part := func(w int, count uint64) *message {
		return &message{Type: msgRound, ID: uint32(w), Kind: kindReduce, Code: uint8(reduce.Sum), DType: reduce.Float32, Count: count, N: count, Data: make([]byte, 4*count)}
	}
	if out, _ := c.request(0, part(0, 4)); len(out) != 0 {
		t.Fatal("answered early")
	}
	out, _ := c.request(1, part(1, 5))
	got := byWorker(t, out)
	for _, w := range []int{0, 1} {
		if err := errOf(got[w]); !errors.Is(err, transport.ErrSizeMismatch) || !strings.Contains(err.Error(), "rank 1") {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	out, _ = c.request(2, part(2, 4))
	if err := errOf(byWorker(t, out)[2]); !errors.Is(err, transport.ErrSizeMismatch) {
		t.Fatalf("late worker: %v", err)
	}
}

func declare(t *testing.T, c *core, key string, cfg KeyConfig) {
	t.Helper()
	for w := range c.workers {
		out, _ := c.request(w, &message{Type: msgDeclare, ID: 1, Key: key, Count: uint64(cfg.Len), Code: uint8(cfg.Update), Stale: int32(cfg.Staleness)})
		if err := errOf(byWorker(t, out)[w]); err != nil {
			t.Fatal(err)
		}
	}
}

func pushPull(w, clock int, id uint32, g ...float64) *message {
	return &message{Type: msgPushPull, ID: id, Key: "w", Clock: uint32(clock), Samples: 1, DType: reduce.Float64, Data: reduce.AsBytes(g)}
}

// TestCoreBSP: under BSP a push-pull is answered only when every worker
// has pushed that clock, and everyone gets the same sum.
func TestCoreBSP(t *testing.T) {
	c := newCore(3, false, 0.3)
	joinAll(t, c)
	declare(t, c, "w", KeyConfig{Len: 2})
	for clock := range 3 {
		for w := range 3 {
			out, _ := c.request(w, pushPull(w, clock, uint32(10*clock+w), float64(w+1), float64(clock)))
			if w < 2 && len(out) != 0 {
				t.Fatalf("clock %d: answered before worker 2 pushed", clock)
			}
			if w == 2 {
				got := byWorker(t, out)
				for v := range 3 {
					want := []float64{6 * float64(clock+1), 3 * float64(clock*(clock+1)/2)}
					if r := got[v]; r.ID != uint32(10*clock+v) || !slices.Equal(f64(r.Data), want) {
						t.Fatalf("clock %d worker %d: got %v, want %v", clock, v, f64(r.Data), want)
					}
				}
			}
		}
	}
}

// TestCoreSSP: with staleness 1 a worker may run one clock ahead of the
// slowest, and no further.
func TestCoreSSP(t *testing.T) {
	c := newCore(2, false, 0.3)
	joinAll(t, c)
	declare(t, c, "w", KeyConfig{Len: 1, Staleness: 1})
	if out, _ := c.request(0, pushPull(0, 0, 1, 1)); len(out) != 1 {
		t.Fatalf("clock 0 within the bound: %d replies", len(out))
	}
	if out, _ := c.request(0, pushPull(0, 1, 2, 1)); len(out) != 0 {
		t.Fatal("worker 0 ran two clocks ahead of worker 1")
	}
	out, _ := c.request(1, pushPull(1, 0, 3, 1))
	got := byWorker(t, out)
	if got[0].ID != 2 || got[1].ID != 3 {
		t.Fatalf("after worker 1 caught up: %+v", got)
	}
}

// TestCoreWorkerLost: without elasticity a lost worker fails the parked
// requests and every later one, naming it.
func TestCoreWorkerLost(t *testing.T) {
	c := newCore(3, false, 0.3)
	joinAll(t, c)
	declare(t, c, "w", KeyConfig{Len: 1})
	c.request(0, pushPull(0, 0, 5, 1))
	out := c.leave(2, false, workerLost(2, "connection lost"))
	if err := errOf(byWorker(t, out)[0]); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("parked pull: %v", err)
	}
	out, _ = c.request(1, pushPull(1, 0, 6, 1))
	if err := errOf(byWorker(t, out)[1]); !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("later request: %v", err)
	}
	if got := errOf(byWorker(t, out)[1]).Error(); !strings.Contains(got, "rank 2 lost") {
		t.Fatalf("error does not name worker 2: %s", got)
	}
}

// TestCoreElastic: an elastic hub finishes BSP rounds with the survivors,
// and a worker reported lost by another is dropped (kill) and not waited for.
func TestCoreElastic(t *testing.T) {
	c := newCore(3, true, 0.3)
	joinAll(t, c)
	declare(t, c, "w", KeyConfig{Len: 1})
	c.request(0, pushPull(0, 0, 1, 1))
	c.request(1, pushPull(1, 0, 2, 2))
	out, kill := c.request(0, &message{Type: msgLost, ID: 3, Root: 2, Data: []byte("gossip")})
	if !slices.Equal(kill, []int{2}) {
		t.Fatalf("kill %v, want [2]", kill)
	}
	ids := map[uint32][]float64{}
	for _, r := range out {
		ids[r.msg.ID] = f64(r.msg.Data)
	}
	if len(out) != 3 || !slices.Equal(ids[1], []float64{3}) || !slices.Equal(ids[2], []float64{3}) {
		t.Fatalf("want the survivors' round (3) and the report's answer: %v", ids)
	}
	if c.removed != 1 || c.left != 0 || c.allGone() {
		t.Fatalf("removed %d left %d", c.removed, c.left)
	}
	if err := c.join(2); err == nil {
		t.Fatal("a removed worker joined again")
	}
	c.leave(0, true, nil)
	c.leave(1, true, nil)
	if !c.allGone() || c.left != 2 {
		t.Fatalf("left %d, all gone %v", c.left, c.allGone())
	}
}

// TestCoreShares: LB-BSP shares are answered once every live worker has
// asked, add up to the batch, and follow the speeds.
func TestCoreShares(t *testing.T) {
	c := newCore(3, true, 1)
	joinAll(t, c)
	ask := func(w int, samples int, nanos int64) []reply {
		out, _ := c.request(w, &message{Type: msgShare, ID: uint32(w), Clock: 0, Count: 600, Samples: uint32(samples), Nanos: nanos})
		return out
	}
	if len(ask(0, 100, 1e9)) != 0 || len(ask(1, 100, 2e9)) != 0 {
		t.Fatal("shares answered before every worker asked")
	}
	// Worker 2 is lost: the round completes with 0 and 1, at 100/s and 50/s.
	got := byWorker(t, c.leave(2, false, workerLost(2, "gone")))
	if got[0].Count+got[1].Count != 600 || got[0].Count != 400 {
		t.Fatalf("shares %d and %d, want 400 and 200", got[0].Count, got[1].Count)
	}
}
