package ps

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/reduce"
)

// Sparse pushes on the hub's pure core: decoding, the dense sum, and a
// corrupt push failing the key for every worker.

func declareSparse(t *testing.T, c *core, key string, cfg KeyConfig) {
	t.Helper()
	for w := range c.workers {
		out, _ := c.request(w, &message{Type: msgDeclare, ID: 1, Key: key, Count: uint64(cfg.Len), Code: uint8(cfg.Update), Stale: int32(cfg.Staleness),
			LR: cfg.LR, Mom: cfg.Momentum, Kind: uint8(cfg.Sparse.Method), WantOff: math.Float64bits(cfg.Sparse.Ratio), WantLen: cfg.Sparse.Seed})
		if err := errOf(byWorker(t, out)[w]); err != nil {
			t.Fatal(err)
		}
	}
}

// sparseMsg is a worker's sparse push of g (a whole partition named
// key) at clock, as pushSparse builds it without error feedback; it
// returns the dense vector of what it sends.
func sparseMsg(t testing.TB, sc SparseConfig, key string, clock int, g []float64, pull bool) (*message, []float64) {
	t.Helper()
	idx := sparseIndices(sc, g, key, uint32(clock))
	vals := make([]float64, len(idx))
	sent := make([]float64, len(g))
	for j, i := range idx {
		vals[j], sent[i] = g[i], g[i]
	}
	wire := idx
	if sc.Method == RandomK {
		wire = nil
	}
	var z zstdCodec
	p, err := appendSparse(nil, sc.codec(), vals, wire, &z)
	if err != nil {
		t.Fatal(err)
	}
	typ := msgSparsePush
	if pull {
		typ = msgSparsePushPull
	}
	return &message{Type: typ, ID: uint32(100 + clock), Key: key, Clock: uint32(clock), Samples: 1, DType: reduce.Float64,
		Code: uint8(sc.Method), Kind: uint8(sc.codec()), Count: uint64(len(g)), N: uint64(len(idx)), Data: p}, sent
}

// TestCoreSparseMatchesDense: a sparse push changes a key exactly as a
// dense push of what it sends (zeros elsewhere) changes another, in sum
// and SGD mode, under BSP, SSP and ASP.
func TestCoreSparseMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 11))
	for iter := range 150 {
		workers := 1 + rng.IntN(9)
		n := sizes[rng.IntN(len(sizes))]
		sc := SparseConfig{Method: []SparseMethod{TopK, RandomK}[rng.IntN(2)], Ratio: []float64{0.01, 0.1, 0.5, 1}[rng.IntN(4)],
			Codec: codecs[rng.IntN(len(codecs))], Seed: rng.Uint64()}
		cfg := KeyConfig{Len: n, Update: UpdateMode(rng.IntN(2)), LR: 0.1, Momentum: 0.5, Staleness: []int{0, 1, Async}[rng.IntN(3)], Sparse: sc}
		c := newCore(workers, false, 0.3)
		joinAll(t, c)
		declareSparse(t, c, "w", cfg)
		dense := cfg
		dense.Sparse = SparseConfig{}
		ref := NewTable(workers)
		if err := ref.Declare("w", dense); err != nil {
			t.Fatal(err)
		}
		for clock := range 3 {
			for _, w := range rng.Perm(workers) {
				m, sent := sparseMsg(t, sc, "w", clock, gradient(rng, n, true), false)
				m.Samples = uint32(1 + rng.IntN(50))
				out, _ := c.request(w, m)
				if err := errOf(byWorker(t, out)[w]); err != nil {
					t.Fatalf("iter %d: %v", iter, err)
				}
				if err := ref.Push("w", w, clock, sent, int(m.Samples)); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, _, _, err1 := c.table.Pull("w", 0, 3)
		want, _, _, err2 := ref.Pull("w", 0, 3)
		if err1 != nil || err2 != nil || !slices.EqualFunc(got, want, sameFloat) {
			t.Fatalf("iter %d (%d workers, %+v): sparse %v, dense %v (%v %v)", iter, workers, cfg, got, want, err1, err2)
		}
	}
}

// TestCoreSparseCorruptFailsKey: a corrupt sparse push fails the key's
// partition for its sender, for every worker whose pull waits on it
// (their pushes were applied: errPushed), and for every later request,
// naming the key and the sender; other keys go on.
func TestCoreSparseCorruptFailsKey(t *testing.T) {
	sc := SparseConfig{Method: TopK, Ratio: 0.25, Codec: CodecVarint}
	for _, bad := range []struct {
		name  string
		spoil func(*message)
		want  string
	}{
		{"index out of range", func(m *message) { m.Data[len(m.Data)-1] = 0x7f }, "out of range"},
		{"truncated", func(m *message) { m.Data = m.Data[:len(m.Data)-1] }, "ends after"},
		{"wrong count", func(m *message) { m.N++ }, "elements sent where"},
		{"wrong length", func(m *message) { m.Count-- }, "for a partition of"},
		{"wrong method", func(m *message) { m.Code = uint8(RandomK) }, "random-k push of a key declared top-k"},
		{"bad codec", func(m *message) { m.Kind = 77 }, "unknown sparse codec"},
		{"int values", func(m *message) { m.DType = reduce.Int64 }, "float32 or float64"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			c := newCore(3, false, 0.3)
			joinAll(t, c)
			declareSparse(t, c, "w", KeyConfig{Len: 12, Sparse: sc})
			declareSparse(t, c, "v", KeyConfig{Len: 12, Sparse: sc})
			g := make([]float64, 12)
			for i := range g {
				g[i] = float64(i)
			}
			for w := range 2 {
				m, _ := sparseMsg(t, sc, "w", 0, g, true)
				m.ID = uint32(10 + w)
				if out, _ := c.request(w, m); len(out) != 0 {
					t.Fatalf("worker %d answered before the round is complete", w)
				}
			}
			m, _ := sparseMsg(t, sc, "w", 0, g, true)
			m.ID = 12
			bad.spoil(m)
			out, _ := c.request(2, m)
			got := byWorker(t, out)
			if len(got) != 3 {
				t.Fatalf("%d answers, want the sender's and both waiting workers'", len(got))
			}
			for w, r := range got {
				err := errOf(r)
				if r.Type != msgError || r.Kind&errCorruptFlag == 0 || !errors.Is(err, ErrBadRequest) ||
					!strings.Contains(err.Error(), `key "w" from worker 2 at clock 0`) || !strings.Contains(err.Error(), bad.want) {
					t.Fatalf("worker %d: %+v %v", w, r, err)
				}
				if pushed := r.Kind&errPushed != 0; pushed != (w != 2) {
					t.Fatalf("worker %d: push applied %v", w, pushed)
				}
			}
			// Later requests on the key fail at once; another key works.
			out, _ = c.request(0, &message{Type: msgPull, ID: 20, Key: "w", Clock: 1, DType: reduce.Float64})
			if err := errOf(byWorker(t, out)[0]); err == nil || !strings.Contains(err.Error(), "from worker 2") {
				t.Fatalf("later pull: %v", err)
			}
			m, _ = sparseMsg(t, sc, "w", 0, g, false)
			out, _ = c.request(2, m)
			if err := errOf(byWorker(t, out)[2]); err == nil || byWorker(t, out)[2].Kind&errPushed != 0 {
				t.Fatalf("later push: %v", err)
			}
			for w := range 3 {
				m, _ := sparseMsg(t, sc, "v", 0, g, false)
				if out, _ := c.request(w, m); errOf(byWorker(t, out)[w]) != nil {
					t.Fatalf("key v: %v", errOf(byWorker(t, out)[w]))
				}
			}
		})
	}
	// A sparse push of a dense key is as corrupt.
	c := newCore(1, false, 0.3)
	joinAll(t, c)
	declare(t, c, "d", KeyConfig{Len: 4})
	m, _ := sparseMsg(t, sc, "d", 0, []float64{1, 2, 3, 4}, false)
	out, _ := c.request(0, m)
	if err := errOf(byWorker(t, out)[0]); err == nil || !strings.Contains(err.Error(), "declared dense") {
		t.Fatalf("sparse push of a dense key: %v", err)
	}
	// Declares must agree on the method, the ratio and the seed.
	c = newCore(2, false, 0.3)
	joinAll(t, c)
	out, _ = c.request(0, &message{Type: msgDeclare, ID: 1, Key: "w", Count: 4, Kind: uint8(TopK), WantOff: math.Float64bits(0.5)})
	if err := errOf(byWorker(t, out)[0]); err != nil {
		t.Fatal(err)
	}
	out, _ = c.request(1, &message{Type: msgDeclare, ID: 1, Key: "w", Count: 4, Kind: uint8(TopK), WantOff: math.Float64bits(0.25)})
	if err := errOf(byWorker(t, out)[1]); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "ratio 0.5") {
		t.Fatalf("declare at another ratio: %v", err)
	}
}

// FuzzCoreSparsePush: whatever sparse push worker 1 sends while worker
// 0's push-pull waits on the round, both hear the same outcome: both get
// the sum of the two pushes, dense, or both get an error. Never one
// waiting for a round that can no longer complete, never a wrong sum.
func FuzzCoreSparsePush(f *testing.F) {
	sc := SparseConfig{Method: TopK, Ratio: 0.3, Codec: CodecVarint}
	g := []float64{3, -1, 4, 1, -5, 9, 2, -6, 5, 3, -5, 8, 9}
	for _, codec := range codecs {
		for _, method := range []SparseMethod{TopK, RandomK} {
			s := sc
			s.Codec, s.Method = codec, method
			m, _ := sparseMsg(f, s, "w", 0, g, true)
			f.Add(uint8(m.Type), m.Code, m.Kind, m.DType, m.Count, m.N, m.Data)
		}
	}
	f.Fuzz(func(t *testing.T, typ, method, codec, dtype uint8, count, k uint64, p []byte) {
		for _, declared := range []SparseMethod{TopK, RandomK} {
			s := sc
			s.Method = declared
			c := newCore(2, false, 0.3)
			joinAll(t, c)
			declareSparse(t, c, "w", KeyConfig{Len: len(g), Sparse: s})
			m0, sent0 := sparseMsg(t, s, "w", 0, g, true)
			if out, _ := c.request(0, m0); len(out) != 0 {
				t.Fatal("answered early")
			}
			m := &message{Type: msgType(typ%2) + msgSparsePush, ID: 7, Key: "w", Samples: 1, Code: method, Kind: codec, DType: dtype, Count: count, N: k, Data: p}
			out, _ := c.request(1, m)
			got := byWorker(t, out)
			r0, ok := got[0]
			if !ok {
				t.Fatalf("worker 0 is left waiting: %+v", got)
			}
			if err := errOf(r0); err != nil {
				if !errors.Is(err, ErrBadRequest) || errOf(got[1]) == nil {
					t.Fatalf("worker 0 failed with %v, worker 1 with %v", err, errOf(got[1]))
				}
				continue
			}
			// Accepted: the sum is worker 0's and the decoded push's.
			spec, err := checkSparse(KeyConfig{Len: len(g), Sparse: s}, m)
			if err != nil {
				t.Fatalf("accepted a push checkSparse refuses: %v", err)
			}
			idx, vals, err := decodeSparse(spec, p, &c.zstd)
			if err != nil {
				t.Fatalf("accepted a push decodeSparse refuses: %v", err)
			}
			want := slices.Clone(sent0)
			for j, i := range idx {
				want[i] += vals[j]
			}
			if v := f64(r0.Data); !slices.EqualFunc(v, want, sameFloat) {
				t.Fatalf("sum %v, want %v", v, want)
			}
		}
	})
}

// TestCoreSparsePushedAck: a sparse push-pull that asks (askPushed) hears
// msgPushed as soon as its push is applied when its pull cannot be
// answered in the same step, and never otherwise: not when the pull is
// answered at once, not for a refused push, not without the bit, not
// for dense push-pulls. Random jobs under BSP, SSP and ASP, pushes in a
// random order of workers (each in clock order).
func TestCoreSparsePushedAck(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 5))
	var acks, atOnce int // asked sparse pushes that heard msgPushed, and that were answered at once
	for iter := range 200 {
		workers, rounds := 1+rng.IntN(5), 1+rng.IntN(4)
		sc := SparseConfig{Method: []SparseMethod{TopK, RandomK}[rng.IntN(2)], Ratio: 0.5, Codec: CodecVarint}
		stale := []int{0, 1, Async}[rng.IntN(3)]
		c := newCore(workers, false, 0.3)
		joinAll(t, c)
		declareSparse(t, c, "w", KeyConfig{Len: 6, Staleness: stale, Sparse: sc})
		declare(t, c, "d", KeyConfig{Len: 6, Staleness: stale})
		type req struct {
			w      int
			ask    bool
			sparse bool
			bad    bool
			got    []message // what it heard, in order
			same   bool      // its final answer came in the step of its request
		}
		reqs := map[[2]int]*req{}
		next := make([]int, workers) // the next clock of each worker
		id := uint32(0)
		for {
			var ready []int
			for w := range workers {
				if next[w] < rounds {
					ready = append(ready, w)
				}
			}
			if len(ready) == 0 {
				break
			}
			w := ready[rng.IntN(len(ready))]
			clock := next[w]
			next[w]++
			for _, sparse := range []bool{true, false} {
				id++
				r := &req{w: w, ask: rng.IntN(2) == 0, sparse: sparse}
				var m *message
				if sparse {
					m, _ = sparseMsg(t, sc, "w", clock, gradient(rng, 6, false), true)
					if rng.IntN(8) == 0 { // refused before the push: a wrong clock
						m.Clock += 7
						r.bad = true
						next[w]-- // (the clock was not taken)
					}
				} else {
					m = &message{Type: msgPushPull, Key: "d", Clock: uint32(clock), Samples: 1, DType: reduce.Float64, Data: reduce.AsBytes(make([]float64, 6))}
				}
				if r.ask {
					m.Part |= askPushed
				}
				m.ID = id
				reqs[[2]int{w, int(id)}] = r
				out, _ := c.request(w, m)
				for _, o := range out {
					q := reqs[[2]int{o.worker, int(o.msg.ID)}]
					if q == nil {
						t.Fatalf("iter %d: an answer to no request: %+v", iter, o.msg)
					}
					q.got = append(q.got, o.msg)
					if q == r && o.msg.Type != msgPushed {
						r.same = true
					}
				}
				if r.bad {
					break // the dense push of this clock is for a good one
				}
			}
		}
		for k, r := range reqs {
			var finals, pushed int
			for i, m := range r.got {
				switch m.Type {
				case msgPushed:
					pushed++
					if i != 0 {
						t.Fatalf("iter %d: request %v heard msgPushed after %v", iter, k, r.got[0].Type)
					}
				case msgReply, msgError:
					finals++
				}
			}
			want := 0
			if r.ask && r.sparse && !r.bad && !r.same {
				want = 1
			}
			if r.ask && r.sparse && !r.bad {
				acks += want
				atOnce += 1 - want
			}
			if finals != 1 || pushed != want {
				t.Fatalf("iter %d (%d workers, staleness %d): request %v (ask %v sparse %v refused %v answered at once %v) heard %d answers and %d msgPushed, want 1 and %d",
					iter, workers, stale, k, r.ask, r.sparse, r.bad, r.same, finals, pushed, want)
			}
			if r.bad && errOf(r.got[0]) == nil {
				t.Fatalf("iter %d: a push of a wrong clock was applied", iter)
			}
		}
	}
	if acks == 0 || atOnce == 0 {
		t.Fatalf("%d pushes heard msgPushed, %d were answered at once: a case is missing", acks, atOnce)
	}
}

// TestCoreDeclareOfFailedKey: once a corrupt push has failed a key, a
// declare of it fails too, with the same error (ErrCorrupt): every later
// request does.
func TestCoreDeclareOfFailedKey(t *testing.T) {
	sc := SparseConfig{Method: TopK, Ratio: 0.5, Codec: CodecVarint}
	c := newCore(2, false, 0.3)
	joinAll(t, c)
	declareSparse(t, c, "w", KeyConfig{Len: 4, Sparse: sc})
	m, _ := sparseMsg(t, sc, "w", 0, []float64{1, 2, 3, 4}, false)
	m.N++ // corrupt
	if out, _ := c.request(0, m); errOf(byWorker(t, out)[0]) == nil {
		t.Fatal("a corrupt push was taken")
	}
	for w := range 2 {
		out, _ := c.request(w, &message{Type: msgDeclare, ID: 9, Key: "w", Count: 4, Kind: uint8(TopK), WantOff: math.Float64bits(0.5)})
		r := byWorker(t, out)[w]
		if err := errOf(r); err == nil || r.Kind&errCorruptFlag == 0 || !strings.Contains(err.Error(), "from worker 0") {
			t.Fatalf("worker %d's declare of the failed key: %+v %v", w, r, err)
		}
	}
}
