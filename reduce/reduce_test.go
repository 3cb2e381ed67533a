package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkSumKernel compares the float32 sum kernel (gonum's Axpy) with a
// plain loop.
func BenchmarkSumKernel(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16, 1 << 22} {
		dst, src := make([]float32, n), make([]float32, n)
		b.Run(fmt.Sprintf("gonum/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				SumInto(dst, src)
			}
		})
		b.Run(fmt.Sprintf("loop/%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				for i := range dst {
					dst[i] += src[i]
				}
			}
		})
	}
}

// TestBytesMatchesTyped checks the byte-level kernel against the typed one
// for every dtype and op, on aligned and misaligned buffers.
func TestBytesMatchesTyped(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 13, 100} {
		for op := Sum; op <= Prod; op++ {
			checkBytes[float32](t, rng, n, op)
			checkBytes[float64](t, rng, n, op)
			checkBytes[int32](t, rng, n, op)
			checkBytes[int64](t, rng, n, op)
			checkBytes[int8](t, rng, n, op)
			checkBytes[uint8](t, rng, n, op)
		}
	}
	if err := Bytes(Float32, Op(0), nil, nil); err == nil {
		t.Error("op 0 accepted")
	}
	if err := Bytes(99, Sum, nil, nil); err == nil {
		t.Error("dtype 99 accepted")
	}
	if err := Bytes(Float32, Sum, make([]byte, 4), make([]byte, 8)); err == nil {
		t.Error("length mismatch accepted")
	}
}

func checkBytes[T Number](t *testing.T, rng *rand.Rand, n int, op Op) {
	t.Helper()
	a, b := make([]T, n), make([]T, n)
	for i := range a {
		a[i], b[i] = T(rng.IntN(200)-100), T(rng.IntN(200)-100)
	}
	want := append([]T(nil), a...)
	for i := range want {
		switch op {
		case Sum, Avg:
			want[i] += b[i]
		case Min:
			want[i] = min(want[i], b[i])
		case Max:
			want[i] = max(want[i], b[i])
		case Prod:
			want[i] *= b[i]
		}
	}
	for _, shift := range []int{0, 1} { // 1: misaligned copies of both
		size := len(AsBytes(a))
		dst := make([]byte, size+shift)[shift:]
		src := make([]byte, size+shift)[shift:]
		copy(dst, AsBytes(a))
		copy(src, AsBytes(b))
		if err := Bytes(DTypeOf[T](), op, dst, src); err != nil {
			t.Fatal(err)
		}
		got := FromBytes[T](dst)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s %v n=%d shift=%d: [%d] = %v, want %v", DTypeName(DTypeOf[T]()), op, n, shift, i, got[i], want[i])
			}
		}
	}
}

// TestFinishAvg: Avg's division by the number of ranks gives, for float32
// and float64, the bits of dividing each element by n (a power of two
// takes the vector kernel's multiplication by 1/n), over values of every
// binade, subnormals, zeros of both signs, infinities and NaN, for n from
// 1 to 17 and lengths 0, 1, primes.
func TestFinishAvg(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n <= 17; n++ {
		for _, m := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 127, 129, 1031} {
			f32 := make([]float32, m)
			f64 := make([]float64, m)
			for i := range m {
				f32[i] = math.Float32frombits(rng.Uint32())
				f64[i] = math.Float64frombits(rng.Uint64())
				if i%5 == 0 {
					f32[i] = math.Float32frombits(rng.Uint32() & (1<<31 | 1<<23 - 1)) // subnormal or zero
				}
			}
			w32, w64 := slices.Clone(f32), slices.Clone(f64)
			for i := range m {
				w32[i] /= float32(n)
				w64[i] /= float64(n)
			}
			Finish(Avg, f32, n)
			Finish(Avg, f64, n)
			for i := range m {
				if math.Float32bits(f32[i]) != math.Float32bits(w32[i]) && !(f32[i] != f32[i] && w32[i] != w32[i]) {
					t.Fatalf("float32 n %d element %d: %v, want %v", n, i, f32[i], w32[i])
				}
				if math.Float64bits(f64[i]) != math.Float64bits(w64[i]) && !(f64[i] != f64[i] && w64[i] != w64[i]) {
					t.Fatalf("float64 n %d element %d: %v, want %v", n, i, f64[i], w64[i])
				}
			}
		}
	}
}
