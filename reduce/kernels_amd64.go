//go:build amd64 && !purego

package reduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// vector reports whether the AVX2 kernels of kernels_amd64.s run: Func
// and SumInto take them for the integer Sum (and Avg) of int32 and int64
// and the Max and Min of uint8 and int32.
var vector = cpu.X86.HasAVX2

// The kernels fold n elements, n·size a multiple of 32 bytes and at least
// 32: dst[i] += src[i] (wrapping), or dst[i] = max or min(dst[i], src[i]).
// dst and src are the same elements or do not overlap.

//go:noescape
func addInt32AVX2(dst, src *int32, n int)

//go:noescape
func addInt64AVX2(dst, src *int64, n int)

//go:noescape
func addFloat32AVX2(dst, src *float32, n int)

//go:noescape
func addFloat64AVX2(dst, src *float64, n int)

//go:noescape
func maxInt32AVX2(dst, src *int32, n int)

//go:noescape
func minInt32AVX2(dst, src *int32, n int)

//go:noescape
func maxUint8AVX2(dst, src *uint8, n int)

//go:noescape
func minUint8AVX2(dst, src *uint8, n int)

// vectorLen is how many elements of dst a kernel may fold: all of them
// where the CPU has AVX2, src is at least as long, and the two are the
// same elements or do not overlap (a partial overlap is the Go loop's, in
// its order); else none.
func vectorLen[T int32 | int64 | uint8 | float32 | float64](dst, src []T) int {
	n := len(dst)
	if !vector || len(src) < n {
		return 0
	}
	d, s := uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	size := uintptr(n) * unsafe.Sizeof(dst[0])
	if d != s && d < s+size && s < d+size {
		return 0
	}
	return n
}

// The Sums fold the whole vectors and leave the tail (under 32 bytes) to
// the Go loop. The Max and Min, which may fold an element twice, fold the
// last 32 bytes again, from where they overlap the whole vectors.

func addInt32(dst, src []int32) {
	n := vectorLen(dst, src) &^ 7
	if n > 0 {
		addInt32AVX2(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func addInt64(dst, src []int64) {
	n := vectorLen(dst, src) &^ 3
	if n > 0 {
		addInt64AVX2(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func maxInt32(dst, src []int32) {
	n := vectorLen(dst, src)
	if n < 8 {
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
		return
	}
	maxInt32AVX2(&dst[0], &src[0], n&^7)
	if n&7 != 0 {
		maxInt32AVX2(&dst[n-8], &src[n-8], 8)
	}
}

func minInt32(dst, src []int32) {
	n := vectorLen(dst, src)
	if n < 8 {
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
		return
	}
	minInt32AVX2(&dst[0], &src[0], n&^7)
	if n&7 != 0 {
		minInt32AVX2(&dst[n-8], &src[n-8], 8)
	}
}

func maxUint8(dst, src []uint8) {
	n := vectorLen(dst, src)
	if n < 32 {
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
		return
	}
	maxUint8AVX2(&dst[0], &src[0], n&^31)
	if n&31 != 0 {
		maxUint8AVX2(&dst[n-32], &src[n-32], 32)
	}
}

func minUint8(dst, src []uint8) {
	n := vectorLen(dst, src)
	if n < 32 {
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
		return
	}
	minUint8AVX2(&dst[0], &src[0], n&^31)
	if n&31 != 0 {
		minUint8AVX2(&dst[n-32], &src[n-32], 32)
	}
}

// The float kernels set each of x's n elements (n·size a multiple of 32
// bytes, at least 32) to x[i]·s or x[i]/d: IEEE's operations, rounded once
// each, the same bits as the Go loops.

//go:noescape
func mulFloat32AVX2(x *float32, n int, s float32)

//go:noescape
func divFloat32AVX2(x *float32, n int, d float32)

//go:noescape
func mulFloat64AVX2(x *float64, n int, s float64)

//go:noescape
func divFloat64AVX2(x *float64, n int, d float64)

// mulFloat32 sets x[i] *= s.
func mulFloat32(x []float32, s float32) {
	n := 0
	if vector {
		n = len(x) &^ 7
	}
	if n > 0 {
		mulFloat32AVX2(&x[0], n, s)
	}
	for i := n; i < len(x); i++ {
		x[i] *= s
	}
}

// divFloat32 sets x[i] /= d.
func divFloat32(x []float32, d float32) {
	n := 0
	if vector {
		n = len(x) &^ 7
	}
	if n > 0 {
		divFloat32AVX2(&x[0], n, d)
	}
	for i := n; i < len(x); i++ {
		x[i] /= d
	}
}

// mulFloat64 sets x[i] *= s.
func mulFloat64(x []float64, s float64) {
	n := 0
	if vector {
		n = len(x) &^ 3
	}
	if n > 0 {
		mulFloat64AVX2(&x[0], n, s)
	}
	for i := n; i < len(x); i++ {
		x[i] *= s
	}
}

// divFloat64 sets x[i] /= d.
func divFloat64(x []float64, d float64) {
	n := 0
	if vector {
		n = len(x) &^ 3
	}
	if n > 0 {
		divFloat64AVX2(&x[0], n, d)
	}
	for i := n; i < len(x); i++ {
		x[i] /= d
	}
}

// addFloat32 sets dst[i] += src[i].
func addFloat32(dst, src []float32) {
	n := vectorLen(dst, src) &^ 7
	if n > 0 {
		addFloat32AVX2(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// addFloat64 sets dst[i] += src[i].
func addFloat64(dst, src []float64) {
	n := vectorLen(dst, src) &^ 3
	if n > 0 {
		addFloat64AVX2(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}
