//go:build amd64 && !purego

package reduce

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestKernelsVector: where the CPU has AVX2, Func hands out the vector
// kernels for their (op, type) pairs and only those, the kernels fold
// every element of ordinary slices in assembly (only a partial overlap or
// a short src is left to the Go loop), and the assembly alone matches the
// Go loops.
func TestKernelsVector(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("no AVX2")
	}
	if !vector {
		t.Fatal("vector is off on a CPU with AVX2")
	}
	ptr := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"sum int32", Func[int32](Sum), addInt32},
		{"avg int32", Func[int32](Avg), addInt32},
		{"max int32", Func[int32](Max), maxInt32},
		{"min int32", Func[int32](Min), minInt32},
		{"sum int64", Func[int64](Sum), addInt64},
		{"avg int64", Func[int64](Avg), addInt64},
		{"max uint8", Func[uint8](Max), maxUint8},
		{"min uint8", Func[uint8](Min), minUint8},
		{"sum float32", Func[float32](Sum), addFloat32},
		{"avg float32", Func[float32](Avg), addFloat32},
		{"sum float64", Func[float64](Sum), addFloat64},
		{"avg float64", Func[float64](Avg), addFloat64},
	} {
		if ptr(c.got) != ptr(c.want) {
			t.Errorf("%s: Func is not the kernel", c.name)
		}
	}
	// Every other pair keeps its Go code.
	for op := Sum; op <= Prod; op++ {
		if !reflect.ValueOf(kernel[int8](op)).IsNil() {
			t.Errorf("a kernel for %v of int8", op)
		}
	}
	for _, op := range []Op{Min, Max, Prod} {
		for _, k := range []any{kernel[float32](op), kernel[float64](op)} {
			if !reflect.ValueOf(k).IsNil() {
				t.Errorf("a float kernel for %v", op)
			}
		}
	}
	for _, k := range []any{kernel[int32](Prod), kernel[int64](Prod), kernel[int64](Max),
		kernel[int64](Min), kernel[uint8](Sum), kernel[uint8](Avg), kernel[uint8](Prod)} {
		if !reflect.ValueOf(k).IsNil() {
			t.Error("a kernel for a pair without one")
		}
	}

	buf := make([]int32, 100)
	for _, c := range []struct {
		dst, src []int32
		want     int
	}{
		{buf[:40], buf[50:90], 40},
		{buf[:40], buf[:40], 40},
		{buf[:40], buf[:60], 40},
		{buf[10:50], buf[:40], 0},
		{buf[:40], buf[39:79], 0},
		{buf[:40], buf[40:79], 0},
		{buf[39:79], buf[:40], 0},
		{buf[40:80], buf[:40], 40},
		{buf[:40], buf[40:80], 40},
		{buf[:0], buf[:0], 0},
	} {
		if got := vectorLen(c.dst, c.src); got != c.want {
			t.Errorf("vectorLen of [%d:%d] into [%d:%d]: %d, want %d",
				cap(buf)-cap(c.src), cap(buf)-cap(c.src)+len(c.src),
				cap(buf)-cap(c.dst), cap(buf)-cap(c.dst)+len(c.dst), got, c.want)
		}
	}

	rng := rand.New(rand.NewPCG(81, 82))
	for _, n := range []int{1, 2, 3, 4, 5, 8, 33, 1000} {
		asm[int32](t, rng, "addInt32AVX2", 8*n, Sum, addInt32AVX2)
		asm[int32](t, rng, "maxInt32AVX2", 8*n, Max, maxInt32AVX2)
		asm[int32](t, rng, "minInt32AVX2", 8*n, Min, minInt32AVX2)
		asm[int64](t, rng, "addInt64AVX2", 4*n, Sum, addInt64AVX2)
		asm[uint8](t, rng, "maxUint8AVX2", 32*n, Max, maxUint8AVX2)
		asm[uint8](t, rng, "minUint8AVX2", 32*n, Min, minUint8AVX2)
		asm[float32](t, rng, "addFloat32AVX2", 8*n, Sum, addFloat32AVX2)
		asm[float64](t, rng, "addFloat64AVX2", 4*n, Sum, addFloat64AVX2)
	}
}

func asm[T Number](t *testing.T, rng *rand.Rand, name string, n int, op Op, f func(dst, src *T, n int)) {
	t.Helper()
	dst, src := make([]T, n+1), make([]T, n+1)
	fill(rng, dst)
	fill(rng, src)
	want := slices.Clone(dst)
	f(&dst[1], &src[1], n)
	loopOf[T](op)(want[1:], src[1:])
	if !slices.EqualFunc(dst, want, same[T]) {
		t.Fatalf("%s of %d: %v, want %v", name, n, dst, want)
	}
}

// TestKernelsOff: without AVX2 Func and SumInto keep the Go loops.
func TestKernelsOff(t *testing.T) {
	defer func(v bool) { vector = v }(vector)
	vector = false
	if Func[int32](Sum) == nil || kernel[int32](Sum) != nil || kernel[uint8](Max) != nil {
		t.Fatal("a kernel without AVX2")
	}
	rng := rand.New(rand.NewPCG(83, 84))
	for _, k := range kernelOps {
		for _, n := range []int{0, 5, 64, 1001} {
			if err := k.check(rng, n, 1, 2); err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
		}
	}
}
