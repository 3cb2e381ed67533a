package exact

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// sumRows32 is SumRows32 of in's rows, one after the other.
func sumRows32(in [][]float32, avg bool) []float32 {
	out := make([]float32, len(in[0]))
	SumRows32(slices.Concat(in...), len(in), out, map[bool]int{true: len(in), false: 1}[avg])
	return out
}

func sumRows64(in [][]float64, avg bool) []float64 {
	out := make([]float64, len(in[0]))
	SumRows64(slices.Concat(in...), len(in), out, map[bool]int{true: len(in), false: 1}[avg])
	return out
}

// values32 draws n float32 values for one rank: magnitudes over many
// binades, cancellation against other ranks (pair), zeros of both signs,
// subnormals and, with special, an Inf or NaN now and then.
func values32(rng *rand.Rand, n, rank int, special bool) []float32 {
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

func values64(rng *rand.Rand, n, rank int, special bool) []float64 {
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

// checkBound checks got against the exact sum of vals (math/big) as
// the package states the bound: IEEE's answer for Inf and NaN, -0 only when
// every term is -0, else within n·2^-(S+1) (the terms' rounding at the
// shared scale S) plus half an ulp of the result (its own rounding).
func checkBound[F float32 | float64](vals []F, got F, n int, avg bool) error {
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
			c = int(Code32(float32(x)))
		} else {
			c = int(Code64(x))
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
	h := Headroom(n)
	var scale, ulp int
	if _, is32 := any(got).(float32); is32 {
		scale, ulp = Scale32(uint8(maxCode), h), 23
	} else {
		scale, ulp = Scale64(int32(maxCode), h), 52
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

// TestConversions: the codes, the fixed-point terms and the way back,
// element by element, against the bound and IEEE, with the ranks' sum
// taken here in two orders (integers: the same).
func TestConversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for n := 1; n <= 16; n++ {
		for _, special := range []bool{false, true} {
			const m = 257
			in32 := make([][]float32, n)
			in64 := make([][]float64, n)
			for r := range n {
				in32[r] = values32(rng, m, r, special)
				in64[r] = values64(rng, m, r, special)
			}
			for _, avg := range []bool{false, true} {
				got32 := sumRows32(in32, avg)
				got64 := sumRows64(in64, avg)
				for i := range m {
					col32 := make([]float32, n)
					col64 := make([]float64, n)
					for r := range n {
						col32[r], col64[r] = in32[r][i], in64[r][i]
					}
					if err := checkBound(col32, got32[i], n, avg); err != nil {
						t.Fatalf("float32 n %d avg %v element %d of %v: %v", n, avg, i, col32, err)
					}
					if err := checkBound(col64, got64[i], n, avg); err != nil {
						t.Fatalf("float64 n %d avg %v element %d of %v: %v", n, avg, i, col64, err)
					}
				}
			}
		}
	}
}

// TestFixedPoint: the fixed-point terms made by shifting the
// significand (fixed32, fixed64) and by float64 arithmetic (toFixed32)
// are x·2^S rounded half to even, as math.Ldexp and
// math.RoundToEven compute it, for random values, subnormals, ties and
// every code at or above the value's own, at several headrooms.
func TestFixedPoint(t *testing.T) {
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
			own := Code32(v)
			for _, d := range []int{0, 1, 7, 30, 254} {
				c := uint8(min(int(own)+d, 254))
				want := int32(math.RoundToEven(math.Ldexp(float64(v), Scale32(c, h))))
				if got := fixed32(v, c, h); got != want {
					t.Fatalf("float32 %g (code %d) at code %d, h %d: %d, want %d", v, own, c, h, got, want)
				}
				var q [1]int32
				if ToFixed32([]float32{v}, []uint8{c}, q[:], h); q[0] != want {
					t.Fatalf("toFixed32 of float32 %g (code %d) at code %d, h %d: %d, want %d", v, own, c, h, q[0], want)
				}
			}
		}
		for _, v := range vals64 {
			own := Code64(v)
			for _, d := range []int32{0, 1, 11, 70, 2046} {
				c := min(own+d, 2046)
				want := int64(math.RoundToEven(math.Ldexp(v, Scale64(c, h))))
				if got := fixed64(v, c, h); got != want {
					t.Fatalf("float64 %g (code %d) at code %d, h %d: %d, want %d", v, own, c, h, got, want)
				}
			}
		}
	}
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

// FuzzSum: any values, on 1 to 5 ranks: the local exact sum keeps its
// bound, and dealing the rows in another order gives the same bits.
func FuzzSum(f *testing.F) {
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
		got := sumRows32(in, false)
		rev := slices.Clone(in)
		slices.Reverse(rev)
		if again := sumRows32(rev, false); !sameBits(got, again) {
			t.Fatalf("another order: %v, then %v", got, again)
		}
		for i := range m {
			col := make([]float32, n)
			for r := range n {
				col[r] = in[r][i]
			}
			if err := checkBound(col, got[i], n, false); err != nil {
				t.Fatalf("element %d of %v: %v", i, col, err)
			}
		}
	})
}

// BenchmarkConvert is the exact sum's work per element outside the
// network: the exponent codes, the fixed-point terms and the way back
// (float32).
func BenchmarkConvert(b *testing.B) {
	const n = 1 << 20
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000)*0.37 - 100
	}
	codes := make([]uint8, n)
	q := make([]int32, n)
	b.SetBytes(4 * n)
	for range b.N {
		Codes32(x, codes)
		ToFixed32(x, codes, q, 2)
		FromFixed32(q, codes, x, 2, 1)
	}
}

// TestSumRowsTiles: SumRows takes its rows a tile at a time; over rows
// longer than a tile, not a multiple of it, and shorter, every element's
// sum has the bits of that element's column summed alone, and SumOf of
// the rows apart, into the first of them, the bits of SumRows.
func TestSumRowsTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 49))
	for _, m := range []int{1, rowTile - 1, rowTile, rowTile + 1, 2*rowTile + 97} {
		for _, n := range []int{1, 2, 3, 7} {
			in32 := make([][]float32, n)
			in64 := make([][]float64, n)
			for r := range n {
				in32[r] = values32(rng, m, r, true)
				in64[r] = values64(rng, m, r, true)
			}
			for _, avg := range []bool{false, true} {
				got32, got64 := sumRows32(in32, avg), sumRows64(in64, avg)
				a32, a64 := make([][]float32, n), make([][]float64, n)
				for r := range n {
					a32[r], a64[r] = slices.Clone(in32[r]), slices.Clone(in64[r])
				}
				div := map[bool]int{true: n, false: 1}[avg]
				SumOf32(a32, a32[0], div)
				SumOf64(a64, a64[0], div)
				if !sameBits(a32[0], got32) || !sameBits(a64[0], got64) {
					t.Fatalf("m %d n %d avg %v: SumOf into its first row differs from SumRows", m, n, avg)
				}
				for i := range m {
					col32 := make([][]float32, n)
					col64 := make([][]float64, n)
					for r := range n {
						col32[r], col64[r] = in32[r][i:i+1], in64[r][i:i+1]
					}
					if want := sumRows32(col32, avg); !sameBits(got32[i:i+1], want) {
						t.Fatalf("float32 m %d n %d avg %v element %d: %v, alone %v", m, n, avg, i, got32[i], want[0])
					}
					if want := sumRows64(col64, avg); !sameBits(got64[i:i+1], want) {
						t.Fatalf("float64 m %d n %d avg %v element %d: %v, alone %v", m, n, avg, i, got64[i], want[0])
					}
				}
			}
		}
	}
}
