package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/reduce/exact"
	"github.com/gorun/gorun/transport/mem"
)

// mixedValues draws n values for one rank: from random bits (every
// binade, and with special some Inf and NaN), from a narrow range (sums
// that round), and zeros of both signs.
func mixedValues[F float32 | float64](rng *rand.Rand, n int, special bool) []F {
	v := make([]F, n)
	for i := range v {
		switch k := rng.IntN(10); k {
		case 0:
			v[i] = F(math.Copysign(0, float64(rng.IntN(2)*2-1)))
		case 1, 2, 3:
			var x float64
			if _, is32 := any(v[i]).(float32); is32 {
				x = float64(math.Float32frombits(rng.Uint32()))
			} else {
				x = math.Float64frombits(rng.Uint64())
			}
			if !special && (math.IsInf(x, 0) || math.IsNaN(x)) {
				x = 1
			}
			v[i] = F(x)
		default:
			v[i] = F(rng.NormFloat64())
		}
	}
	return v
}

// sumRows is the local exact sum of in's rows (package exact, checked there
// against math/big): what every rank must end with, bit for bit.
func sumRows[F float32 | float64](in [][]F, sum func(all []F, n int, out []F, avg int), avg int) []F {
	out := make([]F, len(in[0]))
	sum(slices.Concat(in...), len(in), out, avg)
	return out
}

// sameBits reports whether a and b hold the same bits (NaN equal to NaN
// of the same bits, -0 unequal to +0).
func sameBits[F float32 | float64](a, b []F) bool {
	return slices.EqualFunc(a, b, func(x, y F) bool {
		if xf, ok := any(x).(float32); ok {
			return math.Float32bits(xf) == math.Float32bits(any(y).(float32))
		}
		return math.Float64bits(any(x).(float64)) == math.Float64bits(any(y).(float64))
	})
}

// TestExactCollectives: with Config.Exact, AllReduce (blocking and
// started; gathered when small, in two rounds when not), GroupAllReduce
// (the buffer cut in pieces) and ReduceScatter,
// Sum and Avg, float32 and float64, give the bits of the local exact sum
// on every rank, whatever the algorithm or strategy, on 1 to 16 ranks
// with the inputs dealt to the ranks in a shuffled order; a Min stays a
// plain Min.
func TestExactCollectives(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	type setup struct {
		name string
		set  func(*Config)
	}
	setups := []setup{
		{"auto", func(*Config) {}},
		{"ring", func(c *Config) { c.Algorithm = Ring }},
		{"direct", func(c *Config) { c.Algorithm = Direct }},
		{"doubling", func(c *Config) { c.Algorithm = Doubling }},
		{"halving", func(c *Config) { c.Algorithm = Halving }},
		{"ring small segments", func(c *Config) { c.Algorithm, c.SegmentBytes, c.SmallBytes = Ring, 64, 0 }},
		{"hub", func(c *Config) { c.Strategy, c.ColocatedHubs, c.HubPartitionBytes = StrategyHub, 2, 96 }},
	}
	type job struct{ n, m int }
	var jobs []job
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16} {
		// A small buffer (gathered and summed by each rank) and one past
		// exactGatherBytes (two ranks' pair summed in the ring's exchange,
		// else the two rounds).
		jobs = append(jobs, job{n, []int{0, 1, 3, 13, 257, 1031}[rng.IntN(6)]})
		jobs = append(jobs, job{n, exactGatherBytes/4 + []int{1, 3, 29}[rng.IntN(3)]})
	}
	for _, j := range jobs {
		n, m := j.n, j.m
		in32 := make([][]float32, n)
		in64 := make([][]float64, n)
		for r := range n {
			in32[r] = mixedValues[float32](rng, m, r%3 == 1)
			in64[r] = mixedValues[float64](rng, m, r%3 == 1)
		}
		var want32, avg32 []float32
		var want64 []float64
		if m > 0 {
			want32, avg32, want64 = sumRows(in32, exact.SumRows32, 1), sumRows(in32, exact.SumRows32, n), sumRows(in64, exact.SumRows64, 1)
		}
		for _, s := range setups {
			if s.name == "hub" && n < 2 {
				continue
			}
			deal := rng.Perm(n) // rank r holds input deal[r]
			cfg := DefaultConfig()
			cfg.Exact = true
			s.set(&cfg)
			if s.name == "hub" && m > exactGatherBytes/4 {
				cfg.HubPartitionBytes = 4096 // many partitions still, fewer rounds
			}
			errs := onAll(t, n, cfg, func(c *Comm) error {
				ctx := context.Background()
				r := c.Rank()
				b := slices.Clone(in32[deal[r]])
				if err := AllReduce(ctx, c, b, Sum); err != nil {
					return err
				}
				if m > 0 && !sameBits(b, want32) {
					return fmt.Errorf("AllReduce float32: %v, want %v", b, want32)
				}
				b = slices.Clone(in32[deal[r]])
				if err := StartAllReduce(ctx, c, b, Avg).Wait(ctx); err != nil {
					return err
				}
				if m > 0 && !sameBits(b, avg32) {
					return fmt.Errorf("StartAllReduce Avg float32: %v, want %v", b, avg32)
				}
				d := slices.Clone(in64[deal[r]])
				if err := AllReduce(ctx, c, d, Sum); err != nil {
					return err
				}
				if m > 0 && !sameBits(d, want64) {
					return fmt.Errorf("AllReduce float64: %v, want %v", d, want64)
				}
				// Fused pieces: the same bits as alone.
				b = slices.Clone(in32[deal[r]])
				cut := m / 3
				if err := GroupAllReduce(ctx, c, [][]float32{b[:cut], b[cut:]}, Sum); err != nil {
					return err
				}
				if m > 0 && !sameBits(b, want32) {
					return fmt.Errorf("GroupAllReduce float32: %v, want %v", b, want32)
				}
				b = slices.Clone(in32[deal[r]])
				h := StartGroupAllReduce(ctx, c, [][]float32{b[cut:], b[:cut]}, Sum)
				if err := h.Wait(ctx); err != nil {
					return err
				}
				if m > 0 && !sameBits(b, want32) {
					return fmt.Errorf("StartGroupAllReduce float32: %v, want %v", b, want32)
				}
				b = slices.Clone(in32[deal[r]])
				mine, err := ReduceScatter(ctx, c, b, Sum)
				if err != nil {
					return err
				}
				off, l := Chunk(m, c.Size(), c.Rank())
				if len(mine) != l || m > 0 && !sameBits(mine, want32[off:off+l]) {
					return fmt.Errorf("ReduceScatter float32: %v, want %v", mine, want32[off:off+l])
				}
				// Min is not a sum: untouched by Exact.
				x := []float32{float32(r)}
				if err := AllReduce(ctx, c, x, Min); err != nil || x[0] != 0 {
					return fmt.Errorf("Min: %v %v", x, err)
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s, %d ranks, %d elements: %v", s.name, n, m, err)
			}
		}
	}
}

// TestExactMismatch: ranks that disagree on Exact fail loudly, naming a
// rank, instead of summing one way here and another there.
func TestExactMismatch(t *testing.T) {
	comms, err := NewLocalOn(mem.NewNetwork(2), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	comms[0].SetExact(true)
	errs := make([]error, 2)
	done := make(chan int, 2)
	for i, c := range comms {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10e9)
			defer cancel()
			errs[i] = AllReduce(ctx, c, []float32{1, 2, 3}, Sum)
			done <- i
		}()
	}
	<-done
	<-done
	for i, err := range errs {
		if !errors.Is(err, ErrSizeMismatch) && !errors.Is(err, ErrAborted) {
			t.Fatalf("rank %d: %v, want a mismatch", i, err)
		}
	}
}
