//go:build !amd64 || purego

package reduce

// Without the amd64 kernels the integer folds are Func's and SumInto's Go
// loops; these are never called.

const vector = false

func addInt32(dst, src []int32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func addInt64(dst, src []int64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func maxInt32(dst, src []int32) {
	for i := range dst {
		dst[i] = max(dst[i], src[i])
	}
}

func minInt32(dst, src []int32) {
	for i := range dst {
		dst[i] = min(dst[i], src[i])
	}
}

func maxUint8(dst, src []uint8) {
	for i := range dst {
		dst[i] = max(dst[i], src[i])
	}
}

func minUint8(dst, src []uint8) {
	for i := range dst {
		dst[i] = min(dst[i], src[i])
	}
}

func mulFloat32(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func divFloat32(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}

func mulFloat64(x []float64, s float64) {
	for i := range x {
		x[i] *= s
	}
}

func divFloat64(x []float64, d float64) {
	for i := range x {
		x[i] /= d
	}
}

func addFloat32(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func addFloat64(dst, src []float64) {
	for i := range dst {
		dst[i] += src[i]
	}
}
