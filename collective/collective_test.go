package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gorun/gorun/transport/mem"
)

// lengths covers 0, 1, primes, and (for most sizes) fewer elements than
// ranks, plus lengths that cross the direct/ring threshold.
var lengths = []int{0, 1, 2, 3, 7, 13, 61, 257, 1031, 4099}

var ops = []Op{Sum, Avg, Min, Max, Prod}

func gen[T Number](rng *rand.Rand, n int, op Op) []T {
	v := make([]T, n)
	for i := range v {
		var x float64
		if op == Prod {
			x = 0.5 + rng.Float64() // keep products of floats in range
		} else {
			x = rng.Float64()*200 - 100
		}
		var z T
		switch any(z).(type) {
		case int32, int64, int8, uint8:
			v[i] = T(rng.IntN(201) - 100)
		default:
			v[i] = T(x)
		}
	}
	return v
}

// reference reduces naively in rank order.
func reference[T Number](in [][]T, op Op) []T {
	out := append([]T(nil), in[0]...)
	for _, v := range in[1:] {
		for i := range out {
			switch op {
			case Sum, Avg:
				out[i] += v[i]
			case Min:
				out[i] = min(out[i], v[i])
			case Max:
				out[i] = max(out[i], v[i])
			case Prod:
				out[i] *= v[i]
			}
		}
	}
	if op == Avg {
		for i := range out {
			out[i] /= T(len(in))
		}
	}
	return out
}

// close enough: integers exactly, floats to a relative tolerance that
// covers a different summation order.
func near[T Number](got, want T, n int) bool {
	var z T
	switch any(z).(type) {
	case int32, int64, int8, uint8:
		return got == want
	case float32:
		return math.Abs(float64(got-want)) <= 1e-4*float64(n)*math.Max(1, math.Abs(float64(want)))
	}
	return math.Abs(float64(got-want)) <= 1e-12*float64(n)*math.Max(1, math.Abs(float64(want)))
}

// checkAllReduced checks every rank's result against the reference, and
// that every rank has the same bits.
func checkAllReduced[T Number](t *testing.T, what string, got [][]T, want []T) {
	t.Helper()
	for r := range got {
		for i := range want {
			if !near(got[r][i], want[i], len(got)) {
				t.Fatalf("%s: rank %d [%d] = %v, want %v", what, r, i, got[r][i], want[i])
			}
			if got[r][i] != got[0][i] {
				t.Fatalf("%s: ranks 0 and %d differ at %d: %v vs %v", what, r, i, got[0][i], got[r][i])
			}
		}
	}
}

// onAll runs f on every rank of a NewLocal world.
func onAll(t *testing.T, n int, cfg Config, f func(c *Comm) error) []error {
	t.Helper()
	return onAllNet(t, mem.NewNetwork(n), cfg, f)
}

func testAllReduce[T Number](t *testing.T, algo Algorithm) {
	rng := rand.New(rand.NewPCG(uint64(algo), uint64(dtype[T]())))
	cfg := DefaultConfig()
	cfg.Algorithm, cfg.SmallBytes, cfg.SegmentBytes = algo, 256, 64
	for size := 1; size <= 9; size++ {
		for _, n := range lengths {
			for _, op := range ops {
				in := make([][]T, size)
				for r := range in {
					in[r] = gen[T](rng, n, op)
				}
				want := reference(in, op)
				got := make([][]T, size)
				errs := onAll(t, size, cfg, func(c *Comm) error {
					got[c.Rank()] = append([]T(nil), in[c.Rank()]...)
					return AllReduce(context.Background(), c, got[c.Rank()], op)
				})
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("size %d n %d %v: %v", size, n, op, err)
				}
				checkAllReduced(t, fmt.Sprintf("algo %d size %d n %d %v", algo, size, n, op), got, want)
			}
		}
	}
}

func TestAllReduce(t *testing.T) {
	for _, algo := range []Algorithm{Auto, Ring, Direct, Doubling, Halving} {
		t.Run(fmt.Sprint("algo", algo), func(t *testing.T) {
			testAllReduce[float32](t, algo)
			testAllReduce[float64](t, algo)
			testAllReduce[int32](t, algo)
			testAllReduce[int64](t, algo)
			testAllReduce[int8](t, algo)
			testAllReduce[uint8](t, algo)
		})
	}
}

func testOthers[T Number](t *testing.T) {
	rng := rand.New(rand.NewPCG(9, uint64(dtype[T]())))
	cfg := DefaultConfig()
	cfg.SmallBytes, cfg.SegmentBytes = 128, 64
	for size := 1; size <= 9; size++ {
		for _, n := range lengths {
			// A rank whose check fails returns early: its peers' next
			// call must not wait for it for ever.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			op := ops[rng.IntN(len(ops))]
			root := rng.IntN(size)
			in := make([][]T, size)
			for r := range in {
				in[r] = gen[T](rng, n, op)
			}
			want := reference(in, op)
			errs := onAll(t, size, cfg, func(c *Comm) error {
				r := c.Rank()
				// Broadcast
				b := make([]T, n)
				if r == root {
					copy(b, in[root])
				}
				if err := Broadcast(ctx, c, b, root); err != nil {
					return err
				}
				for i := range b {
					if b[i] != in[root][i] {
						return fmt.Errorf("broadcast from %d: [%d] = %v, want %v", root, i, b[i], in[root][i])
					}
				}
				// Reduce
				buf := append([]T(nil), in[r]...)
				if err := Reduce(ctx, c, buf, op, root); err != nil {
					return err
				}
				if r == root {
					for i := range want {
						if !near(buf[i], want[i], size) {
							return fmt.Errorf("reduce %v: [%d] = %v, want %v", op, i, buf[i], want[i])
						}
					}
				}
				// ReduceScatter
				buf = append([]T(nil), in[r]...)
				mine, err := ReduceScatter(ctx, c, buf, op)
				if err != nil {
					return err
				}
				off, l := Chunk(n, size, r)
				if len(mine) != l {
					return fmt.Errorf("reduce-scatter gave %d elements, want %d", len(mine), l)
				}
				for i := range mine {
					if !near(mine[i], want[off+i], size) {
						return fmt.Errorf("reduce-scatter %v: [%d] = %v, want %v", op, off+i, mine[i], want[off+i])
					}
				}
				// AllGather
				recv := make([]T, n*size)
				if err := AllGather(ctx, c, in[r], recv); err != nil {
					return err
				}
				for q := range size {
					for i := range n {
						if recv[q*n+i] != in[q][i] {
							return fmt.Errorf("all-gather: block %d [%d] = %v, want %v", q, i, recv[q*n+i], in[q][i])
						}
					}
				}
				return c.Barrier(ctx)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("size %d n %d rank %d: %v", size, n, r, err)
				}
			}
		}
	}
}

func TestBroadcastReduceScatterAllGather(t *testing.T) {
	testOthers[float32](t)
	testOthers[float64](t)
	testOthers[int32](t)
	testOthers[int64](t)
	testOthers[int8](t)
	testOthers[uint8](t)
}

// TestMismatches: disagreements between ranks fail every rank with
// ErrSizeMismatch; nothing hangs.
func TestMismatches(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(c *Comm) error{
		"length": func(c *Comm) error {
			return AllReduce(ctx, c, make([]float32, 100+c.Rank()%2), Sum)
		},
		"length small": func(c *Comm) error {
			return AllReduce(ctx, c, make([]float32, 3+c.Rank()%2), Sum)
		},
		"op": func(c *Comm) error {
			op := Sum
			if c.Rank() == 1 {
				op = Max
			}
			return AllReduce(ctx, c, make([]int64, 1000), op)
		},
		"dtype": func(c *Comm) error {
			if c.Rank() == 0 {
				return AllReduce(ctx, c, make([]int32, 10), Sum)
			}
			return AllReduce(ctx, c, make([]float32, 10), Sum)
		},
		"collective": func(c *Comm) error {
			if c.Rank() == 0 {
				return Broadcast(ctx, c, make([]float64, 10), 0)
			}
			return AllReduce(ctx, c, make([]float64, 10), Sum)
		},
		"allgather recv": func(c *Comm) error {
			return AllGather(ctx, c, make([]int32, 4), make([]int32, 4*c.Size()+c.Rank()%2))
		},
	}
	for name, f := range cases {
		for _, size := range []int{2, 3, 5} {
			errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
				err := f(c)
				if err == nil {
					// A rank that only sends (a Broadcast root) may finish
					// first; its next call must report the mismatch.
					err = c.Barrier(ctx)
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, ErrSizeMismatch) {
					t.Errorf("%s size %d: rank %d: got %v, want ErrSizeMismatch", name, size, r, err)
				}
			}
		}
	}
}

// TestCancelWakesEveryone: one rank's cancelled context aborts the
// collective on every rank, and the Comm stays broken afterwards.
func TestCancelWakesEveryone(t *testing.T) {
	errs := onAll(t, 4, DefaultConfig(), func(c *Comm) error {
		ctx := context.Background()
		if c.Rank() == 2 {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			ctx = cctx
		}
		err := AllReduce(ctx, c, make([]float32, 1<<16), Sum)
		if err == nil {
			return errors.New("no error")
		}
		if again := c.Barrier(context.Background()); again == nil {
			return errors.New("a broken Comm ran another collective")
		}
		return err
	})
	for r, err := range errs {
		if r == 2 && !errors.Is(err, context.Canceled) {
			t.Fatalf("rank 2: %v", err)
		}
		if r != 2 && !errors.Is(err, ErrAborted) {
			t.Fatalf("rank %d: got %v, want ErrAborted from rank 2", r, err)
		}
	}
}

// TestTransportConfig: the waiting policy reaches the rank mesh as
// configured, the job's ranks on the host with it.
func TestTransportConfig(t *testing.T) {
	for _, c := range []struct {
		spin  time.Duration
		yield bool
		ranks int
	}{{0, false, 0}, {100 * time.Microsecond, false, 2}, {OversubscribedSpinTime, true, 5}} {
		cfg := DefaultConfig()
		cfg.SpinTime, cfg.SpinYield, cfg.HostRanks = c.spin, c.yield, c.ranks
		tc := transportConfig(cfg, nil)
		if tc.SpinTime != c.spin || tc.SpinYield != c.yield || tc.HostRanks != c.ranks {
			t.Errorf("transportConfig(spin %v, yield %v, %d ranks) = spin %v, yield %v, %d ranks", c.spin, c.yield, c.ranks, tc.SpinTime, tc.SpinYield, tc.HostRanks)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"GORUN_RANK": "1", "GORUN_SIZE": "2", "GORUN_JOB_ID": "abc", "GORUN_JOB_SECRET": "0123456789abcdef0123",
		"GORUN_PEERS": "127.0.0.1:1000,127.0.0.1:1001", "GORUN_ADDR": "127.0.0.1", "GORUN_GOSSIP_PORT": "1001",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := ConfigFromEnv(lookup)
	if err != nil || cfg.Rank != 1 || cfg.Size != 2 || cfg.GossipPort != 1001 || len(cfg.Seeds) != 2 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if cfg.SpinTime <= 0 || cfg.SpinYield || cfg.HostRanks != 0 {
		t.Fatalf("want a plain spin without oversubscription, ranks on the host unknown: %v yield %v, %d ranks", cfg.SpinTime, cfg.SpinYield, cfg.HostRanks)
	}
	env["GORUN_LOCAL_SIZE"] = strconv.Itoa(runtime.NumCPU())
	if cfg, err := ConfigFromEnv(lookup); err != nil || cfg.SpinYield || cfg.HostRanks != runtime.NumCPU() {
		t.Fatalf("a rank a core: %v yield %v, %d ranks, %v", cfg.SpinTime, cfg.SpinYield, cfg.HostRanks, err)
	}
	env["GORUN_LOCAL_SIZE"] = strconv.Itoa(runtime.NumCPU() + 1)
	if cfg, err := ConfigFromEnv(lookup); err != nil || cfg.SpinTime != OversubscribedSpinTime || !cfg.SpinYield || cfg.HostRanks != runtime.NumCPU()+1 {
		t.Fatalf("oversubscribed ranks must spin yielding: %v yield %v, %d ranks, %v", cfg.SpinTime, cfg.SpinYield, cfg.HostRanks, err)
	}
	env["GORUN_LOCAL_SIZE"] = strconv.Itoa(8*runtime.NumCPU() + 1)
	if cfg, err := ConfigFromEnv(lookup); err != nil || cfg.SpinTime != OversubscribedSpinTime || !cfg.SpinYield || cfg.HostRanks != 8*runtime.NumCPU()+1 {
		t.Fatalf("many ranks per core must spin yielding too: %v yield %v, %d ranks, %v", cfg.SpinTime, cfg.SpinYield, cfg.HostRanks, err)
	}
	env["GORUN_SPIN"] = "0"
	if cfg, err := ConfigFromEnv(lookup); err != nil || cfg.SpinTime != 0 {
		t.Fatalf("GORUN_SPIN=0 must turn spinning off: %v %v", cfg.SpinTime, err)
	}
	env["GORUN_SPIN"] = "fast"
	if _, err := ConfigFromEnv(lookup); err == nil || !contains(err.Error(), "GORUN_SPIN") {
		t.Fatalf("a bad GORUN_SPIN was not named: %v", err)
	}
	delete(env, "GORUN_SPIN")
	delete(env, "GORUN_LOCAL_SIZE")
	env["GORUN_STRATEGY"] = "tree"
	if _, err := ConfigFromEnv(lookup); err == nil {
		t.Fatal("unknown strategy accepted")
	}
	delete(env, "GORUN_STRATEGY")
	for a := Auto; a <= Halving; a++ {
		env["GORUN_ALGORITHM"] = a.String()
		if cfg, err := ConfigFromEnv(lookup); err != nil || cfg.Algorithm != a {
			t.Fatalf("GORUN_ALGORITHM=%s gave %v, %v", a, cfg.Algorithm, err)
		}
	}
	env["GORUN_ALGORITHM"] = "tree"
	if _, err := ConfigFromEnv(lookup); err == nil || !contains(err.Error(), "GORUN_ALGORITHM") || !contains(err.Error(), "halving") {
		t.Fatalf("a bad GORUN_ALGORITHM was not named with the choices: %v", err)
	}
	delete(env, "GORUN_ALGORITHM")
	delete(env, "GORUN_RANK")
	delete(env, "GORUN_PEERS")
	_, err = ConfigFromEnv(lookup)
	if err == nil || !errors.Is(err, err) || !contains(err.Error(), "GORUN_RANK, GORUN_PEERS not set") {
		t.Fatalf("missing environment: %v", err)
	}
	if _, err := Join(context.Background()); err == nil {
		t.Fatal("Join outside gorun succeeded")
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestSmallGatherBits: above 8 ranks a small AllGather runs as an OR by
// recursive doubling; every bit pattern must come through, -0 and NaN
// payloads included, and a small ReduceScatter the same way must leave
// each rank its chunk of the exact sum.
func TestSmallGatherBits(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{9, 12, 16} {
		for _, n := range []int{0, 1, 3} {
			in := make([][]float64, size)
			for r := range in {
				in[r] = make([]float64, n)
				for i := range in[r] {
					in[r][i] = math.Float64frombits(uint64(r)<<52 ^ uint64(i)*0x9e3779b97f4a7c15)
				}
				if n > 0 {
					in[r][0] = math.Copysign(0, -1)
				}
				if n > 1 {
					in[r][1] = math.Float64frombits(0x7ff8_0000_0000_0001 + uint64(r))
				}
			}
			errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
				got := make([]float64, n*size)
				for i := range got {
					got[i] = 42 // garbage that must not survive
				}
				if err := AllGather(ctx, c, in[c.Rank()], got); err != nil {
					return err
				}
				for r := range size {
					for i := range n {
						if g, w := math.Float64bits(got[r*n+i]), math.Float64bits(in[r][i]); g != w {
							return fmt.Errorf("rank %d: block %d [%d] = %#x, want %#x", c.Rank(), r, i, g, w)
						}
					}
				}
				buf := make([]int64, 5*size+3)
				for i := range buf {
					buf[i] = int64((c.Rank() + 1) * (i + 1))
				}
				mine, err := ReduceScatter(ctx, c, buf, Sum)
				if err != nil {
					return err
				}
				off, _ := Chunk(len(buf), size, c.Rank())
				for i, v := range mine {
					if want := int64(size*(size+1)/2) * int64(off+i+1); v != want {
						return fmt.Errorf("rank %d: reduce-scatter [%d] = %d, want %d", c.Rank(), off+i, v, want)
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("size %d n %d: %v", size, n, err)
			}
		}
	}
}
