package reduce

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkIntKernels times Func's integer folds (the AVX2 kernels where
// the CPU has them) and the plain Go loops they replace, in ns per element
// (wall and, on Linux, the benchmark thread's CPU time: the machine may be
// busy), at 1<<12 elements (in cache) and 1<<20.
func BenchmarkIntKernels(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 20} {
		benchKernel[int32](b, "add/int32", Sum, n)
		benchKernel[int64](b, "add/int64", Sum, n)
		benchKernel[int32](b, "max/int32", Max, n)
		benchKernel[uint8](b, "max/uint8", Max, n)
		benchKernel[int32](b, "min/int32", Min, n)
		benchKernel[uint8](b, "min/uint8", Min, n)
	}
}

func benchKernel[T Number](b *testing.B, name string, op Op, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(op)))
	dst, src := make([]T, n), make([]T, n)
	for i := range dst {
		dst[i], src[i] = T(rng.Uint64()), T(rng.Uint64())
	}
	for _, way := range []string{"func", "loop"} {
		f := Func[T](op)
		if way == "loop" {
			f = loopOf[T](op)
		}
		b.Run(fmt.Sprintf("%s/%s/%d", name, way, n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.SetBytes(int64(n * SizeOf[T]()))
			cpu0 := threadCPU()
			for b.Loop() {
				f(dst, src)
			}
			cpu := threadCPU() - cpu0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
			if cpu > 0 {
				b.ReportMetric(float64(cpu)/float64(b.N)/float64(n), "cpu-ns/elem")
			}
		})
	}
}
