package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/transport/mem"
)

// exactValues32 draws n float32 values for one rank: magnitudes over many
// binades, cancellation against other ranks (pair), zeros of both signs,
// subnormals and, with special, an Inf or NaN now and then.
func exactValues32(rng *rand.Rand, n, rank int, special bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch k := rng.IntN(20); {
		case k == 0:
			v[i] = 0
		case k == 1:
			v[i] = float32(math.Copysign(0, -1))
		case k == 2:
			v[i] = math.Float32frombits(uint32(rng.IntN(1 << 23))) // subnormal
		case k == 3 && special:
			v[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}[rng.IntN(3)]
		case k == 4:
			// Cancels element i of the rank before (the same seed).
			v[i] = -float32(math.Ldexp(1+float64(i%7)/8, (i*13+rank/2)%40-20))
			if rank%2 == 0 {
				v[i] = -v[i]
			}
		default:
			v[i] = float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(80)-40))
		}
	}
	return v
}

func exactValues64(rng *rand.Rand, n, rank int, special bool) []float64 {
	v := make([]float64, n)
	for i := range v {
		switch k := rng.IntN(20); {
		case k == 0:
			v[i] = 0
		case k == 1:
			v[i] = math.Copysign(0, -1)
		case k == 2:
			v[i] = math.Float64frombits(uint64(rng.Int64N(1 << 52)))
		case k == 3 && special:
			v[i] = []float64{math.Inf(1), math.Inf(-1), math.NaN()}[rng.IntN(3)]
		default:
			v[i] = math.Ldexp(rng.Float64()*2-1, rng.IntN(600)-300)
		}
	}
	return v
}

// exactBound checks got against the exact sum of vals (math/big) as
// exact.go states the bound: IEEE's answer for Inf and NaN, -0 only when
// every term is -0, else within n·2^-(S+1) (the terms' rounding at the
// shared scale S) plus half an ulp of the result (its own rounding).
func exactBound[F float32 | float64](vals []F, got F, n int, avg bool) error {
	var pos, neg, nan bool
	allNegZero := true
	maxCode := 0
	exact := new(big.Float).SetPrec(4096)
	for _, v := range vals {
		x := float64(v)
		switch {
		case math.IsNaN(x):
			nan = true
		case math.IsInf(x, 1):
			pos = true
		case math.IsInf(x, -1):
			neg = true
		default:
			exact.Add(exact, new(big.Float).SetFloat64(x))
		}
		if !(x == 0 && math.Signbit(x)) {
			allNegZero = false
		}
		var c int
		if _, is32 := any(v).(float32); is32 {
			c = int(exactCode32(float32(x)))
		} else {
			c = int(exactCode64(x))
		}
		maxCode = max(maxCode, c)
	}
	g := float64(got)
	switch {
	case nan || pos && neg:
		if !math.IsNaN(g) {
			return fmt.Errorf("got %v, want NaN", g)
		}
		return nil
	case pos || neg:
		if !math.IsInf(g, map[bool]int{true: 1, false: -1}[pos]) {
			return fmt.Errorf("got %v, want %v infinity", g, map[bool]string{true: "+", false: "-"}[pos])
		}
		return nil
	case allNegZero:
		if g != 0 || !math.Signbit(g) {
			return fmt.Errorf("got %v, want -0 (every term is -0)", g)
		}
		return nil
	}
	h := headroom(n)
	var scale, ulp int
	if _, is32 := any(got).(float32); is32 {
		scale, ulp = scale32(uint8(maxCode), h), 23
	} else {
		scale, ulp = scale64(int32(maxCode), h), 52
	}
	if avg {
		exact.Quo(exact, big.NewFloat(float64(n)))
	}
	ex, _ := exact.Float64()
	if math.IsInf(g, 0) {
		// Past the type's range: the exact value must be too.
		var top float64 = math.MaxFloat64
		if ulp == 23 {
			top = math.MaxFloat32
		}
		if math.Abs(ex) < top || math.Signbit(ex) != math.Signbit(g) {
			return fmt.Errorf("got %v, exact %v", g, ex)
		}
		return nil
	}
	pow2 := func(k int) *big.Float { return new(big.Float).SetPrec(4096).SetMantExp(big.NewFloat(1), k) }
	bound := new(big.Float).SetPrec(4096).Mul(big.NewFloat(float64(n)), pow2(-scale-1))
	if avg {
		bound.Quo(bound, big.NewFloat(float64(n)))
	}
	_, e := math.Frexp(math.Abs(g))
	// Half an ulp of the result (a subnormal's is the type's least), and
	// as much again for an Avg's division before the last rounding.
	halfUlp := pow2(max(e-ulp-1, map[bool]int{true: -150, false: -1075}[ulp == 23]))
	if avg {
		halfUlp.Mul(halfUlp, big.NewFloat(2))
	}
	bound.Add(bound, halfUlp)
	diff := new(big.Float).Sub(new(big.Float).SetFloat64(g), exact)
	if diff.Abs(diff).Cmp(bound) > 0 {
		return fmt.Errorf("got %v, exact %v: off by %v, bound %v", g, exact.Text('g', 20), diff.Text('g', 6), bound.Text('g', 6))
	}
	return nil
}

// TestExactConversions: the codes, the fixed-point terms and the way back,
// element by element, against the bound and IEEE, with the ranks' sum
// taken here in two orders (integers: the same).
func TestExactConversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for n := 1; n <= 16; n++ {
		for _, special := range []bool{false, true} {
			const m = 257
			in32 := make([][]float32, n)
			in64 := make([][]float64, n)
			for r := range n {
				in32[r] = exactValues32(rng, m, r, special)
				in64[r] = exactValues64(rng, m, r, special)
			}
			for _, avg := range []bool{false, true} {
				got32 := exactLocal32(in32, avg)
				got64 := exactLocal64(in64, avg)
				for i := range m {
					col32 := make([]float32, n)
					col64 := make([]float64, n)
					for r := range n {
						col32[r], col64[r] = in32[r][i], in64[r][i]
					}
					if err := exactBound(col32, got32[i], n, avg); err != nil {
						t.Fatalf("float32 n %d avg %v element %d of %v: %v", n, avg, i, col32, err)
					}
					if err := exactBound(col64, got64[i], n, avg); err != nil {
						t.Fatalf("float64 n %d avg %v element %d of %v: %v", n, avg, i, col64, err)
					}
				}
			}
		}
	}
}

// TestExactFixedPoint: the fixed-point terms made by shifting the
// significand are x·2^S rounded half to even, as math.Ldexp and
// math.RoundToEven compute it, for random values, subnormals, ties and
// every code at or above the value's own, at several headrooms.
func TestExactFixedPoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	vals32 := []float32{1, -1, 1.5, 3, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32, 0x1p-126}
	vals64 := []float64{1, -1, 1.5, 3, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64, 0x1p-1022}
	for range 2000 {
		vals32 = append(vals32, math.Float32frombits(rng.Uint32()&^(255<<23)|uint32(1+rng.IntN(254))<<23))
		vals32 = append(vals32, math.Float32frombits(rng.Uint32()&(1<<31|1<<23-1))) // subnormal
		vals64 = append(vals64, math.Float64frombits(rng.Uint64()&^(2047<<52)|uint64(1+rng.IntN(2046))<<52))
	}
	for _, h := range []int{1, 2, 5, 15} {
		for _, v := range vals32 {
			own := exactCode32(v)
			for _, d := range []int{0, 1, 7, 30, 254} {
				c := uint8(min(int(own)+d, 254))
				want := int32(math.RoundToEven(math.Ldexp(float64(v), scale32(c, h))))
				if got := fixed32(v, c, h); got != want {
					t.Fatalf("float32 %g (code %d) at code %d, h %d: %d, want %d", v, own, c, h, got, want)
				}
			}
		}
		for _, v := range vals64 {
			own := exactCode64(v)
			for _, d := range []int32{0, 1, 11, 70, 2046} {
				c := min(own+d, 2046)
				want := int64(math.RoundToEven(math.Ldexp(v, scale64(c, h))))
				if got := fixed64(v, c, h); got != want {
					t.Fatalf("float64 %g (code %d) at code %d, h %d: %d, want %d", v, own, c, h, got, want)
				}
			}
		}
	}
}

// exactLocal32 is the exact sum of in's rows as the collective computes it,
// all in this process: Max of the codes, the fixed-point terms summed (in
// reverse rank order, to show the order does not matter), and back.
func exactLocal32(in [][]float32, avg bool) []float32 {
	n, m := len(in), len(in[0])
	codes := make([]uint8, m)
	for _, row := range in {
		for i, v := range row {
			codes[i] = max(codes[i], exactCode32(v))
		}
	}
	h := headroom(n)
	sum := make([]int32, m)
	q := make([]int32, m)
	for r := n - 1; r >= 0; r-- {
		toFixed32(in[r], codes, q, h)
		for i := range q {
			sum[i] += q[i]
		}
	}
	out := make([]float32, m)
	fromFixed32(sum, codes, out, h, map[bool]int{true: n, false: 1}[avg])
	return out
}

func exactLocal64(in [][]float64, avg bool) []float64 {
	n, m := len(in), len(in[0])
	codes := make([]int32, m)
	for _, row := range in {
		for i, v := range row {
			codes[i] = max(codes[i], exactCode64(v))
		}
	}
	h := headroom(n)
	sum := make([]int64, m)
	q := make([]int64, m)
	for r := n - 1; r >= 0; r-- {
		toFixed64(in[r], codes, q, h)
		for i := range q {
			sum[i] += q[i]
		}
	}
	out := make([]float64, m)
	fromFixed64(sum, codes, out, h, map[bool]int{true: n, false: 1}[avg])
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
// started), GroupAllReduce (the buffer cut in pieces) and ReduceScatter,
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
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16} {
		m := []int{0, 1, 3, 13, 257, 1031}[rng.IntN(6)]
		in32 := make([][]float32, n)
		in64 := make([][]float64, n)
		for r := range n {
			in32[r] = exactValues32(rng, m, r, r%3 == 1)
			in64[r] = exactValues64(rng, m, r, r%3 == 1)
		}
		var want32, avg32 []float32
		var want64 []float64
		if m > 0 {
			want32, avg32, want64 = exactLocal32(in32, false), exactLocal32(in32, true), exactLocal64(in64, false)
		}
		for _, s := range setups {
			if s.name == "hub" && n < 2 {
				continue
			}
			deal := rng.Perm(n) // rank r holds input deal[r]
			cfg := DefaultConfig()
			cfg.Exact = true
			s.set(&cfg)
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

// FuzzExact: any values, on 1 to 5 ranks: the local exact sum keeps its
// bound, and dealing the rows in another order gives the same bits.
func FuzzExact(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xbf}, uint8(2))
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0x80, 0xff, 0, 0, 0xc0, 0x7f, 1, 0, 0, 0}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, ranks uint8) {
		n := int(ranks%5) + 1
		m := len(b) / 4 / n
		if m == 0 {
			return
		}
		in := make([][]float32, n)
		for r := range n {
			in[r] = make([]float32, m)
			for i := range m {
				o := (r*m + i) * 4
				in[r][i] = math.Float32frombits(uint32(b[o]) | uint32(b[o+1])<<8 | uint32(b[o+2])<<16 | uint32(b[o+3])<<24)
			}
		}
		got := exactLocal32(in, false)
		rev := slices.Clone(in)
		slices.Reverse(rev)
		if again := exactLocal32(rev, false); !sameBits(got, again) {
			t.Fatalf("another order: %v, then %v", got, again)
		}
		for i := range m {
			col := make([]float32, n)
			for r := range n {
				col[r] = in[r][i]
			}
			if err := exactBound(col, got[i], n, false); err != nil {
				t.Fatalf("element %d of %v: %v", i, col, err)
			}
		}
	})
}
