package reduce

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkIntKernels times Func's folds with kernels (the AVX2 kernels
// where the CPU has them; the float sums besides the integer folds) and
// the plain Go loops they replace, in ns per element
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
		benchKernel[float32](b, "add/float32", Sum, n)
		benchKernel[float64](b, "add/float64", Sum, n)
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

// BenchmarkFinishAvg times Avg's division (Finish) of float32 and float64
// by 2 ranks (a multiplication by 1/2) and 3 (a division), against the
// plain Go loop, in ns per element (and CPU time, as BenchmarkIntKernels),
// at 1<<12 elements and 1<<18 (1 MiB of float32).
func BenchmarkFinishAvg(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 18} {
		for _, ranks := range []int{2, 3} {
			benchFinish[float32](b, "float32", n, ranks)
			benchFinish[float64](b, "float64", n, ranks)
		}
	}
}

func benchFinish[T float32 | float64](b *testing.B, name string, n, ranks int) {
	x := make([]T, n)
	for i := range x {
		x[i] = T(i%1000) * 0.37
	}
	for _, way := range []string{"finish", "loop"} {
		b.Run(fmt.Sprintf("%s/%d/%s/%d", name, ranks, way, n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.SetBytes(int64(n * SizeOf[T]()))
			cpu0 := threadCPU()
			for b.Loop() {
				if way == "finish" {
					Finish(Avg, x, ranks)
				} else {
					for i := range x {
						x[i] /= T(ranks)
					}
				}
			}
			cpu := threadCPU() - cpu0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
			if cpu > 0 {
				b.ReportMetric(float64(cpu)/float64(b.N)/float64(n), "cpu-ns/elem")
			}
		})
	}
}
