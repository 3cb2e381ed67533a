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
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
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

// fakeHub is a hand-made hub for one worker, reached through an
// in-memory pipe (so that a write returns only once the hub has read it:
// "written" means the hub has it). It answers declares, sends every other
// request it reads on the returned channel and writes what answer returns
// for it (nothing for nil), answers pings, and closes the connection on
// a goodbye or last words, as a hub does. With deaf it reads nothing
// more once it has answered deaf declares: what the worker writes after
// them never reaches it.
func fakeHub(t *testing.T, answer func(m message) []message, deaf int) (wire.DialFunc, <-chan message) {
	t.Helper()
	got := make(chan message, 1024)
	stop := make(chan struct{})
	var done sync.WaitGroup
	t.Cleanup(func() { close(stop); done.Wait() })
	serve := func(c net.Conn) {
		defer done.Done()
		defer c.Close()
		go func() { <-stop; c.Close() }()
		if err := fakeHubAccept(c); err != nil {
			return
		}
		r := wire.NewReader(c, 1<<20)
		declared := 0
		for deaf == 0 || declared < deaf {
			h, p, err := r.Next(nil)
			if err != nil {
				return
			}
			var out []message
			switch h.Type {
			case transport.TypeBye, transport.TypeAbort:
				return // as a hub does: it closes its end
			case transport.TypePing:
				if _, err := c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypePong}, nil)); err != nil {
					return
				}
			case transport.TypeData:
				m, err := decodeMessage(p)
				if err != nil {
					return
				}
				if m.Type == msgDeclare {
					declared++
					out = []message{{Type: msgReply, ID: m.ID}}
				} else {
					m.Data = slices.Clone(m.Data)
					got <- m
					out = answer(m)
				}
			}
			for _, a := range out {
				if _, err := c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, a.encode())); err != nil {
					return
				}
			}
		}
		<-stop // deaf: the worker's writes block until it gives up
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		client, server := net.Pipe()
		done.Add(1)
		go serve(server)
		return client, nil
	}
	return dial, got
}

// TestSparseRestoreOnFailure: the rules of settling a push into the
// residual, partition by partition, against a hand-made hub that records
// what it read. A partition the hub says it applied stays sent (an
// answer, msgPushed, an error after the push); one it refused before the
// push goes back; with no answer when the client fails or closes, one
// the hub read counts as applied (the hub has it: it would apply it) and
// one never written goes back (the hub never had it).
func TestSparseRestoreOnFailure(t *testing.T) {
	g := []float64{5, -1, 2, 8, -3, 0.5, 9, -4, 1, 6} // partitions [0,5), [5,10)
	sc := SparseConfig{Method: TopK, Ratio: 0.4, ErrorFeedback: true}
	// What each partition sends: 5, 8 and 9, 6.
	sent := []float64{5, 0, 0, 8, 0, 0, 9, 0, 0, 6}
	reply := func(m message) message {
		return message{Type: msgReply, ID: m.ID, DType: reduce.Float64, Data: make([]byte, 40)}
	}
	pushed := func(m message) message { return message{Type: msgPushed, ID: m.ID} }
	none := func(message) []message { return nil }
	for _, c := range []struct {
		name    string
		answer  func(m message) []message
		deaf    bool  // the hub reads nothing after the declares
		end     error // the client fails with it (ErrClosed: closes) after the push
		ok      bool  // Wait returns nil
		applied []bool
	}{
		{"answered", func(m message) []message { return []message{reply(m)} }, false, nil, true, []bool{true, true}},
		{"pushed, then answered", func(m message) []message { return []message{pushed(m), reply(m)} }, false, nil, true, []bool{true, true}},
		{"refused", func(m message) []message {
			return []message{{Type: msgError, ID: m.ID, Code: codeClock, Data: []byte("no")}}
		}, false, nil, false, []bool{false, false}},
		{"refused after the push", func(m message) []message {
			return []message{{Type: msgError, ID: m.ID, Code: codePeerLost, Kind: errPushed, Data: []byte("lost")}}
		}, false, nil, false, []bool{true, true}},
		{"one of two", func(m message) []message {
			if m.Key == "w@0" {
				return []message{reply(m)}
			}
			return []message{{Type: msgError, ID: m.ID, Code: codeCorrupt(), Kind: errCorruptFlag, Data: []byte("corrupt")}}
		}, false, nil, false, []bool{true, false}},
		{"pushed, client closes before the answer", func(m message) []message { return []message{pushed(m)} }, false, ErrClosed, false, []bool{true, true}},
		{"pushed, client fails before the answer", func(m message) []message { return []message{pushed(m)} }, false, errors.New("boom"), false, []bool{true, true}},
		{"read, no answer, client fails", none, false, errors.New("boom"), false, []bool{true, true}},
		{"read, no answer, client closes", none, false, ErrClosed, false, []bool{true, true}},
		{"never written, client fails", none, true, errors.New("boom"), false, []bool{false, false}},
		{"never written, client closes", none, true, ErrClosed, false, []bool{false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			deaf := 0
			if c.deaf {
				deaf = 2 // one declare a partition
			}
			dial, got := fakeHub(t, c.answer, deaf)
			cfg := clientConfig(0, 1, []string{"fake"}, 4*5)
			cfg.Dial, cfg.HubTimeout = dial, time.Second // Close's wait for acks
			cl, err := Dial(context.Background(), cfg)
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
			var read []message // what the hub read before the end
			if c.end != nil && !c.deaf {
				for len(read) < 2 {
					select {
					case m := <-got:
						read = append(read, m)
					case <-ctx.Done():
						t.Fatal("the hub did not get both partitions")
					}
				}
			}
			if c.name == "pushed, client closes before the answer" || c.name == "pushed, client fails before the answer" {
				// msgPushed is on its way: Wait does not end before it is
				// taken, as the answers never come.
				select {
				case <-h.Done():
					t.Fatal("the push-pull ended without its pulls")
				default:
				}
			}
			switch c.end {
			case nil:
			case ErrClosed:
				cl.Close()
			default:
				cl.Fail(c.end)
			}
			err = h.Wait(ctx)
			if (err == nil) != c.ok || c.end != nil && !errors.Is(err, c.end) && !errors.Is(err, ErrHubLost) {
				t.Fatalf("wait: %v", err)
			}
			// Wait returned without ctx ending: every partition is settled,
			// now and after Close.
			want := slices.Clone(g)
			for p, applied := range c.applied {
				if applied {
					for i := 5 * p; i < 5*p+5; i++ {
						want[i] -= sent[i]
					}
				}
			}
			for _, when := range []string{"after Wait", "after Close"} {
				if when == "after Close" {
					cl.Close()
				}
				r := make([]float64, 10)
				if err := cl.Residual("w", r); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(r, want) {
					t.Fatalf("residual %s %v, want %v", when, r, want)
				}
			}
			for len(got) > 0 {
				read = append(read, <-got)
			}
			// What the hub read is what it was sent: both partitions, as
			// push-pulls that ask to hear of the push, unless deaf.
			if c.deaf != (len(read) == 0) || !c.deaf && len(read) != 2 {
				t.Fatalf("the hub read %d requests", len(read))
			}
			for _, m := range read {
				if m.Type != msgSparsePushPull || m.Part&askPushed == 0 {
					t.Fatalf("the hub read %v with Part %d", m.Type, m.Part)
				}
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
func rawWorker(t *testing.T, addr string, i, w, n int) (net.Conn, *wire.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := wire.DialHandshake(c, "job", []byte(testSecret), wire.Ends{From: w, To: HubTag + i, Size: n}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := shm.Offer(context.Background(), c, shm.Options{}); err != nil {
		t.Fatal(err)
	}
	return c, wire.NewReader(c, 1<<20)
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
				if _, err := c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, m.encode())); err != nil {
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

// TestSparseLeaveKeepsAppliedPush: a worker push-pulls (BSP, its pull
// waiting for the others) and then closes its client, or fails (as when
// gossip or another hub's loss breaks it), with no pause: whatever the
// timing, what the hubs summed plus every worker's residual is the sum
// of every gradient, exactly (integer gradients): a partition the hub
// applied is never put back into the leaver's residual, one it never got
// is. A worker that closes waits for the hubs' acks, so its residual is
// the reference's: its last push landed. Random jobs: 2 to 4 workers, 1
// to 3 hubs, every size, top-k and random-k, float32 and float64, rounds
// before the last.
func TestSparseLeaveKeepsAppliedPush(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	for iter := range 24 {
		workers, hubs := 2+rng.IntN(3), 1+rng.IntN(3)
		n, part := sizes[rng.IntN(len(sizes))], []int{2, 3, 7, 16}[rng.IntN(4)]
		before := rng.IntN(3)
		fail := iter%2 == 1
		sc := SparseConfig{Method: []SparseMethod{TopK, RandomK}[rng.IntN(2)], Ratio: []float64{0.1, 0.3, 0.5}[rng.IntN(3)],
			ErrorFeedback: true, Codec: append(codecs, CodecDefault)[rng.IntN(5)], Seed: rng.Uint64()}
		f32 := rng.IntN(2) == 0
		name := fmt.Sprintf("%d/%d workers %d hubs n %d part %d %v fail %v f32 %v", iter, workers, hubs, n, part, sc, fail, f32)
		t.Run(name, func(t *testing.T) {
			_, addrs := startHubs(t, hubs, workers, fail || rng.IntN(2) == 0) // a failed worker needs elastic hubs
			cs := dialAll(t, workers, addrs, 4*part)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := KeyConfig{Len: n, Sparse: sc}
			if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", cfg) }); err != nil {
				t.Fatal(err)
			}
			total := make([]float64, n)
			refs := make([]SparseRef, workers)
			for w := range refs {
				refs[w] = SparseRef{Cfg: sc, Key: "w", PartElems: part}
			}
			push := func(w, clock int, dst []float64) *Handle {
				g := grads[float64](rng, n, true)
				for i, v := range g {
					total[i] += v
				}
				if f32 {
					RefPush(&refs[w], as32(g), clock)
					return PushPull(cs[w], "w", as32(g), 1, make([]float32, n))
				}
				RefPush(&refs[w], g, clock)
				return PushPull(cs[w], "w", g, 1, dst)
			}
			for clock := range before {
				hs := make([]*Handle, workers)
				for w := range workers {
					hs[w] = push(w, clock, make([]float64, n))
				}
				for w, h := range hs {
					if err := h.Wait(ctx); err != nil {
						t.Fatalf("round %d worker %d: %v", clock, w, err)
					}
				}
			}
			// Worker 0's last push, and it leaves.
			h0 := push(0, before, make([]float64, n))
			if fail {
				cs[0].Fail(&HubLostError{Hub: hubs - 1, Addr: "test", Reason: "a hub lost, as the test says"})
			} else {
				cs[0].Close()
			}
			if err := h0.Wait(ctx); err == nil && n > 0 {
				t.Fatal("worker 0's push-pull answered without the others' pushes")
			}
			r0 := make([]float64, n)
			if err := cs[0].Residual("w", r0); err != nil {
				t.Fatal(err)
			}
			if !fail && !slices.Equal(r0, refs[0].Resid) {
				t.Fatalf("worker 0 closed: residual %v, want the reference's %v (its last push landed)", r0, refs[0].Resid)
			}
			// The others finish the round: the hubs combine it with what
			// they applied of worker 0's.
			value := make([]float64, n) // worker 1's
			hs := make([]*Handle, workers)
			for w := 1; w < workers; w++ {
				dst := value
				if w > 1 {
					dst = make([]float64, n)
				}
				hs[w] = push(w, before, dst)
			}
			for w := 1; w < workers; w++ {
				if err := hs[w].Wait(ctx); err != nil {
					t.Fatalf("worker %d: %v", w, err)
				}
			}
			if f32 { // (the float32 pushes pulled into a buffer of their own)
				if err := Pull(cs[1], "w", value).Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			left := slices.Clone(total)
			for w := range workers {
				r := r0
				if w > 0 {
					r = make([]float64, n)
					if err := cs[w].Residual("w", r); err != nil {
						t.Fatal(err)
					}
				}
				for i := range left {
					left[i] -= r[i]
				}
			}
			if !slices.Equal(value, left) {
				t.Fatalf("the hubs hold %v; the gradients less the residuals are %v (worker 0's residual %v, reference %v)", value, left, r0, refs[0].Resid)
			}
		})
	}
}

// TestSparseDeclareRecordedOnceAccepted: a declare a hub refuses leaves
// the key undeclared on the worker (pushes get ErrUnknownKey), and a
// corrected declare is the one the worker's pushes use: both workers'
// push-pulls then sum as the reference says. A declare whose context
// ends before the answers is retried to the same partitions. A
// re-declare with another length or other sparse settings than the
// accepted one is refused on the worker, naming the key and both
// settings, and the key keeps its own.
func TestSparseDeclareRecordedOnceAccepted(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 37))
	for iter := range 8 {
		n, part, hubs := sizes[1+rng.IntN(len(sizes)-1)], []int{3, 7, 16}[rng.IntN(3)], 1+rng.IntN(3)
		good := SparseConfig{Method: []SparseMethod{TopK, RandomK}[iter%2], Ratio: 0.5, ErrorFeedback: rng.IntN(2) == 0, Seed: rng.Uint64()}
		wrong := good
		switch iter % 4 {
		case 0, 1:
			wrong.Method = TopK + RandomK - good.Method
		case 2:
			wrong.Ratio = 0.25
		case 3:
			wrong.Seed++
		}
		t.Run(fmt.Sprintf("%d/n %d part %d hubs %d %v then %v", iter, n, part, hubs, wrong, good), func(t *testing.T) {
			_, addrs := startHubs(t, hubs, 2, false)
			cs := dialAll(t, 2, addrs, 4*part)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Worker 1's first declare of "a" gives up at once (ctx done):
			// the hubs may or may not have it; it is not declared here.
			gone, stop := context.WithCancel(ctx)
			stop()
			if err := cs[1].Declare(gone, "a", KeyConfig{Len: n, Sparse: good}); err == nil {
				t.Fatal("a declare with its context done succeeded")
			}
			if err := Push(cs[1], "a", make([]float64, n), 1).Wait(ctx); !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("a push of a key whose declare gave up: %v", err)
			}
			if err := cs[1].Declare(ctx, "a", KeyConfig{Len: n + 1, Sparse: good}); !errors.Is(err, ErrShape) {
				t.Fatalf("declared again with another length than placed: %v", err)
			}
			if err := each(2, func(w int) error { return cs[w].Declare(ctx, "a", KeyConfig{Len: n, Sparse: good}) }); err != nil {
				t.Fatal(err)
			}
			// Worker 1 declares "w" wrong, is refused, and corrects it.
			if err := cs[0].Declare(ctx, "w", KeyConfig{Len: n, Sparse: good}); err != nil {
				t.Fatal(err)
			}
			if err := cs[1].Declare(ctx, "w", KeyConfig{Len: n, Sparse: wrong}); !errors.Is(err, ErrShape) {
				t.Fatalf("declared %v against %v: %v", wrong, good, err)
			}
			if err := Push(cs[1], "w", make([]float64, n), 1).Wait(ctx); !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("a push of a refused key: %v", err)
			}
			if err := cs[1].Declare(ctx, "w", KeyConfig{Len: n, Sparse: good}); err != nil {
				t.Fatalf("the corrected declare: %v", err)
			}
			// Re-declares that differ from the accepted config.
			other := good
			other.ErrorFeedback = !good.ErrorFeedback
			for _, bad := range []KeyConfig{{Len: n + 1, Sparse: good}, {Len: n, Sparse: wrong}, {Len: n, Sparse: other}, {Len: n}} {
				err := cs[0].Declare(ctx, "w", bad)
				if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), `key "w"`) || !strings.Contains(err.Error(), good.String()) || !strings.Contains(err.Error(), bad.Sparse.String()) {
					t.Fatalf("re-declare %d elements %v over %d %v: %v", bad.Len, bad.Sparse, n, good, err)
				}
			}
			if err := cs[0].Declare(ctx, "w", KeyConfig{Len: n, Sparse: good}); err != nil {
				t.Fatalf("the same declare again: %v", err)
			}
			// Both keys work, as the reference says.
			for _, key := range []string{"w", "a"} {
				ref := NewTable(2)
				if err := ref.Declare(key, KeyConfig{Len: n}); err != nil {
					t.Fatal(err)
				}
				refs := []SparseRef{{Cfg: good, Key: key, PartElems: part}, {Cfg: good, Key: key, PartElems: part}}
				for clock := range 3 {
					got := make([][]float64, 2)
					if err := each(2, func(w int) error {
						g := grads[float64](rand.New(rand.NewPCG(uint64(w), uint64(clock))), n, true)
						got[w] = make([]float64, n)
						return PushPull(cs[w], key, g, 1, got[w]).Wait(ctx)
					}); err != nil {
						t.Fatalf("key %q round %d: %v", key, clock, err)
					}
					for w := range 2 {
						g := grads[float64](rand.New(rand.NewPCG(uint64(w), uint64(clock))), n, true)
						if err := ref.Push(key, w, clock, RefPush(&refs[w], g, clock), 1); err != nil {
							t.Fatal(err)
						}
					}
					want, _, _, _ := ref.Pull(key, 0, clock+1)
					for w := range 2 {
						if !slices.Equal(got[w], want) {
							t.Fatalf("key %q round %d: worker %d got %v, want %v", key, clock, w, got[w], want)
						}
					}
				}
			}
		})
	}
}

// TestSparseDeclareSizesFloat64: a key Declare accepts can be pushed as
// float32 and as float64, whatever the frame: the largest push of
// either type (every index as far from the last as it can be, values
// that do not compress) fits, so that no push fails on the worker after
// it took its clock. Frames are cut between what the largest float32
// push and the largest float64 push take, where only float32 fits.
func TestSparseDeclareSizesFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 64))
	refused, accepted := 0, 0
	for iter := range 16 {
		part := 50 + rng.IntN(400)
		sc := SparseConfig{Method: []SparseMethod{TopK, RandomK}[rng.IntN(2)], Ratio: []float64{0.3, 0.5, 1}[rng.IntN(3)],
			Codec: codecs[rng.IntN(len(codecs))], ErrorFeedback: rng.IntN(2) == 0}
		k := SparseK(part, sc.Ratio)
		// The worst payloads, encoded as a push does: the k largest
		// magnitudes at the partition's end, random bits.
		worst := func(size int) int {
			g := make([]float64, part)
			for i := part - k; i < part; i++ {
				g[i] = 1e30 * (1 + rng.Float64())
			}
			idx := topK(g, k)
			var p []byte
			var err error
			var z zstdCodec
			wire := idx
			if sc.Method == RandomK {
				wire = nil
			}
			if size == 4 {
				vals := make([]float32, k)
				for j, i := range idx {
					vals[j] = float32(g[i])
				}
				p, err = appendSparse(nil, sc.codec(), vals, wire, &z)
			} else {
				vals := make([]float64, k)
				for j, i := range idx {
					vals[j] = g[i]
				}
				p, err = appendSparse(nil, sc.codec(), vals, wire, &z)
			}
			if err != nil {
				t.Fatal(err)
			}
			return len(p)
		}
		lo, hi := worst(4), worst(8)
		frame := msgHeaderSize + pad8(maxKeyLen) + lo + rng.IntN(hi-lo+1)
		frame = max(frame, 4*part+msgHeaderSize+maxKeyLen+8) // a dense partition fits (ClientConfig.validate)
		t.Run(fmt.Sprintf("%d/part %d %v frame %d", iter, part, sc, frame), func(t *testing.T) {
			_, addrs := startHubs(t, 1, 1, false)
			cfg := clientConfig(0, 1, addrs, 4*part)
			cfg.MaxFrame = frame
			c, err := Dial(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n := part + rng.IntN(2*part)
			if err := c.Declare(ctx, "w", KeyConfig{Len: n, Staleness: Async, Sparse: sc}); err != nil {
				if !strings.Contains(err.Error(), "float64") || !strings.Contains(err.Error(), "MaxFrame") {
					t.Fatalf("refused without saying why: %v", err)
				}
				refused++
				return
			}
			accepted++
			for round := range 3 {
				g := make([]float64, n)
				for i := range g {
					g[i] = math.Float64frombits(rng.Uint64()>>2 | 1<<62) // large, random bits
				}
				if err := Push(c, "w", g, 1).Wait(ctx); err != nil {
					t.Fatalf("round %d: a float64 push of a key Declare accepted: %v", round, err)
				}
				if err := Push(c, "w", as32(g), 1).Wait(ctx); err != nil {
					t.Fatalf("round %d: a float32 push of a key Declare accepted: %v", round, err)
				}
			}
		})
	}
	if refused == 0 || accepted == 0 {
		t.Fatalf("%d keys refused, %d accepted: the frames do not straddle the limit", refused, accepted)
	}
}

// TestSparseWaitAfterFailureSettled: when a client fails with many
// partitions of a push in flight (none written: the hub reads nothing
// after the declares), Wait returns only once Fail has put every one back
// into the residual: the residual read as soon as Wait returns is the
// final one, the whole gradient, as it is after Close.
func TestSparseWaitAfterFailureSettled(t *testing.T) {
	const parts, part = 3000, 3
	n := parts*part - 1
	dial, _ := fakeHub(t, func(message) []message { return nil }, parts)
	cfg := clientConfig(0, 1, []string{"fake"}, 4*part)
	cfg.Dial = dial
	cl, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Declare(ctx, "w", KeyConfig{Len: n, Sparse: SparseConfig{Method: TopK, Ratio: 0.5, ErrorFeedback: true}}); err != nil {
		t.Fatal(err)
	}
	g := grads[float64](rand.New(rand.NewPCG(1, 1)), n, true)
	h := PushPull(cl, "w", g, 1, make([]float64, n))
	seen := make(chan []float64, 1)
	go func() {
		_ = h.Wait(ctx)
		r := make([]float64, n)
		_ = cl.Residual("w", r)
		seen <- r
	}()
	cl.Fail(errors.New("boom"))
	r := <-seen
	if !slices.Equal(r, g) {
		missing := 0
		for i := range r {
			if r[i] != g[i] {
				missing++
			}
		}
		t.Fatalf("when Wait returned, %d of %d elements were not back in the residual", missing, n)
	}
	if err := h.Wait(ctx); err == nil {
		t.Fatal("the push-pull succeeded")
	}
}

// TestRandomKSameOnWorkerAndHub: through the real push path, the indices
// each worker's random-k push selects are the ones the hub applies, at
// every clock. Gradients are positive integers and error feedback is on,
// so a worker's selection is where its residual is zero after the push
// (what it sent left nothing), and what the hubs applied is where the
// value grew in the round (every worker sent something positive there):
// the two sets must be equal, for every worker, with ⌈ratio·len⌉
// elements in each partition, and they must change from clock to clock.
func TestRandomKSameOnWorkerAndHub(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for iter := range 12 {
		workers, hubs, part := 1+rng.IntN(3), 1+rng.IntN(3), []int{3, 5, 16, 40}[rng.IntN(4)]
		n := sizes[1+rng.IntN(len(sizes)-1)]
		num, den := []int{1, 1, 1, 3}[iter%4], []int{10, 4, 2, 4}[iter%4] // the ratio
		sc := SparseConfig{Method: RandomK, Ratio: float64(num) / float64(den), ErrorFeedback: true, Seed: rng.Uint64()}
		t.Run(fmt.Sprintf("%d/%d workers %d hubs n %d part %d %v", iter, workers, hubs, n, part, sc), func(t *testing.T) {
			_, addrs := startHubs(t, hubs, workers, false)
			cs := dialAll(t, workers, addrs, 4*part)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := each(workers, func(w int) error { return cs[w].Declare(ctx, "w", KeyConfig{Len: n, Sparse: sc}) }); err != nil {
				t.Fatal(err)
			}
			prev := make([]float64, n) // the value before the round
			var drawn [][]bool
			choice := false // some partition sends less than all of it
			for off := 0; off < n; off += part {
				l := min(part, n-off)
				choice = choice || max(1, (num*l+den-1)/den) < l
			}
			for clock := range 6 {
				values := make([][]float64, workers)
				if err := each(workers, func(w int) error {
					g := make([]float64, n)
					for i := range g {
						g[i] = float64(1 + rand.New(rand.NewPCG(uint64(w), uint64(clock*n+i))).IntN(50))
					}
					values[w] = make([]float64, n)
					return PushPull(cs[w], "w", g, 1, values[w]).Wait(ctx)
				}); err != nil {
					t.Fatal(err)
				}
				applied := make([]bool, n)
				for i := range applied {
					applied[i] = values[0][i] != prev[i]
				}
				for w := range workers {
					r := make([]float64, n)
					if err := cs[w].Residual("w", r); err != nil {
						t.Fatal(err)
					}
					for i := range r {
						if sel := r[i] == 0; sel != applied[i] {
							t.Fatalf("clock %d: element %d: worker %d selected it %v, the hub applied it %v", clock, i, w, sel, applied[i])
						}
					}
				}
				for off := 0; off < n; off += part {
					l := min(part, n-off)
					count := 0
					for _, a := range applied[off : off+l] {
						if a {
							count++
						}
					}
					if want := max(1, (num*l+den-1)/den); count != want {
						t.Fatalf("clock %d: partition at %d of %d: %d applied, want %d", clock, off, l, count, want)
					}
				}
				drawn = append(drawn, applied)
				prev = values[0]
			}
			if choice && !slices.ContainsFunc(drawn[1:], func(d []bool) bool { return !slices.Equal(d, drawn[0]) }) {
				t.Fatal("every clock drew the same indices")
			}
		})
	}
}
