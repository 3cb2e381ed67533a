package exact

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"unsafe"
)

// The kernels (Codes32, ToFixed32, FromFixed32: vector code where the CPU
// has it) are held bit for bit to their element-by-element definitions
// (codes32Go, toFixed32Go, fromFixed32Go) on any input, contract or not.

// kernelCase is one input to the three conversions.
type kernelCase struct {
	x     []float32
	codes []uint8 // for ToFixed32 and FromFixed32
	q     []int32 // for FromFixed32
}

// checkKernels runs the kernels and their definitions on c at headroom h
// and divisor avg, from inputs and into outputs that start off elements
// into their arrays, and reports the first difference.
func checkKernels(c kernelCase, h, avg, off int) error {
	n := len(c.x)
	c = kernelCase{shifted(c.x, off), shifted(c.codes, off), shifted(c.q, off)}
	at := func(k int) int { return off + k*(n+off+8) }
	codes := make([]uint8, at(2))
	Codes32(c.x, codes[at(0):at(0)+n])
	codes32Go(c.x, codes[at(1):at(1)+n])
	if i := firstDiff(codes[at(0):at(0)+n], codes[at(1):at(1)+n]); i >= 0 {
		return fmt.Errorf("Codes32 of %#x: %d, want %d", math.Float32bits(c.x[i]), codes[at(0)+i], codes[at(1)+i])
	}
	q := make([]int32, at(2))
	ToFixed32(c.x, c.codes, q[at(0):at(0)+n], h)
	toFixed32Go(c.x, c.codes, q[at(1):at(1)+n], h)
	if i := firstDiff(q[at(0):at(0)+n], q[at(1):at(1)+n]); i >= 0 {
		return fmt.Errorf("ToFixed32 of %#x at code %d, h %d: %d, want %d", math.Float32bits(c.x[i]), c.codes[i], h, q[at(0)+i], q[at(1)+i])
	}
	// The folding forms SumRows32 uses: codes raised by one more term's,
	// integers added to the sums held (c.codes and c.q as those).
	mc := [2][]uint8{slices.Clone(c.codes[:n]), slices.Clone(c.codes[:n])}
	codesMax32(c.x, mc[0])
	codesMax32Go(c.x, mc[1])
	if i := firstDiff(mc[0], mc[1]); i >= 0 {
		return fmt.Errorf("codesMax32 of %#x over code %d: %d, want %d", math.Float32bits(c.x[i]), c.codes[i], mc[0][i], mc[1][i])
	}
	aq := [2][]int32{slices.Clone(c.q[:n]), slices.Clone(c.q[:n])}
	addFixed32(c.x, c.codes, aq[0], h)
	addFixed32Go(c.x, c.codes, aq[1], h)
	if i := firstDiff(aq[0], aq[1]); i >= 0 {
		return fmt.Errorf("addFixed32 of %#x at code %d, h %d, to %d: %d, want %d", math.Float32bits(c.x[i]), c.codes[i], h, c.q[i], aq[0][i], aq[1][i])
	}
	for i := range n {
		if want := c.q[i] + q[at(1)+i]; aq[1][i] != want {
			return fmt.Errorf("addFixed32Go of %#x at code %d, h %d, to %d: %d, want %d", math.Float32bits(c.x[i]), c.codes[i], h, c.q[i], aq[1][i], want)
		}
		if want := max(c.codes[i], codes[at(1)+i]); mc[1][i] != want {
			return fmt.Errorf("codesMax32Go of %#x over code %d: %d, want %d", math.Float32bits(c.x[i]), c.codes[i], mc[1][i], want)
		}
	}
	out := make([]float32, at(2))
	for _, in := range [][]int32{c.q, q[at(0) : at(0)+n]} {
		FromFixed32(in, c.codes, out[at(0):at(0)+n], h, avg)
		fromFixed32Go(in, c.codes, out[at(1):at(1)+n], h, avg)
		if i := firstDiff(bitsOf(out[at(0):at(0)+n]), bitsOf(out[at(1):at(1)+n])); i >= 0 {
			return fmt.Errorf("FromFixed32 of %d at code %d, h %d, avg %d: %#x, want %#x", in[i], c.codes[i], h, avg,
				math.Float32bits(out[at(0)+i]), math.Float32bits(out[at(1)+i]))
		}
	}
	// Outside the outputs nothing is written.
	for _, s := range [][2]int{{0, at(0)}, {at(0) + n, at(1)}, {at(1) + n, at(2)}} {
		if slices.ContainsFunc(codes[s[0]:s[1]], func(v uint8) bool { return v != 0 }) ||
			slices.ContainsFunc(q[s[0]:s[1]], func(v int32) bool { return v != 0 }) ||
			slices.ContainsFunc(bitsOf(out[s[0]:s[1]]), func(v uint32) bool { return v != 0 }) {
			return fmt.Errorf("a write outside the output (%d elements, offset %d)", n, off)
		}
	}
	return nil
}

// shifted is a copy of s starting off elements into its array.
func shifted[E any](s []E, off int) []E {
	return append(make([]E, off, off+len(s)), s...)[off:]
}

func firstDiff[E comparable](a, b []E) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// bitsOf is the bits of x.
func bitsOf(x []float32) []uint32 {
	u := make([]uint32, len(x))
	for i, v := range x {
		u[i] = math.Float32bits(v)
	}
	return u
}

// kernelValue draws a float32 for kind k: any bits, a value over many
// binades, a zero, a subnormal, an Inf or NaN (any payload), or one near
// a rounding boundary of the fixed point (a tie or one ulp off it).
func kernelValue(rng *rand.Rand, k int) float32 {
	sign := uint32(rng.IntN(2)) << 31
	switch k {
	case 0:
		return math.Float32frombits(rng.Uint32())
	case 1:
		return math.Float32frombits(sign | uint32(rng.IntN(3)))
	case 2:
		return math.Float32frombits(sign | uint32(rng.IntN(1<<23)))
	case 3:
		return math.Float32frombits(sign | 255<<23 | uint32(rng.IntN(1<<23)))
	case 4:
		// A significand whose low bits are a tie at some shift.
		m := uint32(rng.IntN(1<<23)) &^ (1<<uint(rng.IntN(23)) - 1)
		m |= 1 << uint(rng.IntN(23))
		m += uint32(rng.IntN(3)) - 1
		return math.Float32frombits(sign | uint32(1+rng.IntN(254))<<23 | m&(1<<23-1))
	}
	return float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(90)-50))
}

// kernelCodes draws the shared codes of x: at least each element's own,
// up to 254 (some far, most near), with codes 0 and 255 mixed in at the
// rate mix, and codes below an element's own at the rate bad.
func kernelCodes(rng *rand.Rand, x []float32, mix, bad float64) []uint8 {
	codes := make([]uint8, len(x))
	for i, v := range x {
		own := int(Code32(v))
		c := own
		if own < Code32Special {
			switch r := rng.Float64(); {
			case r < 0.5:
			case r < 0.8:
				c = min(own+rng.IntN(4), 254)
			default:
				c = own + rng.IntN(255-own)
			}
		}
		switch r := rng.Float64(); {
		case r < mix/2:
			c = Code32Special
		case r < mix:
			c = Code32NegZero
		case r < mix+bad:
			c = rng.IntN(256)
		}
		codes[i] = uint8(c)
	}
	return codes
}

// kernelSums draws integer sums for FromFixed32: the fixed point of up to
// 16 terms at the codes (a true sum), or any int32 at the rate wild.
func kernelSums(rng *rand.Rand, codes []uint8, h int, wild float64) []int32 {
	q := make([]int32, len(codes))
	for i, c := range codes {
		if rng.Float64() < wild || c == Code32Special {
			q[i] = int32(rng.Uint32())
			continue
		}
		var s int64
		for range 1 + rng.IntN(16) {
			// A term below 2^(31-h) in magnitude.
			s += rng.Int64N(1<<(31-min(h, 30))) - 1<<(30-min(h, 30))
		}
		q[i] = int32(s)
	}
	return q
}

// kernelCaseOf draws a case of n elements: values of the kinds in kinds,
// codes and sums as kernelCodes and kernelSums draw them.
func kernelCaseOf(rng *rand.Rand, n, h int, kinds []int, mix, bad, wild float64) kernelCase {
	x := make([]float32, n)
	for i := range x {
		x[i] = kernelValue(rng, kinds[rng.IntN(len(kinds))])
	}
	codes := kernelCodes(rng, x, mix, bad)
	// codes may be longer than x.
	return kernelCase{x, append(codes, uint8(rng.IntN(256)), uint8(rng.IntN(256))), kernelSums(rng, codes, h, wild)}
}

// The patterns of smallCase's blocks: zeros of every rank (code 1), -0 of
// every rank (code 0), -0 where some rank held +0 (code 1), zeros of both
// signs at codes 0 (-0 only) and 1, subnormals and zeros (code 1),
// ReLU-like halves of zeros among normal values, small codes (2..40, where
// 2^Scale32 passes float32's range for any headroom) with values at most
// their code, all of these lane by lane, and small codes out of contract.
const (
	smallZeros = iota
	smallNegZeros
	smallNegZerosCode1
	smallSignedZeros
	smallSubnormals
	smallReLU
	smallLowCodes
	smallMixed
	smallBad
	smallPatterns
)

// smallLane draws one lane of pattern p (smallMixed: of a random other
// pattern) at headroom h: x, its code and an integer sum at that code.
func smallLane(rng *rand.Rand, p, h int) (float32, uint8, int32) {
	negZero := float32(math.Copysign(0, -1))
	if p == smallMixed {
		p = rng.IntN(smallMixed)
	}
	var x float32
	var c uint8
	switch p {
	case smallZeros:
		x, c = 0, 1
	case smallNegZeros:
		x, c = negZero, Code32NegZero
	case smallNegZerosCode1:
		x, c = negZero, 1
	case smallSignedZeros:
		x, c = []float32{0, negZero}[rng.IntN(2)], 1
		if x == 0 && math.Signbit(float64(x)) && rng.IntN(2) == 0 {
			c = Code32NegZero
		}
	case smallSubnormals:
		x, c = kernelValue(rng, 1+rng.IntN(2)), 1
	case smallReLU:
		x, c = 0, 1
		if rng.IntN(2) == 0 {
			x = kernelValue(rng, 5)
			c = Code32(x)
			if rng.IntN(2) == 0 {
				c = min(c+uint8(rng.IntN(8)), 254)
			}
		}
	case smallLowCodes:
		c = uint8(2 + rng.IntN(39))
		x = math.Float32frombits(uint32(rng.IntN(2))<<31 | uint32(rng.IntN(int(c)))<<23 | uint32(rng.IntN(1<<23)))
	case smallBad:
		// A code of 0..40 whatever x is: below x's own, or 0 under a
		// value other than -0.
		x, c = kernelValue(rng, rng.IntN(6)), uint8(rng.IntN(41))
		if Code32(x) == Code32Special {
			x = 1
		}
	}
	// The sum: 0, a term times up to 2^h-1 ranks, one of up to 16 terms
	// of any size, the least sums (subnormal results at the least codes),
	// or any int32.
	var s int32
	switch r := rng.IntN(10); {
	case r < 3:
	case r < 6:
		if Code32(x) <= c && c != Code32NegZero {
			s = fixed32(x, c, h) * int32(1+rng.IntN(1<<min(max(h, 0), 30)))
		}
	case r < 8:
		s = kernelSums(rng, []uint8{c}, h, 0)[0]
	case r < 9:
		s = int32(rng.IntN(33) - 16)
	default:
		s = int32(rng.Uint32())
	}
	return x, c, s
}

// smallCase draws a case of n elements by blocks of 32, each of one
// pattern (smallBad only when bad is set).
func smallCase(rng *rand.Rand, n, h int, bad bool) kernelCase {
	c := kernelCase{make([]float32, n), make([]uint8, n), make([]int32, n)}
	top := smallBad
	if bad {
		top = smallPatterns
	}
	for b := 0; b < n; b += 32 {
		p := rng.IntN(top)
		for i := b; i < min(b+32, n); i++ {
			c.x[i], c.codes[i], c.q[i] = smallLane(rng, p, h)
		}
	}
	return c
}

// TestKernelsSmallCodes: blocks of zeros, of -0, of subnormals, of small
// codes and of these among normal values, in and out of contract, at
// every h of the contract (and out of it) and many avg, bit for bit.
func TestKernelsSmallCodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(69, 70))
	avgs := append([]int{1, 2, 3, 4, 7, 16, 100, 32767, 0, -3, 1<<31 - 1}, wideAvgs...)
	for h := 0; h <= 32; h++ {
		for _, avg := range avgs {
			for _, n := range []int{32, 1024 + 7} {
				c := smallCase(rng, n, h, rng.IntN(4) == 0)
				if err := checkKernels(c, h, avg, rng.IntN(8)); err != nil {
					t.Fatalf("h %d avg %d, %d elements: %v", h, avg, n, err)
				}
			}
		}
	}
	for _, h := range []int{63, 64, 65, -1} {
		c := smallCase(rng, 1024, h, true)
		if err := checkKernels(c, h, 3, 0); err != nil {
			t.Fatalf("h %d: %v", h, err)
		}
	}
}

// TestSumRowsReLU: SumRows32 of rows with many zeros (ReLU-like: zeros
// every rank holds, zeros of both signs, rows that are all zeros) gives
// the bits of the element-by-element conversions.
func TestSumRowsReLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	var pool sync.Pool
	for n := 1; n <= 17; n++ {
		const m = 32*40 + 5
		all := make([]float32, n*m)
		for i := range m {
			kind := rng.IntN(6)
			for r := range n {
				v := &all[r*m+i]
				switch kind {
				case 0: // every rank's 0
				case 1:
					*v = float32(math.Copysign(0, -1))
				case 2:
					*v = []float32{0, float32(math.Copysign(0, -1))}[rng.IntN(2)]
				case 3:
					if rng.IntN(2) == 0 {
						*v = kernelValue(rng, 2)
					}
				default:
					if rng.IntN(3) > 0 {
						*v = float32(max(rng.NormFloat64(), 0) * 1e-3)
					}
				}
			}
		}
		// Blocks where every rank is all zeros, or all -0.
		for r := range n {
			clear(all[r*m : r*m+64])
			for i := r*m + 64; i < r*m+96; i++ {
				all[i] = float32(math.Copysign(0, -1))
			}
		}
		for _, avg := range []int{1, n} {
			got := make([]float32, m)
			want := make([]float32, m)
			SumRows32(all, n, got, avg)
			sumRows(rowsOf(all, n, m), want, avg, &pool, codes32Go, codesMax32Go, toFixed32Go, addFixed32Go, fromFixed32Go)
			if i := firstDiff(bitsOf(got), bitsOf(want)); i >= 0 {
				t.Fatalf("%d ranks, avg %d, element %d: %g, want %g", n, avg, i, got[i], want[i])
			}
		}
	}
}

// kernelCase64 is one input to the float64 conversions.
type kernelCase64 struct {
	x     []float64
	codes []int32
	q     []int64
}

// checkKernels64 is checkKernels for the float64 conversions.
func checkKernels64(c kernelCase64, h, avg, off int) error {
	n := len(c.x)
	c = kernelCase64{shifted(c.x, off), shifted(c.codes, off), shifted(c.q, off)}
	at := func(k int) int { return off + k*(n+off+8) }
	codes := make([]int32, at(2))
	Codes64(c.x, codes[at(0):at(0)+n])
	codes64Go(c.x, codes[at(1):at(1)+n])
	if i := firstDiff(codes[at(0):at(0)+n], codes[at(1):at(1)+n]); i >= 0 {
		return fmt.Errorf("Codes64 of %#x: %d, want %d", math.Float64bits(c.x[i]), codes[at(0)+i], codes[at(1)+i])
	}
	q := make([]int64, at(2))
	ToFixed64(c.x, c.codes, q[at(0):at(0)+n], h)
	toFixed64Go(c.x, c.codes, q[at(1):at(1)+n], h)
	if i := firstDiff(q[at(0):at(0)+n], q[at(1):at(1)+n]); i >= 0 {
		return fmt.Errorf("ToFixed64 of %#x at code %d, h %d: %d, want %d", math.Float64bits(c.x[i]), c.codes[i], h, q[at(0)+i], q[at(1)+i])
	}
	out := make([]float64, at(2))
	for _, in := range [][]int64{c.q, q[at(0) : at(0)+n]} {
		FromFixed64(in, c.codes, out[at(0):at(0)+n], h, avg)
		fromFixed64Go(in, c.codes, out[at(1):at(1)+n], h, avg)
		if i := firstDiff(bitsOf64(out[at(0):at(0)+n]), bitsOf64(out[at(1):at(1)+n])); i >= 0 {
			return fmt.Errorf("FromFixed64 of %d at code %d, h %d, avg %d: %#x, want %#x", in[i], c.codes[i], h, avg,
				math.Float64bits(out[at(0)+i]), math.Float64bits(out[at(1)+i]))
		}
	}
	for _, s := range [][2]int{{0, at(0)}, {at(0) + n, at(1)}, {at(1) + n, at(2)}} {
		if slices.ContainsFunc(codes[s[0]:s[1]], func(v int32) bool { return v != 0 }) ||
			slices.ContainsFunc(q[s[0]:s[1]], func(v int64) bool { return v != 0 }) ||
			slices.ContainsFunc(bitsOf64(out[s[0]:s[1]]), func(v uint64) bool { return v != 0 }) {
			return fmt.Errorf("a write outside the output (%d elements, offset %d)", n, off)
		}
	}
	return nil
}

func bitsOf64(x []float64) []uint64 {
	u := make([]uint64, len(x))
	for i, v := range x {
		u[i] = math.Float64bits(v)
	}
	return u
}

// kernelValue64 is kernelValue for float64.
func kernelValue64(rng *rand.Rand, k int) float64 {
	sign := uint64(rng.IntN(2)) << 63
	switch k {
	case 0:
		return math.Float64frombits(rng.Uint64())
	case 1:
		return math.Float64frombits(sign | uint64(rng.IntN(3)))
	case 2:
		return math.Float64frombits(sign | rng.Uint64N(1<<52))
	case 3:
		return math.Float64frombits(sign | 2047<<52 | rng.Uint64N(1<<52))
	case 4:
		m := rng.Uint64N(1<<52) &^ (1<<uint(rng.IntN(52)) - 1)
		m |= 1 << uint(rng.IntN(52))
		m += uint64(rng.IntN(3)) - 1
		return math.Float64frombits(sign | uint64(1+rng.IntN(2046))<<52 | m&(1<<52-1))
	}
	return math.Ldexp(rng.Float64()*2-1, rng.IntN(600)-300)
}

// kernelCodes64 is kernelCodes for float64; its codes out of contract
// are any int32.
func kernelCodes64(rng *rand.Rand, x []float64, mix, bad float64) []int32 {
	codes := make([]int32, len(x))
	for i, v := range x {
		c := Code64(v)
		if c < Code64Special {
			switch r := rng.Float64(); {
			case r < 0.5:
			case r < 0.8:
				c = min(c+rng.Int32N(4), 2046)
			default:
				c += rng.Int32N(2047 - c)
			}
		}
		switch r := rng.Float64(); {
		case r < mix/2:
			c = Code64Special
		case r < mix:
			c = 0
		case r < mix+bad/2:
			c = rng.Int32N(2048)
		case r < mix+bad:
			c = int32(rng.Uint32())
		}
		codes[i] = c
	}
	return codes
}

// kernelSums64 is kernelSums for float64.
func kernelSums64(rng *rand.Rand, codes []int32, h int, wild float64) []int64 {
	q := make([]int64, len(codes))
	hh := min(max(h, 1), 62)
	for i, c := range codes {
		if rng.Float64() < wild || c == Code64Special {
			q[i] = int64(rng.Uint64())
			continue
		}
		var s int64
		for range 1 + rng.IntN(16) {
			s += rng.Int64N(1<<(63-hh)) - 1<<(62-hh)
		}
		q[i] = s
	}
	return q
}

func kernelCaseOf64(rng *rand.Rand, n, h int, kinds []int, mix, bad, wild float64) kernelCase64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = kernelValue64(rng, kinds[rng.IntN(len(kinds))])
	}
	codes := kernelCodes64(rng, x, mix, bad)
	return kernelCase64{x, append(codes, rng.Int32(), rng.Int32()), kernelSums64(rng, codes, h, wild)}
}

// regimes are the mixes of values and codes the kernel tests draw from:
// clean data the vector code converts whole, data with now and then a
// special or a code outside its range, and anything.
var regimes = []struct {
	name           string
	kinds          []int
	mix, bad, wild float64
}{
	{"clean", []int{5}, 0, 0, 0},
	{"zeros", []int{1, 5, 5, 5}, 0.001, 0, 0},
	{"ties", []int{4}, 0, 0, 0.01},
	{"sprinkled", []int{1, 2, 3, 4, 5, 5, 5, 5, 5, 5}, 0.02, 0.005, 0.01},
	{"any", []int{0, 1, 2, 3, 4, 5}, 0.1, 0.1, 0.5},
	{"bits", []int{0}, 0.05, 0.3, 1},
}

// wideAvgs are divisors past int32 where int holds them (the vector code
// takes those up to 2^31).
var wideAvgs = func() []int {
	var w []int
	for _, v := range []int64{1 << 31, 1<<31 + 1, 1 << 40, 1<<50 + 1} {
		if v <= math.MaxInt {
			w = append(w, int(v))
		}
	}
	return w
}()

// TestKernels: every length 0..70 and some thousands, at offsets 0..7
// elements, h 1..15 and avg 1, 2, 3, 7 and 16 (and out-of-contract h and
// avg), in every regime.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	lengths := []int{1000, 1024, 4096 + 13}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	hs := []int{0, 16, 29, 30, 31, 64, 65, -1}
	for h := 1; h <= 15; h++ {
		hs = append(hs, h)
	}
	avgs := append([]int{1, 2, 3, 7, 16, 0, -3, 5, 6, 32767, 1<<31 - 1}, wideAvgs...)
	for _, rg := range regimes {
		for _, n := range lengths {
			for off := range 8 {
				h := hs[rng.IntN(len(hs))]
				if rng.IntN(2) == 0 {
					h = 1 + rng.IntN(15)
				}
				avg := avgs[rng.IntN(5)]
				if rng.IntN(4) == 0 {
					avg = avgs[rng.IntN(len(avgs))]
				}
				c := kernelCaseOf(rng, n, h, rg.kinds, rg.mix, rg.bad, rg.wild)
				if err := checkKernels(c, h, avg, off); err != nil {
					t.Fatalf("%s, %d elements, offset %d: %v", rg.name, n, off, err)
				}
				c64 := kernelCaseOf64(rng, n, h, rg.kinds, rg.mix, rg.bad, rg.wild)
				if err := checkKernels64(c64, h, avg, off); err != nil {
					t.Fatalf("%s, %d elements, offset %d: %v", rg.name, n, off, err)
				}
			}
		}
	}
}

// TestKernelsEveryHeadroom: clean blocks at every h and avg of the
// contract and every code the vector code takes, so that it converts
// them whole (on amd64 with AVX2).
func TestKernelsEveryHeadroom(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	for h := 0; h <= 31; h++ {
		for _, avg := range []int{1, 2, 3, 4, 5, 7, 16, 100, 32767} {
			c := kernelCaseOf(rng, 2048, h, []int{0, 2, 4, 5}, 0, 0, 0.1)
			if err := checkKernels(c, h, avg, rng.IntN(8)); err != nil {
				t.Fatalf("h %d avg %d: %v", h, avg, err)
			}
			// Every code from 0 to 255 in turn, the values at most their code.
			for i := range c.x {
				c.codes[i] = uint8(i)
				switch {
				case i%256 == Code32NegZero:
					c.x[i] = float32(math.Copysign(0, -1))
				case i%256 < Code32Special && Code32(c.x[i]) == Code32Special:
					c.x[i] = 1
				}
				for Code32(c.x[i]) > c.codes[i] {
					c.x[i] /= 1 << 16
				}
			}
			if err := checkKernels(c, h, avg, 0); err != nil {
				t.Fatalf("h %d avg %d, every code: %v", h, avg, err)
			}

			c64 := kernelCaseOf64(rng, 2048, h, []int{0, 2, 4, 5}, 0, 0, 0.1)
			if err := checkKernels64(c64, h, avg, rng.IntN(8)); err != nil {
				t.Fatalf("h %d avg %d: %v", h, avg, err)
			}
			for i := range c64.x {
				c64.codes[i] = int32(i)
				switch {
				case i == 0:
					c64.x[i] = math.Copysign(0, -1)
				case i < Code64Special && Code64(c64.x[i]) == Code64Special:
					c64.x[i] = 1
				}
				for Code64(c64.x[i]) > c64.codes[i] {
					c64.x[i] /= 1 << 60
				}
			}
			if err := checkKernels64(c64, h, avg, 0); err != nil {
				t.Fatalf("h %d avg %d, every code: %v", h, avg, err)
			}
		}
	}
}

// borderCodes are n codes by blocks of 32, each block's near one end of
// lo..hi (where the vector code's range of codes may end), or anywhere in
// 1..top.
func borderCodes[C uint8 | int32](rng *rand.Rand, n, lo, hi, top int) []C {
	codes := make([]C, n)
	for b := 0; b < n; b += 32 {
		base := []int{lo, hi, 1 + rng.IntN(top)}[rng.IntN(3)] + rng.IntN(5) - 2
		for i := b; i < min(b+32, n); i++ {
			codes[i] = C(min(max(base+rng.IntN(2), 1), top))
		}
	}
	return codes
}

// quotientSums are integer sums for the division tests: the extremes,
// every one in -2000..2000, then any of many magnitudes.
func quotientSums[Q int32 | int64](rng *rand.Rand, bits int) []Q {
	top := Q(1)<<(bits-1) - 1
	q := []Q{top, -top - 1, -top, top - 1}
	for i := -2000; i <= 2000; i++ {
		q = append(q, Q(i))
	}
	for range 1024 {
		q = append(q, Q(rng.Uint64()>>(64-bits))>>rng.IntN(bits))
	}
	return q[:len(q)&^31]
}

// TestKernelsQuotient: FromFixed32's division by avg, over many divisors,
// at codes in the middle and near the ends of the vector code's range,
// and at the least codes. The quotient must be the division's in float64
// where float32 rounds it again, as at a midpoint between float32s.
func TestKernelsQuotient(t *testing.T) {
	rng := rand.New(rand.NewPCG(55, 56))
	q := quotientSums[int32](rng, 32)
	got := make([]float32, len(q))
	want := make([]float32, len(q))
	avgs := append([]int{32767, 32765, 32749, 1<<31 - 1, 1<<31 - 3, 99991, 65535, 1 << 20}, wideAvgs...)
	for avg := 2; avg <= 300; avg++ {
		avgs = append(avgs, avg)
	}
	for _, avg := range avgs {
		h := 1 + rng.IntN(15)
		k := bits.Len(uint(avg))
		// Sums whose quotients are midpoints between float32s (an odd
		// 25-bit integer), and one off them, for the divisors that have
		// them in int32.
		for i := 0; avg < 1<<6 && i < 1024; i++ {
			m := (1<<24 + rng.IntN(1<<24)) | 1
			s := m*avg + rng.IntN(3) - 1
			q[4+i] = int32(s<<rng.IntN(bits.LeadingZeros32(uint32(s)))) * int32(1-2*rng.IntN(2))
		}
		for _, codes := range [][]uint8{
			borderCodes[uint8](rng, len(q), 120, 140, 254),
			borderCodes[uint8](rng, len(q), 31-h+k, 254, 254),
			borderCodes[uint8](rng, len(q), 30-h+k, 284-h, 254),
			// The least codes, converted in float64.
			borderCodes[uint8](rng, len(q), 1, 31-h+k, 40),
		} {
			FromFixed32(q, codes, got, h, avg)
			fromFixed32Go(q, codes, want, h, avg)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d / %d at code %d, h %d: %g, want %g", q[i], avg, codes[i], h, got[i], want[i])
				}
			}
		}
	}
}

// TestKernelsLeastCodes: the least sums (±1..±16) divided by every avg up
// to 1000, at every code near the least the vector code takes (below it
// the quotient is a subnormal float32 or float64, where rounding twice
// differs from rounding once).
func TestKernelsLeastCodes(t *testing.T) {
	q32 := make([]int32, 32)
	q64 := make([]int64, 32)
	for i := range q32 {
		q32[i] = int32(i/2+1) * int32(1-2*(i%2))
		q64[i] = int64(q32[i])
	}
	got32, want32 := make([]float32, 32), make([]float32, 32)
	got64, want64 := make([]float64, 32), make([]float64, 32)
	codes32, codes64 := make([]uint8, 32), make([]int32, 32)
	for avg := 1; avg <= 1000; avg++ {
		k := bits.Len(uint(avg))
		for _, h := range []int{1, 2, 7, 15} {
			for d := -3; d <= 3; d++ {
				for i := range codes32 {
					codes32[i] = uint8(max(31-h+k+d, 1))
					codes64[i] = int32(63 - h + k + d)
				}
				FromFixed32(q32, codes32, got32, h, avg)
				fromFixed32Go(q32, codes32, want32, h, avg)
				if i := firstDiff(bitsOf(got32), bitsOf(want32)); i >= 0 {
					t.Fatalf("%d / %d at code %d, h %d: %g, want %g", q32[i], avg, codes32[i], h, got32[i], want32[i])
				}
				FromFixed64(q64, codes64, got64, h, avg)
				fromFixed64Go(q64, codes64, want64, h, avg)
				if i := firstDiff(bitsOf64(got64), bitsOf64(want64)); i >= 0 {
					t.Fatalf("%d / %d at code %d, h %d: %g, want %g", q64[i], avg, codes64[i], h, got64[i], want64[i])
				}
			}
		}
	}
}

// TestKernelsQuotient64 is TestKernelsQuotient for FromFixed64.
func TestKernelsQuotient64(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	q := quotientSums[int64](rng, 64)
	got := make([]float64, len(q))
	want := make([]float64, len(q))
	avgs := append([]int{32767, 32765, 32749, 1<<31 - 1, 1<<31 - 3, 99991, 65535, 1 << 20}, wideAvgs...)
	for avg := 2; avg <= 300; avg++ {
		avgs = append(avgs, avg)
	}
	for _, avg := range avgs {
		h := 1 + rng.IntN(15)
		k := bits.Len(uint(avg))
		for _, codes := range [][]int32{
			borderCodes[int32](rng, len(q), 1000, 1100, 2046),
			borderCodes[int32](rng, len(q), 63-h+k, 2045-h, 2046),
			borderCodes[int32](rng, len(q), 63-h, 2108-h, 2046),
		} {
			FromFixed64(q, codes, got, h, avg)
			fromFixed64Go(q, codes, want, h, avg)
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%d / %d at code %d, h %d: %g, want %g", q[i], avg, codes[i], h, got[i], want[i])
				}
			}
		}
	}
}

// TestKernelsInPlace: FromFixed32 and FromFixed64 may write their floats
// over their integers, ToFixed32 and ToFixed64 their integers over their
// floats.
func TestKernelsInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 58))
	for _, avg := range []int{1, 3} {
		// Normal values with now and then a code 0 or 255, and blocks of
		// small codes (zeros, -0, subnormals).
		for _, c := range []kernelCase{kernelCaseOf(rng, 1000, 4, []int{5}, 0.01, 0, 0), smallCase(rng, 1000, 4, false)} {
			want := make([]float32, len(c.q))
			fromFixed32Go(c.q, c.codes, want, 4, avg)
			buf := slices.Clone(c.q)
			FromFixed32(buf, c.codes, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)), 4, avg)
			for i, w := range want {
				if got := math.Float32frombits(uint32(buf[i])); math.Float32bits(got) != math.Float32bits(w) {
					t.Fatalf("avg %d element %d in place: %g, want %g", avg, i, got, w)
				}
			}
			// ToFixed32 may write its integers over its floats.
			wantQ := make([]int32, len(c.x))
			toFixed32Go(c.x, c.codes, wantQ, 4)
			bufX := slices.Clone(c.x)
			ToFixed32(bufX, c.codes, unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(bufX))), len(bufX)), 4)
			for i, w := range wantQ {
				if got := int32(math.Float32bits(bufX[i])); got != w {
					t.Fatalf("ToFixed32 element %d in place: %d, want %d", i, got, w)
				}
			}
		}

		c64 := kernelCaseOf64(rng, 1000, 4, []int{5}, 0.01, 0, 0)
		want64 := make([]float64, len(c64.q))
		fromFixed64Go(c64.q, c64.codes, want64, 4, avg)
		buf64 := slices.Clone(c64.q)
		FromFixed64(buf64, c64.codes, unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(buf64))), len(buf64)), 4, avg)
		for i, w := range want64 {
			if got := math.Float64frombits(uint64(buf64[i])); math.Float64bits(got) != math.Float64bits(w) {
				t.Fatalf("float64 avg %d element %d in place: %g, want %g", avg, i, got, w)
			}
		}
		// ToFixed64 may write its integers over its floats.
		wantQ := make([]int64, len(c64.x))
		toFixed64Go(c64.x, c64.codes, wantQ, 4)
		bufX := slices.Clone(c64.x)
		ToFixed64(bufX, c64.codes, unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(bufX))), len(bufX)), 4)
		for i, w := range wantQ {
			if got := int64(math.Float64bits(bufX[i])); got != w {
				t.Fatalf("ToFixed64 element %d in place: %d, want %d", i, got, w)
			}
		}
	}
}

// FuzzKernels: any bytes as float32s (4 bytes each) and float64s (8),
// a code byte each (its own code raised, or any) and the same bytes as
// integer sums, at any h and avg.
func FuzzKernels(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xbf, 0, 0, 0xc0, 0x7f, 1, 0, 0, 0x80}, []byte{0, 3, 200, 255}, uint8(2), uint16(3), uint8(1))
	f.Add(make([]byte, 4*100), []byte{0}, uint8(5), uint16(1), uint8(0))
	f.Fuzz(func(t *testing.T, xb, cb []byte, h uint8, avg uint16, off uint8) {
		n := len(xb) / 4
		c := kernelCase{x: make([]float32, n), codes: make([]uint8, n), q: make([]int32, n)}
		for i := range n {
			u := binary.LittleEndian.Uint32(xb[4*i:])
			c.x[i] = math.Float32frombits(u)
			c.q[i] = int32(u)
			c.codes[i] = Code32(c.x[i])
			if len(cb) > 0 {
				switch b := cb[i%len(cb)]; {
				case b < 128:
					c.codes[i] = uint8(min(int(c.codes[i])+int(b), 254))
				case b < 250:
					c.codes[i] = uint8(min(int(c.codes[i])+int(b-128), 255))
				default:
					c.codes[i] = uint8(int(b) * (i + 1))
				}
			}
		}
		if err := checkKernels(c, int(h%32), int(avg), int(off%8)); err != nil {
			t.Fatal(err)
		}
		n64 := len(xb) / 8
		c64 := kernelCase64{x: make([]float64, n64), codes: make([]int32, n64), q: make([]int64, n64)}
		for i := range n64 {
			u := binary.LittleEndian.Uint64(xb[8*i:])
			c64.x[i] = math.Float64frombits(u)
			c64.q[i] = int64(u)
			c64.codes[i] = Code64(c64.x[i])
			if len(cb) > 0 {
				switch b := int32(cb[i%len(cb)]); {
				case b < 128:
					c64.codes[i] = min(c64.codes[i]+b*b*b/1000, 2046)
				case b < 250:
					c64.codes[i] = min(c64.codes[i]+b-128, 2047)
				default:
					c64.codes[i] = int32(binary.LittleEndian.Uint32(xb[8*i:]))
				}
			}
		}
		if err := checkKernels64(c64, int(h%64), int(avg), int(off%8)); err != nil {
			t.Fatal(err)
		}
	})
}

// benchData is n float32s of many binades with their codes, their
// fixed-point terms at headroom 2 and the sums of two such rows.
func benchData(n int) (x []float32, codes []uint8, q []int32) {
	rng := rand.New(rand.NewPCG(61, 62))
	x = make([]float32, n)
	for i := range x {
		x[i] = float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(30)-20))
	}
	codes = make([]uint8, n)
	Codes32(x, codes)
	for i := range codes {
		codes[i] = max(codes[i], uint8(100+rng.IntN(30)))
	}
	q = make([]int32, n)
	ToFixed32(x, codes, q, 2)
	for i := range q {
		q[i] *= 2
	}
	return x, codes, q
}

// kernelImpls are the implementations a benchmark compares: the element
// by element definition and the dispatching function (vector code where
// the CPU has it).
var kernelImpls = []string{"go", "kernel"}

func BenchmarkCodes32(b *testing.B) {
	const n = 1 << 20
	x, codes, _ := benchData(n)
	for _, impl := range kernelImpls {
		b.Run(impl, func(b *testing.B) {
			b.SetBytes(5 * n)
			for range b.N {
				if impl == "go" {
					codes32Go(x, codes)
				} else {
					Codes32(x, codes)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
		})
	}
}

// benchInputs are the float32 inputs of the conversion benchmarks: normal
// values over many binades (benchData), all zeros (code 1, every rank
// holding 0 there), and ReLU-like rows where half the elements, at random,
// are zeros every rank holds.
var benchInputs = []string{"normal", "zeros", "half"}

// benchInput is benchData for one of benchInputs.
func benchInput(kind string, n int) (x []float32, codes []uint8, q []int32) {
	x, codes, q = benchData(n)
	rng := rand.New(rand.NewPCG(67, 68))
	for i := range x {
		if kind == "zeros" || kind == "half" && rng.IntN(2) == 0 {
			x[i], codes[i], q[i] = 0, Code32(0), 0
		}
	}
	return x, codes, q
}

func BenchmarkToFixed32(b *testing.B) {
	const n = 1 << 20
	for _, kind := range benchInputs {
		x, codes, q := benchInput(kind, n)
		for _, impl := range kernelImpls {
			b.Run(kind+"/"+impl, func(b *testing.B) {
				b.SetBytes(9 * n)
				for range b.N {
					if impl == "go" {
						toFixed32Go(x, codes, q, 2)
					} else {
						ToFixed32(x, codes, q, 2)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			})
		}
	}
}

func BenchmarkFromFixed32(b *testing.B) {
	const n = 1 << 20
	for _, kind := range benchInputs {
		x, codes, q := benchInput(kind, n)
		for _, avg := range []int{1, 3} {
			for _, impl := range kernelImpls {
				b.Run(fmt.Sprintf("%s/avg=%d/%s", kind, avg, impl), func(b *testing.B) {
					b.SetBytes(9 * n)
					for range b.N {
						if impl == "go" {
							fromFixed32Go(q, codes, x, 2, avg)
						} else {
							FromFixed32(q, codes, x, 2, avg)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
				})
			}
		}
	}
}

// benchData64 is benchData for float64.
func benchData64(n int) (x []float64, codes []int32, q []int64) {
	rng := rand.New(rand.NewPCG(61, 62))
	x = make([]float64, n)
	for i := range x {
		x[i] = math.Ldexp(rng.Float64()*2-1, rng.IntN(30)-20)
	}
	codes = make([]int32, n)
	Codes64(x, codes)
	for i := range codes {
		codes[i] = max(codes[i], int32(1000+rng.IntN(30)))
	}
	q = make([]int64, n)
	ToFixed64(x, codes, q, 2)
	for i := range q {
		q[i] *= 2
	}
	return x, codes, q
}

func BenchmarkCodes64(b *testing.B) {
	const n = 1 << 20
	x, codes, _ := benchData64(n)
	for _, impl := range kernelImpls {
		b.Run(impl, func(b *testing.B) {
			b.SetBytes(12 * n)
			for range b.N {
				if impl == "go" {
					codes64Go(x, codes)
				} else {
					Codes64(x, codes)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
		})
	}
}

func BenchmarkToFixed64(b *testing.B) {
	const n = 1 << 20
	x, codes, q := benchData64(n)
	for _, impl := range kernelImpls {
		b.Run(impl, func(b *testing.B) {
			b.SetBytes(20 * n)
			for range b.N {
				if impl == "go" {
					toFixed64Go(x, codes, q, 2)
				} else {
					ToFixed64(x, codes, q, 2)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
		})
	}
}

func BenchmarkFromFixed64(b *testing.B) {
	const n = 1 << 20
	x, codes, q := benchData64(n)
	for _, avg := range []int{1, 3} {
		for _, impl := range kernelImpls {
			b.Run(fmt.Sprintf("avg=%d/%s", avg, impl), func(b *testing.B) {
				b.SetBytes(20 * n)
				for range b.N {
					if impl == "go" {
						fromFixed64Go(q, codes, x, 2, avg)
					} else {
						FromFixed64(q, codes, x, 2, avg)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			})
		}
	}
}

// BenchmarkSumOf32: the exact sum of two rows of 128K elements into the
// first (a two-rank all-reduce's fold at 1 MiB), per element.
func BenchmarkSumOf32(b *testing.B) {
	const n = 1 << 17
	x, _, _ := benchData(2 * n)
	rows := [][]float32{x[:n], x[n:]}
	out := make([]float32, n)
	b.SetBytes(8 * n)
	for range b.N {
		SumOf32(rows, out, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
}
