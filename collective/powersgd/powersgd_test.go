package powersgd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/commtest"
	"github.com/gorun/gorun/transport/mem"
)

// onAll runs f on every rank of an in-memory job on nw and returns each
// rank's error.
func onAll(t *testing.T, nw *mem.Network, f func(c *collective.Comm) error) []error {
	t.Helper()
	return commtest.OnAll(t, nw, f)
}

// run is onAll on a fresh network that fails the test on any error.
func run(t *testing.T, n int, f func(c *collective.Comm) error) {
	t.Helper()
	if err := errors.Join(onAll(t, mem.NewNetwork(n), f)...); err != nil {
		t.Fatal(err)
	}
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newCompressor(t *testing.T, cfg Config) *Compressor {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randMatrix(rng *rand.Rand, rows, cols int) []float64 {
	m := make([]float64, rows*cols)
	for i := range m {
		m[i] = rng.NormFloat64()
	}
	return m
}

// lowRankMatrix is U Vᵀ for a rows x r U and a cols x r V.
func lowRankMatrix(u, v []float64, rows, cols, r int) []float64 {
	m := make([]float64, rows*cols)
	for i := range rows {
		for j := range cols {
			for k := range r {
				m[i*cols+j] += u[i*r+k] * v[j*r+k]
			}
		}
	}
	return m
}

func toFloat32(m []float64) []float32 {
	out := make([]float32, len(m))
	for i, v := range m {
		out[i] = float32(v)
	}
	return out
}

// average is the float64 average of the ranks' matrices.
func average(ms [][]float64) []float64 {
	avg := make([]float64, len(ms[0]))
	for _, m := range ms {
		for i, v := range m {
			avg[i] += v
		}
	}
	for i := range avg {
		avg[i] /= float64(len(ms))
	}
	return avg
}

// relErr is max|got − want| / max|want|.
func relErr(got []float32, want []float64) float64 {
	var d, w float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-want[i]))
		w = max(w, math.Abs(want[i]))
	}
	if w == 0 {
		return d
	}
	return d / w
}

// sameBits fails unless every rank's result has the same bits as rank 0's.
func sameBits(t *testing.T, out [][]float32) {
	t.Helper()
	for r := 1; r < len(out); r++ {
		for i := range out[0] {
			if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
				t.Fatalf("rank %d element %d: %v, rank 0 has %v", r, i, out[r][i], out[0][i])
			}
		}
	}
}

// TestExactLowRank: when the average has rank at most Rank, one call
// gives it within float32 rounding (1e-4 of its largest element), on 1-5
// ranks, whether every rank has the same matrix or the ranks' matrices
// share only their column space; the second call too (the residual is
// rounding), and every rank has the same bits.
func TestExactLowRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][2]int{{24, 16}, {7, 30}, {40, 5}, {64, 64}}
	for size := 1; size <= 5; size++ {
		for _, sh := range shapes {
			for trueRank := 1; trueRank <= 3; trueRank++ {
				for _, same := range []bool{true, false} {
					rank := trueRank + rng.IntN(2)
					rows, cols := sh[0], sh[1]
					u := randMatrix(rng, rows, trueRank)
					ms := make([][]float64, size)
					for r := range size {
						if same && r > 0 {
							ms[r] = ms[0]
							continue
						}
						ms[r] = lowRankMatrix(u, randMatrix(rng, cols, trueRank), rows, cols, trueRank)
					}
					want := average(ms)
					cfg := DefaultConfig()
					cfg.Rank, cfg.Seed, cfg.MinCompressionRate = rank, 7, 0
					name := fmt.Sprintf("%d ranks %dx%d rank %d of %d same=%v", size, rows, cols, trueRank, rank, same)
					out := make([][][]float32, 2)
					for call := range out {
						out[call] = make([][]float32, size)
					}
					run(t, size, func(c *collective.Comm) error {
						pc := newCompressor(t, cfg)
						for call := range 2 {
							g := toFloat32(ms[c.Rank()])
							if err := pc.AllReduce(timeout(t), c, "w", g, rows, cols); err != nil {
								return err
							}
							out[call][c.Rank()] = g
						}
						if s := pc.Stats(); s.Compressed != 2 {
							return fmt.Errorf("stats %+v: want 2 compressed calls", s)
						}
						return nil
					})
					for call := range out {
						sameBits(t, out[call])
						if e := relErr(out[call][0], want); e > 1e-4 {
							t.Errorf("%s: call %d: relative error %.3g", name, call+1, e)
						}
					}
				}
			}
		}
	}
}

// efRun runs rounds calls with a fixed random full-rank gradient per
// rank and returns, after each round, the relative distance between the
// sum of what was applied and the sum of the true averages:
// ‖Σ applied − t·avg‖_F / (t·‖avg‖_F).
func efRun(t *testing.T, size, rows, cols, rounds int, cfg Config) []float64 {
	rng := rand.New(rand.NewPCG(3, 4))
	ms := make([][]float64, size)
	for r := range ms {
		ms[r] = randMatrix(rng, rows, cols)
	}
	avg := average(ms)
	var norm float64
	for _, v := range avg {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	dist := make([]float64, rounds)
	var mu sync.Mutex
	run(t, size, func(c *collective.Comm) error {
		pc := newCompressor(t, cfg)
		sum := make([]float64, rows*cols)
		for round := range rounds {
			g := toFloat32(ms[c.Rank()])
			if err := pc.AllReduce(timeout(t), c, "w", g, rows, cols); err != nil {
				return err
			}
			if c.Rank() != 0 {
				continue
			}
			var d float64
			for i, v := range g {
				sum[i] += float64(v)
				e := sum[i] - float64(round+1)*avg[i]
				d += e * e
			}
			mu.Lock()
			dist[round] = math.Sqrt(d) / (float64(round+1) * norm)
			mu.Unlock()
		}
		return nil
	})
	return dist
}

// TestErrorFeedback: with a fixed full-rank gradient per rank (24 x 16,
// rank 2, 3 ranks), the sum of what was applied over t rounds tracks the
// sum of the true averages: its relative distance is below 2% after 400
// rounds and falls as about 1/t (the residual stays bounded: the distance
// times t after 400 rounds is at most 1.5 times its largest value over
// rounds 50-200). Without error feedback the distance stays above 30%.
func TestErrorFeedback(t *testing.T) {
	const rounds = 400
	cfg := DefaultConfig()
	cfg.Rank = 2
	dist := efRun(t, 3, 24, 16, rounds, cfg)
	if d := dist[rounds-1]; d > 0.02 {
		t.Errorf("with error feedback: distance %.4f after %d rounds, want <= 0.02", d, rounds)
	}
	var peak float64 // the largest ‖residual‖ seen, relative to ‖avg‖
	for round := 49; round < 200; round++ {
		peak = max(peak, dist[round]*float64(round+1))
	}
	if last := dist[rounds-1] * rounds; last > 1.5*peak {
		t.Errorf("residual grows: %.3f·‖avg‖ after %d rounds, at most %.3f·‖avg‖ in rounds 50-200", last, rounds, peak)
	}
	t.Logf("error feedback: distance %.4f after 10, %.4f after 100, %.4f after %d rounds; residual <= %.2f·‖avg‖", dist[9], dist[99], dist[rounds-1], rounds, peak)

	cfg.ErrorFeedback = false
	dist = efRun(t, 3, 24, 16, rounds, cfg)
	if d := dist[rounds-1]; d < 0.3 {
		t.Errorf("without error feedback: distance %.4f after %d rounds, want it to stay above 0.3", d, rounds)
	}
	t.Logf("without error feedback: distance %.4f after %d rounds", dist[rounds-1], rounds)
}

// TestSameBits: with different full-rank gradients per rank, with and
// without warm start and error feedback, every rank ends every call with
// the same bits, on 1-5 ranks.
func TestSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for size := 1; size <= 5; size++ {
		for _, warm := range []bool{true, false} {
			for _, ef := range []bool{true, false} {
				cfg := DefaultConfig()
				cfg.Rank, cfg.WarmStart, cfg.ErrorFeedback, cfg.Seed = 3, warm, ef, 11
				const rows, cols, calls = 33, 20, 4
				in := make([][][]float64, calls)
				for k := range in {
					in[k] = make([][]float64, size)
					for r := range size {
						in[k][r] = randMatrix(rng, rows, cols)
					}
				}
				out := make([][][]float32, calls)
				for k := range out {
					out[k] = make([][]float32, size)
				}
				run(t, size, func(c *collective.Comm) error {
					pc := newCompressor(t, cfg)
					for k := range calls {
						g := toFloat32(in[k][c.Rank()])
						if err := pc.AllReduce(timeout(t), c, "w", g, rows, cols); err != nil {
							return err
						}
						out[k][c.Rank()] = g
					}
					return nil
				})
				for k := range calls {
					sameBits(t, out[k])
				}
			}
		}
	}
}

// TestShapes: vectors (1 x N, N x 1) and matrices with a side below Rank
// are averaged exactly, dense under the default rate, low-rank (and still
// exact: the approximation's rank is the smaller side) with rate 0; an
// empty matrix is a no-op on every rank.
func TestShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		rows, cols int
		rate       float64
		dense      bool
	}{
		{1, 50, 2, true}, {50, 1, 2, true}, {1, 50, 0, false}, {50, 1, 0, false},
		{3, 40, 2, true}, {3, 40, 0, false}, {40, 3, 0, false}, {1, 1, 0, false},
		{0, 5, 0, true}, {0, 0, 2, true}, {300, 200, 2, false},
	}
	for size := 1; size <= 5; size++ {
		for _, tc := range cases {
			ms := make([][]float64, size)
			for r := range ms {
				ms[r] = randMatrix(rng, tc.rows, tc.cols)
			}
			want := average(ms)
			cfg := DefaultConfig()
			cfg.Rank, cfg.MinCompressionRate = 4, tc.rate
			out := make([][]float32, size)
			run(t, size, func(c *collective.Comm) error {
				pc := newCompressor(t, cfg)
				g := toFloat32(ms[c.Rank()])
				if err := pc.AllReduce(timeout(t), c, "w", g, tc.rows, tc.cols); err != nil {
					return err
				}
				out[c.Rank()] = g
				s := pc.Stats()
				if tc.dense != (s.Dense == 1) || s.Dense+s.Compressed != 1 {
					return fmt.Errorf("stats %+v, want dense=%v", s, tc.dense)
				}
				return nil
			})
			sameBits(t, out)
			// The 300 x 200 one is full rank: only check it is finite.
			if tc.rows == 300 {
				for _, v := range out[0] {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%dx%d: %v", tc.rows, tc.cols, v)
					}
				}
				continue
			}
			if e := relErr(out[0], want); e > 1e-5 {
				t.Errorf("%d ranks %dx%d rate %v: relative error %.3g", size, tc.rows, tc.cols, tc.rate, e)
			}
		}
	}
}

// TestBadArguments: a grad whose length is not rows·cols, or a negative
// side, fails with ErrShape without sending anything (a 1-rank job: no
// peer to wait for), and a bad Config fails New.
func TestBadArguments(t *testing.T) {
	run(t, 1, func(c *collective.Comm) error {
		pc := newCompressor(t, DefaultConfig())
		for _, a := range [][3]int{{5, 3, 4}, {15, -3, -5}, {0, 1, -1}} {
			if err := pc.AllReduce(timeout(t), c, "w", make([]float32, a[0]), a[1], a[2]); !errors.Is(err, ErrShape) {
				return fmt.Errorf("len %d, %d x %d: %v, want ErrShape", a[0], a[1], a[2], err)
			}
		}
		return nil
	})
	for _, cfg := range []Config{{}, {Rank: 1, MinCompressionRate: -1}, {Rank: 1, MinCompressionRate: math.NaN()}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestMismatch: when rank 0's shape differs from the others' (rows, cols,
// or a dense call against a compressed one of the same length), every
// rank fails with collective.ErrSizeMismatch within the timeout, on 2-5
// ranks.
func TestMismatch(t *testing.T) {
	type shape struct{ rows, cols int }
	tests := []struct {
		name         string
		mine, theirs shape
	}{
		{"rows", shape{21, 12}, shape{20, 12}},
		{"cols", shape{20, 13}, shape{20, 12}},
		{"transposed", shape{12, 20}, shape{20, 12}},
		// 5 x 8 is dense (Avg of 40 floats), 20 x 12 at rank 2 sends a P
		// of 40 floats (Sum): the same length, told apart by the op.
		{"dense against compressed", shape{5, 8}, shape{20, 12}},
	}
	for size := 2; size <= 5; size++ {
		for _, tc := range tests {
			start := time.Now()
			errs := onAll(t, mem.NewNetwork(size), func(c *collective.Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				pc := newCompressor(t, DefaultConfig())
				sh := tc.theirs
				if c.Rank() == 0 {
					sh = tc.mine
				}
				return pc.AllReduce(ctx, c, "w", make([]float32, sh.rows*sh.cols), sh.rows, sh.cols)
			})
			for r, err := range errs {
				if !errors.Is(err, collective.ErrSizeMismatch) {
					t.Errorf("%d ranks, %s: rank %d: %v, want ErrSizeMismatch", size, tc.name, r, err)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%d ranks, %s: took %v", size, tc.name, d)
			}
		}
	}
}

// TestPeerLost: when a rank dies after its first call, the others' calls
// return the collective's error (in their first call or a later one, as
// the death overtakes them), wrapped with the key, within seconds.
func TestPeerLost(t *testing.T) {
	nw := mem.NewNetwork(3)
	start := time.Now()
	errs := onAll(t, nw, func(c *collective.Comm) error {
		pc := newCompressor(t, DefaultConfig())
		g := make([]float32, 16*16)
		if c.Rank() == 2 {
			if err := pc.AllReduce(timeout(t), c, "w", g, 16, 16); err != nil {
				return err
			}
			nw.Kill(2)
			return nil
		}
		for call := range 100 {
			err := pc.AllReduce(timeout(t), c, "w", g, 16, 16)
			if err == nil {
				if call > 0 {
					return fmt.Errorf("rank %d: call %d succeeded after rank 2 died", c.Rank(), call+1)
				}
				continue
			}
			if !errors.Is(err, collective.ErrPeerLost) && !errors.Is(err, collective.ErrAborted) {
				return fmt.Errorf("rank %d: %v, want the loss of rank 2", c.Rank(), err)
			}
			if !strings.Contains(err.Error(), `key "w"`) {
				return fmt.Errorf("rank %d: %v does not name the key", c.Rank(), err)
			}
			return nil
		}
		return fmt.Errorf("rank %d: no error", c.Rank())
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestKeys: interleaved keys keep separate state: one Compressor for two
// keys gives the same bits as one Compressor per key, over several calls.
// A key used with a new shape fails with ErrShapeChanged on every rank,
// with nothing sent (the next call works), until it is forgotten.
func TestKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const size, calls = 3, 5
	shapes := map[string][2]int{"a": {20, 12}, "b": {9, 30}}
	in := map[string][][][]float64{}
	for key, sh := range shapes {
		in[key] = make([][][]float64, calls)
		for k := range calls {
			in[key][k] = make([][]float64, size)
			for r := range size {
				in[key][k][r] = randMatrix(rng, sh[0], sh[1])
			}
		}
	}
	results := func(shared bool) map[string][][]float32 {
		out := map[string][][]float32{"a": make([][]float32, calls), "b": make([][]float32, calls)}
		var mu sync.Mutex
		run(t, size, func(c *collective.Comm) error {
			pcs := map[string]*Compressor{"a": newCompressor(t, DefaultConfig()), "b": newCompressor(t, DefaultConfig())}
			if shared {
				pcs["b"] = pcs["a"]
			}
			for k := range calls {
				for _, key := range []string{"a", "b"} {
					sh := shapes[key]
					g := toFloat32(in[key][k][c.Rank()])
					if err := pcs[key].AllReduce(timeout(t), c, key, g, sh[0], sh[1]); err != nil {
						return err
					}
					if c.Rank() == 0 {
						mu.Lock()
						out[key][k] = g
						mu.Unlock()
					}
				}
			}
			return nil
		})
		return out
	}
	shared, apart := results(true), results(false)
	for _, key := range []string{"a", "b"} {
		for k := range calls {
			sameBits(t, [][]float32{shared[key][k], apart[key][k]})
		}
	}

	run(t, size, func(c *collective.Comm) error {
		pc := newCompressor(t, DefaultConfig())
		call := func(rows, cols int) error {
			return pc.AllReduce(timeout(t), c, "w", make([]float32, rows*cols), rows, cols)
		}
		if err := call(8, 6); err != nil {
			return err
		}
		if err := call(6, 8); !errors.Is(err, ErrShapeChanged) {
			return fmt.Errorf("new shape: %v, want ErrShapeChanged", err)
		}
		if err := call(8, 6); err != nil {
			return fmt.Errorf("after ErrShapeChanged: %v", err)
		}
		pc.Forget("w")
		if err := call(6, 8); err != nil {
			return fmt.Errorf("after Forget: %v", err)
		}
		return nil
	})
}

// TestStats: bytes sent compressed against dense.
func TestStats(t *testing.T) {
	run(t, 2, func(c *collective.Comm) error {
		cfg := DefaultConfig()
		cfg.Rank = 4
		pc := newCompressor(t, cfg)
		if err := pc.AllReduce(timeout(t), c, "w", make([]float32, 256*128), 256, 128); err != nil {
			return err
		}
		if err := pc.AllReduce(timeout(t), c, "b", make([]float32, 128), 1, 128); err != nil {
			return err
		}
		want := Stats{Compressed: 1, Dense: 1, Bytes: (256+128)*4*4 + 128*4, DenseBytes: (256*128 + 128) * 4}
		if s := pc.Stats(); s != want {
			return fmt.Errorf("stats %+v, want %+v", s, want)
		}
		pc.Reset()
		if s := pc.Stats(); s != (Stats{}) || s.Rate() != 0 {
			return fmt.Errorf("after Reset: %+v", s)
		}
		return nil
	})
}

// TestBatch: a batch of dense and compressed gradients gives the same
// bits as one AllReduce per gradient, call after call (each key keeps
// its state), on 1-5 ranks; a key twice in a batch is ErrShape. (The
// buffers here are small: the collective sums each element in the same
// order whatever the buffer's length. Large ones on a ring may round
// differently, as AllReduceBatch says.)
func TestBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	shapes := []struct {
		key        string
		rows, cols int
	}{{"fc1.weight", 30, 20}, {"fc1.bias", 1, 30}, {"fc2.weight", 10, 30}, {"fc2.bias", 1, 10}, {"conv", 8, 45}}
	const calls = 3
	for size := 1; size <= 5; size++ {
		in := make([][][][]float64, calls) // call, matrix, rank
		for k := range in {
			in[k] = make([][][]float64, len(shapes))
			for i, sh := range shapes {
				in[k][i] = make([][]float64, size)
				for r := range size {
					in[k][i][r] = randMatrix(rng, sh.rows, sh.cols)
				}
			}
		}
		results := func(batch bool) [][][]float32 { // call, matrix -> rank 0's result
			out := make([][][]float32, calls)
			var mu sync.Mutex
			run(t, size, func(c *collective.Comm) error {
				pc := newCompressor(t, DefaultConfig())
				for k := range calls {
					ms := make([]Matrix, len(shapes))
					for i, sh := range shapes {
						ms[i] = Matrix{Key: sh.key, Grad: toFloat32(in[k][i][c.Rank()]), Rows: sh.rows, Cols: sh.cols}
					}
					if batch {
						if err := pc.AllReduceBatch(timeout(t), c, ms); err != nil {
							return err
						}
					} else {
						for _, m := range ms {
							if err := pc.AllReduce(timeout(t), c, m.Key, m.Grad, m.Rows, m.Cols); err != nil {
								return err
							}
						}
					}
					if c.Rank() == 0 {
						mu.Lock()
						for _, m := range ms {
							out[k] = append(out[k], m.Grad)
						}
						mu.Unlock()
					}
				}
				if s := pc.Stats(); s.Dense != 2*calls || s.Compressed != 3*calls {
					return fmt.Errorf("stats %+v: want %d dense and %d compressed", s, 2*calls, 3*calls)
				}
				return nil
			})
			return out
		}
		batched, single := results(true), results(false)
		for k := range calls {
			for i := range shapes {
				sameBits(t, [][]float32{batched[k][i], single[k][i]})
			}
		}
	}
	run(t, 1, func(c *collective.Comm) error {
		pc := newCompressor(t, DefaultConfig())
		g := make([]float32, 4)
		err := pc.AllReduceBatch(timeout(t), c, []Matrix{{"a", g, 2, 2}, {"a", g, 2, 2}})
		if !errors.Is(err, ErrShape) {
			return fmt.Errorf("a key twice: %v, want ErrShape", err)
		}
		return nil
	})
}
