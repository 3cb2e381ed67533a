package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The folds that have vector kernels (Sum and Avg of int32, int64,
// float32 and float64, Max and Min of uint8 and int32) are held to the
// plain Go loops on any input: values of every size with the extremes
// among them (integer sums that wrap; float zeros of both signs,
// subnormals, infinities, NaN), every length up to 70 and a few thousand,
// starts 0..7 elements into their arrays, and src the same elements as dst
// or overlapping it. Floats compare by their bits, any NaN equal to any.

// loopOf is the plain Go loop of op.
func loopOf[T Number](op Op) func(dst, src []T) {
	switch op {
	case Sum, Avg:
		return func(dst, src []T) {
			for i := range dst {
				dst[i] += src[i]
			}
		}
	case Min:
		return func(dst, src []T) {
			for i := range dst {
				dst[i] = min(dst[i], src[i])
			}
		}
	case Max:
		return func(dst, src []T) {
			for i := range dst {
				dst[i] = max(dst[i], src[i])
			}
		}
	case Prod:
		return func(dst, src []T) {
			for i := range dst {
				dst[i] *= src[i]
			}
		}
	}
	return nil
}

// extremes are values each element takes now and then: 0, ±1, and the
// ends of every integer type's range (T's conversion wraps them).
var extremes = []int64{0, 1, -1, 2, -2, math.MaxInt8, math.MinInt8, math.MaxUint8, 128,
	math.MaxInt32, math.MinInt32, math.MaxInt32 - 1, math.MinInt32 + 1, math.MaxUint32,
	math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}

// randomInts fills s with random values of every magnitude, a third of
// them extremes.
func randomInts[T Number](rng *rand.Rand, s []T) {
	for i := range s {
		switch rng.IntN(6) {
		case 0, 1:
			s[i] = T(extremes[rng.IntN(len(extremes))])
		case 2:
			s[i] = T(rng.Int64N(7) - 3)
		default:
			s[i] = T(rng.Uint64() >> rng.IntN(64))
		}
	}
}

// kernelOps are the (op, type) pairs with a kernel, run by checkFold.
var kernelOps = []struct {
	name  string
	check func(rng *rand.Rand, n, doff, soff int) error
}{
	{"sum/int32", checkFold[int32](Sum)},
	{"avg/int32", checkFold[int32](Avg)},
	{"max/int32", checkFold[int32](Max)},
	{"min/int32", checkFold[int32](Min)},
	{"sum/int64", checkFold[int64](Sum)},
	{"avg/int64", checkFold[int64](Avg)},
	{"max/uint8", checkFold[uint8](Max)},
	{"min/uint8", checkFold[uint8](Min)},
	{"suminto/int32", checkSumInto[int32]},
	{"suminto/int64", checkSumInto[int64]},
	{"sum/float32", checkFold[float32](Sum)},
	{"avg/float64", checkFold[float64](Avg)},
	{"suminto/float32", checkSumInto[float32]},
	{"suminto/float64", checkSumInto[float64]},
}

// randomFloats fills s with random bit patterns (every binade, NaNs and
// infinities among them), a third of them small integers, zeros of both
// signs, subnormals or infinities.
func randomFloats[T float32 | float64](rng *rand.Rand, s []T) {
	for i := range s {
		var x float64
		switch rng.IntN(6) {
		case 0:
			x = float64(rng.IntN(7) - 3)
		case 1:
			x = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), 5e-324, -5e-324, 1e-40, -1e-40}[rng.IntN(8)]
		default:
			if _, ok := any(s[i]).(float32); ok {
				s[i] = T(math.Float32frombits(rng.Uint32()))
				continue
			}
			x = math.Float64frombits(rng.Uint64())
		}
		s[i] = T(x)
	}
}

// fill fills s with random values of T: randomInts, or randomFloats.
func fill[T Number](rng *rand.Rand, s []T) {
	switch f := any(s).(type) {
	case []float32:
		randomFloats(rng, f)
	case []float64:
		randomFloats(rng, f)
	default:
		randomInts(rng, s)
	}
}

// same reports whether a and b are the same value: the same bits, or
// both NaN.
func same[T Number](a, b T) bool {
	switch x := any(a).(type) {
	case float32:
		y := any(b).(float32)
		return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
	case float64:
		y := any(b).(float64)
		return math.Float64bits(x) == math.Float64bits(y) || x != x && y != y
	}
	return a == b
}

// checkFold returns a check of Func[T](op) against the Go loop on random n
// elements, dst doff and src soff elements into arrays with random
// elements before and after (which must stay as they are).
func checkFold[T Number](op Op) func(rng *rand.Rand, n, doff, soff int) error {
	return func(rng *rand.Rand, n, doff, soff int) error {
		return checkWith(rng, Func[T](op), loopOf[T](op), n, doff, soff)
	}
}

func checkSumInto[T Number](rng *rand.Rand, n, doff, soff int) error {
	return checkWith(rng, SumInto[T], loopOf[T](Sum), n, doff, soff)
}

func checkWith[T Number](rng *rand.Rand, f, loop func(dst, src []T), n, doff, soff int) error {
	const guard = 40
	dbuf, sbuf := make([]T, doff+n+guard), make([]T, soff+n+guard)
	fill(rng, dbuf)
	fill(rng, sbuf)
	want := slices.Clone(dbuf)
	f(dbuf[doff:doff+n], sbuf[soff:soff+n])
	loop(want[doff:doff+n], sbuf[soff:soff+n])
	for i := range dbuf {
		if !same(dbuf[i], want[i]) {
			return fmt.Errorf("element %d of %d from %d: %v, want %v", i-doff, n, doff, dbuf[i], want[i])
		}
	}
	return nil
}

func TestIntKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	lengths := []int{}
	for n := 0; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 127, 128, 129, 1000, 1024, 4096, 4099, 5003)
	for _, k := range kernelOps {
		for _, n := range lengths {
			for doff := range 8 {
				for soff := range 8 {
					if err := k.check(rng, n, doff, soff); err != nil {
						t.Fatalf("%s dst+%d src+%d: %v", k.name, doff, soff, err)
					}
				}
			}
		}
	}
}

// TestIntKernelsAliased: src the same elements as dst (each element folded
// with itself), or overlapping it from either side (the Go loop's order:
// an element src reads may already hold its result).
func TestIntKernelsAliased(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	for _, n := range []int{0, 1, 7, 8, 31, 32, 33, 65, 200, 1031} {
		for _, shift := range []int{0, 1, -1, 3, -4, 8, -8, 31, -32, 100, n - 1, 1 - n} {
			aliased[int32](t, rng, Sum, n, shift)
			aliased[int32](t, rng, Max, n, shift)
			aliased[int32](t, rng, Min, n, shift)
			aliased[int64](t, rng, Sum, n, shift)
			aliased[uint8](t, rng, Max, n, shift)
			aliased[uint8](t, rng, Min, n, shift)
		}
	}
}

func aliased[T Number](t *testing.T, rng *rand.Rand, op Op, n, shift int) {
	t.Helper()
	pad := n + 128
	buf := make([]T, n+2*pad)
	randomInts(rng, buf)
	want := slices.Clone(buf)
	Func[T](op)(buf[pad:pad+n], buf[pad+shift:pad+shift+n])
	loopOf[T](op)(want[pad:pad+n], want[pad+shift:pad+shift+n])
	if !slices.Equal(buf, want) {
		t.Fatalf("%s %v n %d src at dst%+d: %v, want %v", DTypeName(DTypeOf[T]()), op, n, shift, buf[pad:pad+n], want[pad:pad+n])
	}
}

// TestIntKernelsShortSrc: a src shorter than dst panics as the Go loop
// does, having folded the same elements.
func TestIntKernelsShortSrc(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	for _, n := range []int{1, 9, 40, 100} {
		shortSrc[int32](t, rng, Sum, n)
		shortSrc[int32](t, rng, Max, n)
		shortSrc[int64](t, rng, Sum, n)
		shortSrc[uint8](t, rng, Min, n)
	}
}

func shortSrc[T Number](t *testing.T, rng *rand.Rand, op Op, n int) {
	t.Helper()
	dst, src := make([]T, n), make([]T, n-1)
	randomInts(rng, dst)
	randomInts(rng, src)
	want := slices.Clone(dst)
	run := func(f func(dst, src []T), dst []T) (panicked bool) {
		defer func() { panicked = recover() != nil }()
		f(dst, src)
		return false
	}
	if !run(Func[T](op), dst) || !run(loopOf[T](op), want) {
		t.Fatalf("%s %v: no panic with %d elements into %d", DTypeName(DTypeOf[T]()), op, n-1, n)
	}
	if !slices.Equal(dst, want) {
		t.Fatalf("%s %v: %v, want %v", DTypeName(DTypeOf[T]()), op, dst, want)
	}
}

// FuzzIntKernels folds data's two halves, as elements of each type, with
// every kernel's (op, type) pair, starting off elements in, against the
// Go loops.
func FuzzIntKernels(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add(slices.Repeat([]byte{0xff, 0x7f, 0x80, 0x00, 0x01}, 60), uint8(3))
	f.Add(slices.Repeat([]byte{0xff}, 513), uint8(0x25))
	f.Fuzz(func(t *testing.T, data []byte, off uint8) {
		half := len(data) / 2
		a, b := data[:half], data[half:2*half]
		doff, soff := int(off&7), int(off>>3&7)
		fuzzFold(t, a, b, doff, soff, Sum, int32Of)
		fuzzFold(t, a, b, doff, soff, Max, int32Of)
		fuzzFold(t, a, b, doff, soff, Min, int32Of)
		fuzzFold(t, a, b, doff, soff, Sum, int64Of)
		fuzzFold(t, a, b, doff, soff, Max, uint8Of)
		fuzzFold(t, a, b, doff, soff, Min, uint8Of)
	})
}

func int32Of(b []byte) []int32 {
	s := make([]int32, len(b)/4)
	for i := range s {
		s[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return s
}

func int64Of(b []byte) []int64 {
	s := make([]int64, len(b)/8)
	for i := range s {
		s[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return s
}

func uint8Of(b []byte) []uint8 { return slices.Clone(b) }

func fuzzFold[T Number](t *testing.T, a, b []byte, doff, soff int, op Op, of func([]byte) []T) {
	t.Helper()
	dst, src := of(a), of(b)
	doff, soff = min(doff, len(dst)), min(soff, len(src))
	n := min(len(dst)-doff, len(src)-soff)
	want := slices.Clone(dst)
	Func[T](op)(dst[doff:doff+n], src[soff:soff+n])
	loopOf[T](op)(want[doff:doff+n], src[soff:soff+n])
	if !slices.Equal(dst, want) {
		t.Fatalf("%s %v of %d from %d and %d: %v, want %v", DTypeName(DTypeOf[T]()), op, n, doff, soff, dst, want)
	}
	if op == Sum {
		dst = of(a)
		SumInto(dst[doff:doff+n], src[soff:soff+n])
		if !slices.Equal(dst, want) {
			t.Fatalf("SumInto %s of %d from %d and %d: %v, want %v", DTypeName(DTypeOf[T]()), n, doff, soff, dst, want)
		}
	}
}
