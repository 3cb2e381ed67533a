package ps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// Sparse pushes through real hubs over TCP loopback, against the naive
// reference (SparseRef) fed into a Table.

// sparseJob is one randomized run.
type sparseJob struct {
	workers, hubs, partElems, n, rounds int
	cfg                                 KeyConfig
	ints                                bool // integer gradients: every sum exact
}

func (j sparseJob) String() string {
	return fmt.Sprintf("%d workers, %d hubs, %d elements in partitions of %d, %v ratio %v ef %v codec %v, mode %d, staleness %d",
		j.workers, j.hubs, j.n, j.partElems, j.cfg.Sparse.Method, j.cfg.Sparse.Ratio, j.cfg.Sparse.ErrorFeedback, j.cfg.Sparse.Codec, j.cfg.Update, j.cfg.Staleness)
}

func grads[T Float](rng *rand.Rand, n int, ints bool) []T {
	g := make([]T, n)
	for i := range g {
		if ints {
			g[i] = T(rng.IntN(41) - 20)
		} else {
			g[i] = T(gradient(rng, 1, false)[0])
		}
	}
	return g
}

// runSparseBSP runs j's rounds of push-pulls under BSP and checks every
// worker's pulled value, each round, against a Table fed the reference's
// dense vectors of what each worker sends. Integer gradients make every
// sum exact in any order; otherwise the hub's order of arrival may round
// differently, within closeTo.
func runSparseBSP[T Float](t *testing.T, rng *rand.Rand, j sparseJob) []*Client {
	t.Helper()
	_, addrs := startHubs(t, j.hubs, j.workers, false)
	cs := dialAll(t, j.workers, addrs, 4*j.partElems)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := each(j.workers, func(w int) error { return cs[w].Declare(ctx, "w", j.cfg) }); err != nil {
		t.Fatal(err)
	}
	dense := j.cfg
	dense.Sparse = SparseConfig{}
	ref := NewTable(j.workers)
	if err := ref.Declare("w", dense); err != nil {
		t.Fatal(err)
	}
	refs := make([]SparseRef, j.workers)
	for w := range refs {
		refs[w] = SparseRef{Cfg: j.cfg.Sparse, Key: "w", PartElems: j.partElems}
	}
	for clock := range j.rounds {
		g := make([][]T, j.workers)
		samples := make([]int, j.workers)
		for w := range g {
			g[w] = grads[T](rng, j.n, j.ints)
			samples[w] = 1 + rng.IntN(9)
			if err := ref.Push("w", w, clock, RefPush(&refs[w], g[w], clock), samples[w]); err != nil {
				t.Fatal(err)
			}
		}
		got := make([][]T, j.workers)
		if err := each(j.workers, func(w int) error {
			got[w] = make([]T, j.n)
			return PushPull(cs[w], "w", g[w], samples[w], got[w]).Wait(ctx)
		}); err != nil {
			t.Fatalf("%v: round %d: %v", j, clock, err)
		}
		want, _, _, err := ref.Pull("w", 0, clock+1)
		if err != nil {
			t.Fatal(err)
		}
		for w := range got {
			for i, v := range got[w] {
				if x := T(want[i]); v != x && !(j.ints || closeTo(float64(v), float64(x))) {
					t.Fatalf("%v: round %d: worker %d [%d] = %v, want %v", j, clock, w, i, v, x)
				}
			}
		}
	}
	// Every worker's residual is the reference's.
	for w, c := range cs {
		if !j.cfg.Sparse.ErrorFeedback {
			continue
		}
		r := make([]float64, j.n)
		if err := c.Residual("w", r); err != nil {
			t.Fatal(err)
		}
		if refs[w].Resid != nil && !slices.EqualFunc(r, refs[w].Resid, func(a, b float64) bool { return a == b || !j.ints && closeTo(a, b) }) {
			t.Fatalf("%v: worker %d's residual %v, want %v", j, w, r, refs[w].Resid)
		}
	}
	return cs
}

func randomSparseConfig(rng *rand.Rand) SparseConfig {
	return SparseConfig{
		Method:        []SparseMethod{TopK, RandomK}[rng.IntN(2)],
		Ratio:         []float64{0.01, 0.1, 0.3, 1}[rng.IntN(4)],
		ErrorFeedback: rng.IntN(3) > 0,
		Codec:         append(codecs, CodecDefault)[rng.IntN(5)],
		Seed:          rng.Uint64(),
	}
}

// TestSparsePushMatchesReference: sparse push-pulls through 1 or 3 hubs,
// 1 to 9 workers, float32 and float64, keys of 0, 1, prime and other
// lengths cut into partitions of 1 to 40 elements, top-k and random-k,
// every codec, with and without error feedback, sum and SGD mode: every
// pulled value is the reference's, and so is every residual.
func TestSparsePushMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	workers := []int{1, 2, 3, 4, 5, 7, 9}
	for iter := range 28 {
		j := sparseJob{
			workers:   workers[iter%len(workers)],
			hubs:      []int{1, 3}[iter%2],
			partElems: []int{2, 3, 7, 16, 40}[rng.IntN(5)],
			n:         sizes[iter%len(sizes)],
			rounds:    3,
			ints:      iter%4 != 3,
			cfg:       KeyConfig{Update: UpdateMode(rng.IntN(2)), LR: 0.25, Momentum: 0.5, Sparse: randomSparseConfig(rng)},
		}
		j.cfg.Len = j.n
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			if iter%3 == 0 {
				runSparseBSP[float32](t, rng, j)
			} else {
				runSparseBSP[float64](t, rng, j)
			}
		})
	}
}

// TestSparseTopKPicksLargest: one worker, no error feedback, sum mode:
// the hub holds exactly the partition's largest magnitudes, ties to the
// lower index, and zeros elsewhere.
func TestSparseTopKPicksLargest(t *testing.T) {
	_, addrs := startHubs(t, 2, 1, false)
	cs := dialAll(t, 1, addrs, 4*10)
	ctx := context.Background()
	if err := cs[0].Declare(ctx, "w", KeyConfig{Len: 25, Sparse: SparseConfig{Method: TopK, Ratio: 0.2}}); err != nil {
		t.Fatal(err)
	}
	// Partitions [0,10), [10,20), [20,25): k = 2, 2, 1.
	g := []float64{1, -7, 3, 7, 0, 7, -2, 5, 1, 0, 4, 4, -4, 4, 0, 0, 0, 0, 0, 0, 0, -0.5, 0.5, 0.25, 0}
	want := make([]float64, 25)
	for _, i := range []int{1, 3, 10, 11, 21} {
		want[i] = g[i]
	}
	got := make([]float64, 25)
	if err := PushPull(cs[0], "w", g, 1, got).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestSparseSSPAndASP: sparse pushes under SSP and ASP are applied as
// they arrive; once every push is in, the value is the reference sum.
func TestSparseSSPAndASP(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, stale := range []int{1, Async} {
		const workers, n, rounds = 3, 50, 6
		_, addrs := startHubs(t, 2, workers, false)
		cs := dialAll(t, workers, addrs, 4*9)
		cfg := KeyConfig{Len: n, Staleness: stale, Sparse: SparseConfig{Method: TopK, Ratio: 0.2, ErrorFeedback: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", cfg) }); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n)
		g := make([][][]float32, workers)
		for w := range g {
			ref := SparseRef{Cfg: cfg.Sparse, Key: "w", PartElems: 9}
			for clock := range rounds {
				g[w] = append(g[w], grads[float32](rng, n, true))
				for i, v := range RefPush(&ref, g[w][clock], clock) {
					want[i] += v
				}
			}
		}
		if err := each(workers, func(w int) error {
			dst := make([]float32, n)
			for clock := range rounds {
				if err := PushPull(cs[w], "w", g[w][clock], 1, dst).Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got := make([]float64, n)
		if err := Pull(cs[0], "w", got).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("staleness %d: got %v, want %v", stale, got, want)
		}
	}
}

// TestSparseErrorFeedbackConverges: over many rounds of gradient-like
// values, what the hubs summed plus every worker's final residual is the
// sum of every gradient, up to float64 rounding, for top-k 1 % and
// random-k 10 %, float32 and float64.
func TestSparseErrorFeedbackConverges(t *testing.T) {
	for _, c := range []struct {
		method SparseMethod
		ratio  float64
		f32    bool
	}{{TopK, 0.01, true}, {TopK, 0.01, false}, {RandomK, 0.1, true}, {RandomK, 0.1, false}} {
		const workers, n, rounds = 3, 1009, 60
		_, addrs := startHubs(t, 2, workers, false)
		cs := dialAll(t, workers, addrs, 4*100)
		cfg := KeyConfig{Len: n, Sparse: SparseConfig{Method: c.method, Ratio: c.ratio, ErrorFeedback: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", cfg) }); err != nil {
			t.Fatal(err)
		}
		total, abs := make([]float64, n), make([]float64, n)
		if err := each(workers, func(w int) error {
			wrng := rand.New(rand.NewPCG(uint64(w), 99))
			for range rounds {
				g := gradient(wrng, n, false)
				var h *Handle
				if c.f32 {
					h = Push(cs[w], "w", as32(g), 1)
				} else {
					h = Push(cs[w], "w", g, 1)
				}
				if err := h.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Every worker's gradients again, from the same seeds.
		for w := range workers {
			wrng := rand.New(rand.NewPCG(uint64(w), 99))
			for range rounds {
				g := gradient(wrng, n, false)
				for i, v := range g {
					if c.f32 {
						v = float64(float32(v))
					}
					total[i] += v
					abs[i] += math.Abs(v)
				}
			}
		}
		got := make([]float64, n)
		if err := Pull(cs[0], "w", got).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		resid := make([]float64, n)
		r := make([]float64, n)
		nonzero := 0
		for w := range workers {
			if err := cs[w].Residual("w", r); err != nil {
				t.Fatal(err)
			}
			for i, v := range r {
				resid[i] += v
				if v != 0 {
					nonzero++
				}
			}
		}
		for i := range total {
			// Each of the rounds·workers additions into the residual, the
			// hub's sum and ours rounds by at most an ulp of what it adds.
			bound := 4 * rounds * workers * abs[i] * 0x1p-52
			if d := math.Abs(total[i] - got[i] - resid[i]); d > bound {
				t.Fatalf("%v %v f32 %v: [%d] gradients %v, summed %v, residual %v: off by %g > %g", c.method, c.ratio, c.f32, i, total[i], got[i], resid[i], d, bound)
			}
		}
		if nonzero < n {
			t.Fatalf("%v: only %d residual elements are not zero: nothing left to check", c.method, nonzero)
		}
		cancel()
	}
}

// fakeHub is a hub on loopback that answers declares and hands every
// other request to answer (nil: no answer), for the client's side of
// failures.
func fakeHub(t *testing.T, answer func(m message) *message) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if err := fakeHubAccept(c); err != nil {
			return
		}
		r := transport.NewReader(c, 1<<20)
		for {
			h, p, err := r.Next(nil)
			if err != nil {
				return
			}
			var out []byte
			switch h.Type {
			case transport.TypePing:
				out = transport.AppendFrame(nil, transport.Header{Type: transport.TypePong}, nil)
			case transport.TypeData:
				m, err := decodeMessage(p)
				if err != nil {
					return
				}
				reply := &message{Type: msgReply, ID: m.ID}
				if m.Type != msgDeclare {
					reply = answer(m)
				}
				if reply != nil {
					out = transport.AppendFrame(nil, transport.Header{Type: transport.TypeData}, reply.encode())
				}
			}
			if out != nil {
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}
	}()
	return ln.Addr().String()
}

// TestSparseRestoreOnFailure: a push the hub did not apply goes back into
// the residual, a push it applied does not, partition by partition: an
// error before the push, an error after it (errPushed), and no answer at
// all (the client fails, or closes).
func TestSparseRestoreOnFailure(t *testing.T) {
	g := []float64{5, -1, 2, 8, -3, 0.5, 9, -4, 1, 6} // partitions [0,5), [5,10)
	sc := SparseConfig{Method: TopK, Ratio: 0.4, ErrorFeedback: true}
	// What each partition sends: 5, 8 and 9, 6.
	sent := []float64{5, 0, 0, 8, 0, 0, 9, 0, 0, 6}
	for _, c := range []struct {
		name    string
		answer  func(m message) *message
		fail    error // the client fails with it after the push
		applied []bool
	}{
		{"answered", func(m message) *message {
			return &message{Type: msgReply, ID: m.ID, DType: reduce.Float64, Data: make([]byte, 40)}
		}, nil, []bool{true, true}},
		{"refused", func(m message) *message {
			return &message{Type: msgError, ID: m.ID, Code: codeClock, Data: []byte("no")}
		}, nil, []bool{false, false}},
		{"refused after the push", func(m message) *message {
			return &message{Type: msgError, ID: m.ID, Code: codePeerLost, Kind: errPushed, Data: []byte("lost")}
		}, nil, []bool{true, true}},
		{"one of two", func(m message) *message {
			if m.Key == "w@0" {
				return &message{Type: msgReply, ID: m.ID, DType: reduce.Float64, Data: make([]byte, 40)}
			}
			return &message{Type: msgError, ID: m.ID, Code: codeCorrupt(), Kind: errCorruptFlag, Data: []byte("corrupt")}
		}, nil, []bool{true, false}},
		{"no answer, client fails", func(message) *message { return nil }, errors.New("boom"), []bool{false, false}},
		{"no answer, client closes", func(message) *message { return nil }, ErrClosed, []bool{false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := fakeHub(t, c.answer)
			cl, err := Dial(context.Background(), clientConfig(0, 1, []string{addr}, 4*5))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.Declare(ctx, "w", KeyConfig{Len: 10, Sparse: sc}); err != nil {
				t.Fatal(err)
			}
			h := PushPull(cl, "w", g, 1, make([]float64, 10))
			switch c.fail {
			case nil:
			case ErrClosed:
				cl.Close()
			default:
				cl.Fail(c.fail)
			}
			err = h.Wait(ctx)
			if (err != nil) != (c.name != "answered") || c.fail != nil && !errors.Is(err, c.fail) {
				t.Fatalf("wait: %v", err)
			}
			// Once closed, every partition is settled: the second's
			// answer may come after the first's error ended Wait.
			cl.Close()
			want := slices.Clone(g)
			for p, applied := range c.applied {
				if applied {
					for i := 5 * p; i < 5*p+5; i++ {
						want[i] -= sent[i]
					}
				}
			}
			got := make([]float64, 10)
			if err := cl.Residual("w", got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("residual %v, want %v", got, want)
			}
			if c.name == "one of two" && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a corrupt answer: %v, want ErrCorrupt", err)
			}
		})
	}
}

// codeCorrupt is the code a hub sends with ErrCorrupt.
func codeCorrupt() uint8 { return codeOf(&corruptError{}) }

// rawWorker is an authenticated connection to hub i as worker w.
func rawWorker(t *testing.T, addr string, i, w, n int) (net.Conn, *transport.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := transport.DialHandshake(c, "job", []byte(testSecret), transport.Ends{From: w, To: HubTag + i, Size: n}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := transport.OfferShm(context.Background(), c, transport.ShmOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, transport.NewReader(c, 1<<20)
}

// TestSparseCorruptFailsEveryWorker: worker 2 (hand-made) sends a good
// push to one hub and a corrupt one to the other while workers 0 and 1
// wait in push-pulls: all three get ErrCorrupt naming the key's partition
// and worker 2, nobody hangs, and later requests on the key fail too.
func TestSparseCorruptFailsEveryWorker(t *testing.T) {
	sc := SparseConfig{Method: TopK, Ratio: 0.3}
	g := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	for _, bad := range []struct {
		name  string
		spoil func(*message)
		want  string
	}{
		{"index out of range", func(m *message) { m.Data[len(m.Data)-1] = 0x7f }, "out of range"},
		{"duplicate index", func(m *message) { m.Data[len(m.Data)-1] = 0 }, "repeated"},
		{"unsorted index", func(m *message) {
			m.Kind = uint8(CodecRaw)
			m.Data = append(make([]byte, 24), 9, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0)
		}, "must increase"},
		{"truncated", func(m *message) { m.Data = m.Data[:len(m.Data)-2] }, "ends after"},
		{"wrong count", func(m *message) { m.N = 2 }, "2 elements sent where ratio 0.3 of 10 is 3"},
		{"bad s2 stream", func(m *message) { m.Kind = uint8(CodecS2) }, "s2"},
		{"bad zstd stream", func(m *message) { m.Kind = uint8(CodecZstd) }, "zstd"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			const n = 3
			_, addrs := startHubs(t, 2, n, false)
			cs := make([]*Client, 2) // workers 0 and 1; 2 is by hand
			for w := range cs {
				c, err := Dial(context.Background(), clientConfig(w, n, addrs, 4*10))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				cs[w] = c
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := each(2, func(w int) error { return cs[w].Declare(ctx, "w", KeyConfig{Len: 20, Sparse: sc}) }); err != nil {
				t.Fatal(err)
			}
			hs := make([]*Handle, 2)
			for w := range hs {
				hs[w] = PushPull(cs[w], "w", g, 1, make([]float64, 20))
			}
			// Partition w@0 is on hub 0, w@10 on hub 1.
			var answers []message
			for i, key := range []string{"w@10", "w@0"} {
				c, r := rawWorker(t, addrs[i^1], i^1, 2, n)
				m, _ := sparseMsg(t, sc, key, 0, g[10*(1-i):10*(1-i)+10], true)
				if key == "w@0" {
					bad.spoil(m)
				}
				if _, err := c.Write(transport.AppendFrame(nil, transport.Header{Type: transport.TypeData}, m.encode())); err != nil {
					t.Fatal(err)
				}
				if key == "w@0" {
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					_, p, err := r.Next(nil)
					if err != nil {
						t.Fatal(err)
					}
					a, err := decodeMessage(p)
					if err != nil {
						t.Fatal(err)
					}
					answers = append(answers, a)
				}
			}
			for _, a := range answers {
				if a.Type != msgError || a.Kind&errCorruptFlag == 0 || a.Kind&errPushed != 0 || !strings.Contains(string(a.Data), bad.want) {
					t.Fatalf("worker 2's answer: %+v %q", a, a.Data)
				}
			}
			for w, h := range hs {
				err := h.Wait(ctx)
				if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `key "w@0" from worker 2 at clock 0`) || !strings.Contains(err.Error(), bad.want) {
					t.Fatalf("worker %d: %v", w, err)
				}
			}
			if err := Pull(cs[0], "w", make([]float64, 20)).Wait(ctx); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a later pull: %v", err)
			}
		})
	}
}

// TestSparseResidualKeptOnRemoval: the rule for a worker removed from an
// elastic job is that the others keep their residuals: after worker 2
// dies between rounds, the survivors' next pushes send what they had
// kept, the rounds finish without worker 2, and the hub's value and the
// survivors' residuals are the reference's (which never resets).
func TestSparseResidualKeptOnRemoval(t *testing.T) {
	const workers, n, before, after = 3, 31, 3, 4
	rng := rand.New(rand.NewPCG(5, 31))
	hubs, addrs := startHubs(t, 2, workers, true)
	cs := dialAll(t, workers, addrs, 4*8)
	cfg := KeyConfig{Len: n, Sparse: SparseConfig{Method: TopK, Ratio: 0.25, ErrorFeedback: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", cfg) }); err != nil {
		t.Fatal(err)
	}
	refs := make([]SparseRef, workers)
	for w := range refs {
		refs[w] = SparseRef{Cfg: cfg.Sparse, Key: "w", PartElems: 8}
	}
	want := make([]float64, n)
	live := workers
	var kept [][]float64
	for clock := range before + after {
		if clock == before {
			kill(cs[2])
			for _, h := range hubs {
				for h.Stats().Removed != 1 {
					time.Sleep(time.Millisecond)
				}
			}
			live = 2
			for w := range live {
				r := make([]float64, n)
				if err := cs[w].Residual("w", r); err != nil {
					t.Fatal(err)
				}
				kept = append(kept, r)
			}
		}
		g := make([][]float64, live)
		for w := range g {
			g[w] = grads[float64](rng, n, true)
			for i, v := range RefPush(&refs[w], g[w], clock) {
				want[i] += v
			}
		}
		got := make([][]float64, live)
		if err := each(live, func(w int) error {
			got[w] = make([]float64, n)
			return PushPull(cs[w], "w", g[w], 1, got[w]).Wait(ctx)
		}); err != nil {
			t.Fatalf("round %d: %v", clock, err)
		}
		for w := range got {
			if !slices.Equal(got[w], want) {
				t.Fatalf("round %d: worker %d got %v, want %v", clock, w, got[w], want)
			}
		}
	}
	for w := range 2 {
		if slices.Equal(kept[w], make([]float64, n)) {
			t.Fatalf("worker %d had no residual when worker 2 died: nothing was tested", w)
		}
		r := make([]float64, n)
		if err := cs[w].Residual("w", r); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r, refs[w].Resid) {
			t.Fatalf("worker %d: residual %v, want %v", w, r, refs[w].Resid)
		}
	}
}

// TestSparseResidualSurvivesRepartition: a residual is per key on the
// worker, element by element, not per partition: carried by Residual and
// SetResidual from a job with one hub and partitions of 7 to one with 3
// hubs and partitions of 5, it goes on where it was. The two jobs' sums
// plus the final residuals are every gradient's sum, exactly (integer
// gradients), and each job's value is the reference's.
func TestSparseResidualSurvivesRepartition(t *testing.T) {
	const workers, n, rounds = 2, 29, 4
	rng := rand.New(rand.NewPCG(7, 29))
	sc := SparseConfig{Method: TopK, Ratio: 0.2, ErrorFeedback: true}
	total := make([]float64, n)
	carried := make([][]float64, workers)
	refs := make([]SparseRef, workers)
	for w := range refs {
		refs[w] = SparseRef{Cfg: sc, Key: "w"}
	}
	var sums [][]float64
	for phase, layout := range []struct{ hubs, part int }{{1, 7}, {3, 5}} {
		_, addrs := startHubs(t, layout.hubs, workers, false)
		cs := dialAll(t, workers, addrs, 4*layout.part)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := each(workers, func(w int) error {
			if err := cs[w].Declare(ctx, "w", KeyConfig{Len: n, Sparse: sc}); err != nil {
				return err
			}
			if phase > 0 {
				return cs[w].SetResidual("w", carried[w])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n)
		got := make([]float64, n)
		for clock := range rounds {
			g := make([][]float64, workers)
			for w := range g {
				g[w] = grads[float64](rng, n, true)
				refs[w].PartElems = layout.part
				for i, v := range RefPush(&refs[w], g[w], clock) {
					want[i] += v
					total[i] += g[w][i]
				}
			}
			if err := each(workers, func(w int) error {
				dst := make([]float64, n)
				if err := PushPull(cs[w], "w", g[w], 1, dst).Wait(ctx); err != nil {
					return err
				}
				if w == 0 {
					copy(got, dst)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("phase %d: got %v, want %v", phase, got, want)
		}
		sums = append(sums, got)
		for w := range workers {
			carried[w] = make([]float64, n)
			if err := cs[w].Residual("w", carried[w]); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(carried[w], refs[w].Resid) {
				t.Fatalf("phase %d: worker %d's residual %v, want %v", phase, w, carried[w], refs[w].Resid)
			}
		}
	}
	for i := range total {
		if left := total[i] - sums[0][i] - sums[1][i] - carried[0][i] - carried[1][i]; left != 0 {
			t.Fatalf("[%d]: %v of the gradients neither summed nor kept", i, left)
		}
	}
}

// TestSparseDeclareChecks: a config the client cannot use fails Declare
// with a clear error before anything is sent; workers that declare a key
// differently are refused by the hub; a dense key has no residual.
func TestSparseDeclareChecks(t *testing.T) {
	_, addrs := startHubs(t, 1, 2, false)
	cs := dialAll(t, 2, addrs, 64)
	ctx := context.Background()
	for _, sc := range []SparseConfig{{Method: TopK}, {Method: TopK, Ratio: 2}, {Method: 5, Ratio: 0.1}, {ErrorFeedback: true}} {
		if err := cs[0].Declare(ctx, "bad", KeyConfig{Len: 4, Sparse: sc}); err == nil || !strings.Contains(err.Error(), `key "bad"`) {
			t.Fatalf("%+v: %v", sc, err)
		}
	}
	if err := cs[0].Declare(ctx, "w", KeyConfig{Len: 4, Sparse: SparseConfig{Method: TopK, Ratio: 0.5}}); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Declare(ctx, "w", KeyConfig{Len: 4, Sparse: SparseConfig{Method: RandomK, Ratio: 0.5}}); !errors.Is(err, ErrShape) {
		t.Fatalf("declared another method: %v", err)
	}
	if err := cs[0].Declare(ctx, "d", KeyConfig{Len: 4}); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Residual("d", make([]float64, 4)); err == nil {
		t.Fatal("a dense key has a residual")
	}
	if err := cs[0].Residual("w", make([]float64, 4)); err == nil {
		t.Fatal("a key without error feedback has a residual")
	}
	// The largest push must fit in a frame.
	_, addrs = startHubs(t, 1, 1, false)
	cfg := clientConfig(0, 1, addrs, 1<<20)
	cfg.MaxFrame = 1<<20 + 4096
	small, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.Declare(ctx, "big", KeyConfig{Len: 1 << 18, Sparse: SparseConfig{Method: TopK, Ratio: 1, Codec: CodecRaw}}); err == nil || !strings.Contains(err.Error(), "MaxFrame") {
		t.Fatalf("a push larger than a frame: %v", err)
	}
}
