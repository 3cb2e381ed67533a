package collective

import (
	"fmt"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/floats"
)

// Number is an element type the collectives work on.
type Number interface {
	float32 | float64 | int32 | int64
}

// Op is a reduction.
type Op uint8

// The reductions. Integer Avg is the sum divided by the number of ranks,
// truncated toward zero; integer Sum and Prod wrap around on overflow.
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

func (o Op) valid() bool { return o >= Sum && o <= Prod }

// dtype codes cross the wire in frame headers. ONLY APPEND.
func dtype[T Number]() uint8 {
	var z T
	switch any(z).(type) {
	case float32:
		return 1
	case float64:
		return 2
	case int32:
		return 3
	case int64:
		return 4
	}
	return 0
}

// reducer returns dst[i] = dst[i] op src[i]. Avg reduces as Sum; the
// division happens once at the end (see finish).
func reducer[T Number](op Op) func(dst, src []T) {
	switch op {
	case Sum, Avg:
		return sumInto[T]
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

// sumInto adds src to dst, with gonum's vector kernels for floats.
func sumInto[T Number](dst, src []T) {
	switch d := any(dst).(type) {
	case []float32:
		s := any(src).([]float32)
		if len(d) > 0 {
			blas32.Axpy(1, blas32.Vector{N: len(s), Data: s, Inc: 1}, blas32.Vector{N: len(d), Data: d, Inc: 1})
		}
	case []float64:
		floats.Add(d, any(src).([]float64))
	default:
		for i := range dst {
			dst[i] += src[i]
		}
	}
}

// finish applies Avg's division by n to buf.
func finish[T Number](op Op, buf []T, n int) {
	if op != Avg || n == 1 {
		return
	}
	for i := range buf {
		buf[i] /= T(n)
	}
}
