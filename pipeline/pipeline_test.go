package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

func randomData(rng *rand.Rand, n, d int) *Dataset {
	ds := &Dataset{N: n, D: d, X: make([]float32, n*d), Y: make([]int, n)}
	for j := range d {
		mean, scale := rng.NormFloat64()*100, rng.Float64()*10
		if j == 0 {
			scale = 0 // a constant feature
		}
		for i := range n {
			ds.X[i*d+j] = float32(mean + scale*rng.NormFloat64())
		}
	}
	for i := range ds.Y {
		ds.Y[i] = rng.IntN(10)
	}
	return ds
}

// refStats is the single-process reference: float64, two passes.
func refStats(d *Dataset) Stats {
	s := Stats{Count: d.N, Mean: make([]float64, d.D), Var: make([]float64, d.D)}
	for i := range d.N {
		for j, x := range d.Row(i) {
			s.Mean[j] += float64(x)
		}
	}
	for j := range s.Mean {
		s.Mean[j] /= float64(d.N)
	}
	for i := range d.N {
		for j, x := range d.Row(i) {
			dx := float64(x) - s.Mean[j]
			s.Var[j] += dx * dx
		}
	}
	for j := range s.Var {
		s.Var[j] /= float64(d.N)
	}
	return s
}

func close64(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func sameStats(got, want Stats) error {
	if got.Count != want.Count {
		return fmt.Errorf("count %d, want %d", got.Count, want.Count)
	}
	for j := range want.Mean {
		if !close64(got.Mean[j], want.Mean[j]) || !close64(got.Var[j], want.Var[j]) {
			return fmt.Errorf("feature %d: mean %g var %g, want %g %g", j, got.Mean[j], got.Var[j], want.Mean[j], want.Var[j])
		}
	}
	return nil
}

// TestFitAcrossRanks: statistics over shards of random, unequal sizes
// (empty ones too) on 1-9 ranks equal the single-process ones.
func TestFitAcrossRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for size := 1; size <= 9; size++ {
		const d = 5
		n := 1 + rng.IntN(60)
		all := randomData(rng, n, d)
		cuts := []int{0, n}
		for range size - 1 {
			cuts = append(cuts, rng.IntN(n+1))
		}
		slices.Sort(cuts)
		want := refStats(all)
		got := make([]Stats, size)
		errs := onAll(t, mem.NewNetwork(size), func(c *collective.Comm) error {
			r := c.Rank()
			s, err := Fit(context.Background(), FromComm(c), all.Slice(cuts[r], cuts[r+1]))
			got[r] = s
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%d ranks: %v", size, err)
		}
		for r, s := range got {
			if err := sameStats(s, want); err != nil {
				t.Errorf("%d ranks, rank %d (shard %d): %v", size, r, cuts[r+1]-cuts[r], err)
			}
			if !slices.Equal(s.Mean, got[0].Mean) || !slices.Equal(s.Var, got[0].Var) {
				t.Errorf("%d ranks: rank %d's stats differ from rank 0's", size, r)
			}
		}
	}
}

// TestFitEmpty: no samples anywhere is ErrEmpty.
func TestFitEmpty(t *testing.T) {
	errs := onAll(t, mem.NewNetwork(3), func(c *collective.Comm) error {
		_, err := Fit(context.Background(), FromComm(c), &Dataset{D: 2})
		if !errors.Is(err, ErrEmpty) {
			return fmt.Errorf("rank %d: %v, want ErrEmpty", c.Rank(), err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestPrepare: on 1-9 ranks, every rank's prepared data is the same, is
// the reference standardization and filter of the whole set, and the
// filter dropped exactly the samples its rule names.
func TestPrepare(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const d, tol, eps = 3, 0.8, 1e-8
	for size := 1; size <= 9; size++ {
		n := 1 + rng.IntN(200)
		orig := randomData(rng, n, d)
		st := refStats(orig)
		// The reference: standardize, then keep a sample iff some feature
		// is more than tol from 0.
		var wantX []float32
		var wantY []int
		for i := range n {
			z := make([]float32, d)
			far := false
			for j, x := range orig.Row(i) {
				z[j] = float32((float64(x) - st.Mean[j]) / math.Sqrt(st.Var[j]+eps))
				far = far || math.Abs(float64(z[j])) > tol
			}
			if far {
				wantX, wantY = append(wantX, z...), append(wantY, orig.Y[i])
			}
		}
		reps := make([]Report, size)
		data := make([]*Dataset, size)
		errs := onAll(t, mem.NewNetwork(size), func(c *collective.Comm) error {
			mine := &Dataset{N: n, D: d, X: slices.Clone(orig.X), Y: slices.Clone(orig.Y)}
			cfg := DefaultConfig()
			cfg.FilterTol = tol
			p, err := New(mine, cfg)
			if err != nil {
				return err
			}
			reps[c.Rank()], err = p.Prepare(context.Background(), FromComm(c))
			data[c.Rank()] = p.Data()
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%d ranks: %v", size, err)
		}
		for r := range size {
			if reps[r].Dropped != n-len(wantY) || reps[r].N != len(wantY) {
				t.Errorf("%d ranks, rank %d: dropped %d, left %d; want %d, %d", size, r, reps[r].Dropped, reps[r].N, n-len(wantY), len(wantY))
			}
			if !slices.Equal(data[r].Y, wantY) || len(data[r].X) != len(wantX) {
				t.Fatalf("%d ranks, rank %d: kept labels %v, want %v", size, r, data[r].Y, wantY)
			}
			for k := range wantX {
				if math.Abs(float64(data[r].X[k]-wantX[k])) > 1e-5 {
					t.Fatalf("%d ranks, rank %d: feature %d = %g, want %g", size, r, k, data[r].X[k], wantX[k])
				}
			}
			if !slices.Equal(data[r].X, data[0].X) {
				t.Errorf("%d ranks: rank %d's data differs from rank 0's", size, r)
			}
		}
	}
}

// TestFilterRule: the filter drops the samples all of whose features lie
// within tol, boundary included, and nothing else.
func TestFilterRule(t *testing.T) {
	d := &Dataset{N: 5, D: 2, X: []float32{
		0, 0, // dropped
		0.5, -0.5, // dropped: on the boundary
		0.51, 0, // kept
		0, -3, // kept
		-0.1, 0.2, // dropped
	}, Y: []int{0, 1, 2, 3, 4}}
	if n := Filter(d, 0.5); n != 3 {
		t.Fatalf("dropped %d, want 3", n)
	}
	if d.N != 2 || !slices.Equal(d.Y, []int{2, 3}) || !slices.Equal(d.X, []float32{0.51, 0, 0, -3}) {
		t.Fatalf("left %+v", d)
	}
}

// TestInconsistentData: ranks holding different data fail Prepare's
// check instead of training on different sets.
func TestInconsistentData(t *testing.T) {
	errs := onAll(t, mem.NewNetwork(2), func(c *collective.Comm) error {
		x := []float32{0, 10, 0, -10}
		if c.Rank() == 1 {
			x[1] = 0.1
		}
		cfg := DefaultConfig()
		cfg.FilterTol = 0.5
		p, err := New(&Dataset{N: 4, D: 1, X: x, Y: make([]int, 4)}, cfg)
		if err != nil {
			return err
		}
		if _, err := p.Prepare(context.Background(), FromComm(c)); !errors.Is(err, ErrInconsistent) {
			return fmt.Errorf("rank %d: %v, want ErrInconsistent", c.Rank(), err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestPrepareLostPeer: a rank that dies instead of preparing makes every
// other rank's Prepare return the collective's ErrPeerLost, promptly.
func TestPrepareLostPeer(t *testing.T) {
	nw := mem.NewNetwork(3)
	start := time.Now()
	errs := onAll(t, nw, func(c *collective.Comm) error {
		if c.Rank() == 1 {
			nw.Kill(1)
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p, err := New(randomData(rand.New(rand.NewPCG(1, 1)), 10, 2), DefaultConfig())
		if err != nil {
			return err
		}
		_, err = p.Prepare(ctx, FromComm(c))
		if !errors.Is(err, collective.ErrPeerLost) && !errors.Is(err, collective.ErrAborted) {
			return fmt.Errorf("rank %d: %v, want the loss of rank 1", c.Rank(), err)
		}
		if _, again := p.Prepare(ctx, FromComm(c)); again != err {
			return fmt.Errorf("rank %d: Prepare again: %v, want %v", c.Rank(), again, err)
		}
		if _, err := p.Part(0, []int{0, 2}); !errors.Is(err, ErrNotPrepared) {
			return fmt.Errorf("rank %d: Part after a failed Prepare: %v", c.Rank(), err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestConfigValidate(t *testing.T) {
	d := &Dataset{}
	for _, cfg := range []Config{{Epsilon: -1}, {FilterTol: -1}, {FilterTol: 1}} {
		if _, err := New(d, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	if _, err := New(&Dataset{N: 2, D: 1, X: []float32{1}, Y: []int{1, 2}}, DefaultConfig()); err == nil {
		t.Error("a Dataset of the wrong sizes: no error")
	}
}

func TestBlock(t *testing.T) {
	for n := range 20 {
		for size := 1; size <= 9; size++ {
			next := 0
			for i := range size {
				lo, hi := Block(n, size, i)
				if lo != next || hi < lo || hi-lo > n/size+1 || hi-lo < n/size {
					t.Fatalf("Block(%d, %d, %d) = %d, %d", n, size, i, lo, hi)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("Block(%d, %d, ·) ends at %d", n, size, next)
			}
		}
	}
}
