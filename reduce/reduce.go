// Package reduce holds the element types, reduction ops and vector kernels
// that the ring and ParamHub share. It is a leaf: it does no I/O.
//
// It also holds the wire codec for float32 collectives on slow links: Wire
// names a format (full float32, fp16 or bf16, 2 bytes an element), and
// Encode, Decode and DecodeAdd convert whole slices, always accumulating in
// float32. Rounding is to nearest even, finite values saturate at the
// format's largest finite value instead of becoming infinities, ±Inf stays
// ±Inf and NaN stays a quiet NaN; see Wire for the full rules.
package reduce

import (
	"fmt"
	"unsafe"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/floats"
)

// Number is an element type the collectives work on.
type Number interface {
	float32 | float64 | int32 | int64 | int8 | uint8
}

// Op is a reduction. Its values cross the wire.
type Op uint8

// The reductions. Integer Avg is the sum divided by the number of ranks,
// truncated toward zero; integer Sum and Prod wrap around on overflow (so
// an int8 or uint8 Avg divides the wrapped sum).
// ONLY APPEND.
const (
	Sum Op = iota + 1
	Avg
	Min
	Max
	Prod
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Min:
		return "min"
	case Max:
		return "max"
	case Prod:
		return "prod"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is one of the reductions.
func (o Op) Valid() bool { return o >= Sum && o <= Prod }

// DType codes cross the wire. ONLY APPEND.
const (
	Float32 uint8 = iota + 1
	Float64
	Int32
	Int64
	Int8
	Uint8
)

// DTypeOf is T's wire code.
func DTypeOf[T Number]() uint8 {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int8:
		return Int8
	case uint8:
		return Uint8
	}
	return Int64
}

// Size is the size in bytes of one element of dtype, or 0 if dtype is
// unknown.
func Size(dtype uint8) int {
	switch dtype {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case Int8, Uint8:
		return 1
	}
	return 0
}

// DTypeName names a dtype code for error messages.
func DTypeName(dtype uint8) string {
	switch dtype {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Int8:
		return "int8"
	case Uint8:
		return "uint8"
	}
	return fmt.Sprintf("dtype(%d)", dtype)
}

// Func returns dst[i] = dst[i] op src[i]. Avg reduces as Sum; the
// division happens once at the end (see Finish). It returns nil for an
// invalid op.
//
// The Sum and Avg of int32, int64, float32 and float64 and the Max and Min
// of uint8 and int32 are AVX2 kernels where the CPU has them (amd64,
// without the purego tag), with the Go loops' results.
func Func[T Number](op Op) func(dst, src []T) {
	if f := kernel[T](op); f != nil {
		return f
	}
	switch op {
	case Sum, Avg:
		return SumInto[T]
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

// kernel is Func's vector kernel of op on T, or nil.
func kernel[T Number](op Op) func(dst, src []T) {
	if !vector {
		return nil
	}
	var f any
	switch any(*new(T)).(type) {
	case int32:
		switch op {
		case Sum, Avg:
			f = addInt32
		case Max:
			f = maxInt32
		case Min:
			f = minInt32
		}
	case int64:
		if op == Sum || op == Avg {
			f = addInt64
		}
	case float32:
		if op == Sum || op == Avg {
			f = addFloat32
		}
	case float64:
		if op == Sum || op == Avg {
			f = addFloat64
		}
	case uint8:
		switch op {
		case Max:
			f = maxUint8
		case Min:
			f = minUint8
		}
	}
	if f == nil {
		return nil
	}
	return f.(func(dst, src []T))
}

// SumInto adds src to dst, with Func's AVX2 kernels for float32, float64,
// int32 and int64 where the CPU has them (gonum's vector kernels for the
// floats where not; integer sums wrap).
func SumInto[T Number](dst, src []T) {
	switch d := any(dst).(type) {
	case []float32:
		s := any(src).([]float32)
		if vector {
			addFloat32(d, s)
			return
		}
		if len(d) > 0 {
			blas32.Axpy(1, blas32.Vector{N: len(s), Data: s, Inc: 1}, blas32.Vector{N: len(d), Data: d, Inc: 1})
		}
		return
	case []float64:
		if vector {
			addFloat64(d, any(src).([]float64))
			return
		}
		floats.Add(d, any(src).([]float64))
		return
	case []int32:
		if vector {
			addInt32(d, any(src).([]int32))
			return
		}
	case []int64:
		if vector {
			addInt64(d, any(src).([]int64))
			return
		}
	}
	for i := range dst {
		dst[i] += src[i]
	}
}

// Finish applies Avg's division by n to buf.
func Finish[T Number](op Op, buf []T, n int) {
	if op != Avg || n == 1 {
		return
	}
	switch b := any(buf).(type) {
	case []int8: // T(n) would wrap from 128 ranks
		for i := range b {
			b[i] = int8(int(b[i]) / n)
		}
	case []uint8:
		for i := range b {
			b[i] = uint8(int(b[i]) / n)
		}
	case []float32:
		if n&(n-1) == 0 {
			// x/2^k and x·2^-k are the same exact value rounded once:
			// the same bits.
			mulFloat32(b, 1/float32(n))
			return
		}
		divFloat32(b, float32(n))
	case []float64:
		if n&(n-1) == 0 {
			mulFloat64(b, 1/float64(n))
			return
		}
		divFloat64(b, float64(n))
	default:
		for i := range buf {
			buf[i] /= T(n)
		}
	}
}

// SizeOf is the size of one T in bytes.
func SizeOf[T Number]() int { return int(unsafe.Sizeof(*new(T))) }

// AsBytes views s as its bytes (little-endian on every platform gorun
// supports); the view shares s's memory.
func AsBytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// View returns b as a []T sharing its memory when b is suitably aligned,
// and ok=false otherwise (the caller then copies).
func View[T Number](b []byte) (s []T, ok bool) {
	var z T
	size := int(unsafe.Sizeof(z))
	n := len(b) / size
	if n == 0 {
		return nil, true
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), true
}

// FromBytes returns b's elements as a []T, sharing b's memory when it is
// aligned and copying otherwise.
func FromBytes[T Number](b []byte) []T {
	if s, ok := View[T](b); ok {
		return s
	}
	s := make([]T, len(b)/int(unsafe.Sizeof(*new(T))))
	copy(AsBytes(s), b)
	return s
}

// Bytes reduces src into dst, both holding elements of dtype as bytes.
// Results are written back even when dst had to be copied for alignment.
func Bytes(dtype uint8, op Op, dst, src []byte) error {
	if !op.Valid() {
		return fmt.Errorf("reduce: unknown op %d", op)
	}
	if len(dst) != len(src) {
		return fmt.Errorf("reduce: %d bytes into %d", len(src), len(dst))
	}
	switch dtype {
	case Float32:
		bytesOf[float32](op, dst, src)
	case Float64:
		bytesOf[float64](op, dst, src)
	case Int32:
		bytesOf[int32](op, dst, src)
	case Int64:
		bytesOf[int64](op, dst, src)
	case Int8:
		bytesOf[int8](op, dst, src)
	case Uint8:
		bytesOf[uint8](op, dst, src)
	default:
		return fmt.Errorf("reduce: unknown dtype %d", dtype)
	}
	return nil
}

func bytesOf[T Number](op Op, dst, src []byte) {
	d, dok := View[T](dst)
	s := FromBytes[T](src)
	if !dok {
		d = FromBytes[T](dst)
	}
	Func[T](op)(d, s)
	if !dok {
		copy(dst, AsBytes(d))
	}
}
