//go:build amd64 && !purego

package exact

import (
	"math"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// vector reports whether the AVX2 kernels of exact_amd64.s run (they use
// FMA too); without them the conversions run element by element.
var vector = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// block is the elements a kernel converts at once: it converts a block
// all by vector arithmetic or leaves it, whole and unwritten, to the
// element-by-element code.
const block = 32

// codes32AVX2 is Codes32 of n elements, n a multiple of block, or with
// max not 0 codesMax32's.
//
//go:noescape
func codes32AVX2(x *float32, codes *uint8, n, max int)

// toFixed32AVX2 is ToFixed32 of n elements (a multiple of block) at
// headroom h (0..64). It multiplies in float32 by 2^Scale32(c, h), which
// must be a normal float32 for the codes c in lo..lo+span, or, in a block
// with a code outside them, by its two halves in turn, and rounds by the
// conversion to int32 (half to even); a block with code 255, or whose
// product is out of int32's range (a code below the element's own), it
// leaves. It returns the elements converted before the first block it
// leaves. With add not 0 it adds each integer to q's (addFixed32).
//
//go:noescape
func toFixed32AVX2(x *float32, codes *uint8, q *int32, n, h, lo, span, add int) int

// fromFixed32AVX2 is FromFixed32 of n elements (a multiple of block) at
// headroom h (0..64). Where every code c of a block lies in lo..lo+span:
// each integer to float32 (rounded once: with div 0 by the conversion,
// else divided by div in float64 first, by recip = 1/div and a
// remainder), then multiplied by the float32 of exponent bits c+bias,
// exactly. A block with another code it converts in float64: each integer
// (divided by div, the same way, if div is not 0) multiplied by the
// float64 of exponent bits c+bias+896, then rounded to float32, and -0 at
// code 0. A block with code 255 it leaves. It returns the elements
// converted before the first block it leaves.
//
//go:noescape
func fromFixed32AVX2(q *int32, codes *uint8, out *float32, n, bias, lo, span int, div, recip float64) int

func codes32(x []float32, codes []uint8) {
	n := 0
	if vector && len(x) >= block {
		n = len(x) &^ (block - 1)
		codes32AVX2(&x[0], &codes[0], n, 0)
	}
	codes32Go(x[n:], codes[n:])
}

func codesMax32(x []float32, codes []uint8) {
	n := 0
	if vector && len(x) >= block {
		n = len(x) &^ (block - 1)
		codes32AVX2(&x[0], &codes[0], n, 1)
	}
	codesMax32Go(x[n:], codes[n:])
}

// toFixed32 runs the kernel on the whole blocks and toFixed32Of on the
// blocks it leaves and the tail.
//
// The kernel's product x·2^S (S = Scale32(c, h)) is in float32. A
// product of a float32 x by a power of two is exact unless it overflows,
// or it scales down to below float32's normal range (scaling up keeps x's
// lowest bit, at least 2^-149).
//
// Where a block's codes lie in 30-h..283-h, 2^S is a normal float32 and
// the kernel multiplies once: the product is exact unless it is below
// 2^-126, where both ways round it to 0, or past float32's range (an
// infinity).
//
// A block with other codes (below 30-h S passes 127: code 1, of zeros and
// subnormals, and code 0 of -0 among them) it multiplies twice, by 2^S1
// then 2^S2, S1 = floor(S/2), S2 = S-S1. For h in 0..64 and codes 0..254 S
// lies in -161..157, so S1 and S2 lie in -81..79, normal float32s. Both
// have S's sign (or are 0), so for finite x:
//   - if S < 0 and |x·2^S1| < 2^-126 (the first product may round), then
//     |x·2^S| ≤ |x·2^S1| < 2^-126 is far below 1/2: Go rounds it to 0,
//     and the kernel's second product, at most 2^-126 in magnitude, too;
//   - if x·2^S1 overflows, |x·2^S| is at least as large, past 2^31 (a
//     code below x's own): the second product is an infinity;
//   - else the first product is exact, and the second, x·2^S, is exact,
//     or below 2^-126 (S2 < 0 then: both ways 0), or an infinity.
//
// An x of Inf or NaN (at a code below its own) makes Inf or NaN. A -0
// makes -0, which converts to 0 as in Go.
//
// The conversion to int32 rounds half to even (MXCSR's default mode,
// which Go keeps), as the magic addition does, and gives 1<<31 where the
// product is NaN or 2^31 or more in magnitude (at a code below the
// element's own). The kernel leaves a block with such a product, or with
// code 255.
//
// The kernels take h in 0..64 (a sum's headroom is 1..15).
func toFixed32(x []float32, codes []uint8, q []int32, h int) { fixed32Into(x, codes, q, h, false) }

// addFixed32 is toFixed32 adding each integer to q's, as its kernel does
// with add.
func addFixed32(x []float32, codes []uint8, q []int32, h int) { fixed32Into(x, codes, q, h, true) }

// fixed32Into is toFixed32 (add false) or addFixed32 (add true).
func fixed32Into(x []float32, codes []uint8, q []int32, h int, add bool) {
	if !vector || h < 0 || h > 64 {
		if add {
			addFixed32Go(x, codes, q, h)
		} else {
			toFixed32Go(x, codes, q, h)
		}
		return
	}
	lo, span := toFixed32Range(h)
	flag := 0
	if add {
		flag = 1
	}
	put := func(i int) {
		if v := toFixed32Of(x[i], codes[i], h); add {
			q[i] += v
		} else {
			q[i] = v
		}
	}
	n := len(x) &^ (block - 1)
	for i := 0; i < n; {
		i += toFixed32AVX2(&x[i], &codes[i], &q[i], n-i, h, lo, span, flag)
		for j := min(i+block, n); i < j; i++ {
			put(i)
		}
	}
	for i := n; i < len(x); i++ {
		put(i)
	}
}

// toFixed32Range is the codes lo..lo+span at which toFixed32AVX2
// multiplies once at headroom h (0..64): 2^Scale32(c, h) a normal float32.
func toFixed32Range(h int) (lo, span int) {
	lo, hi := max(30-h, 0), min(283-h, Code32Special-1)
	return lo, hi - lo
}

// toFixed32Of is one element of toFixed32Go, the power of two computed
// rather than looked up.
func toFixed32Of(v float32, c uint8, h int) int32 {
	if c == Code32Special {
		if Code32(v) == Code32Special {
			return special32(v)
		}
		return 0
	}
	y := float64(float64(v) * pow2(Scale32(c, h)))
	return int32(int64(float64(y+roundMagic) - roundMagic))
}

// fromFixed32 runs the kernel on the whole blocks and fromFixed32Of on the
// blocks it leaves and the tail.
//
// The kernel rounds to float32 before it scales, in float32: the same
// bits as scaling in float64 first unless the result is below float32's
// normal range (then it would round twice); past the range both are the
// infinity. An integer s ≠ 0 (|s| ≤ 2^31) divided by avg is at least
// 2^-k in magnitude, k = log2(avg) for a power of two (which the scale
// takes in: 2^(c+h-157-k)), else k = bits.Len(avg) (the scale
// 2^(c+h-157)); the result is normal from code 31-h+k up, and the scale
// a normal float32 up to code 254-bias (bias, the kernel's, makes its
// exponent bits c+bias).
//
// A block with codes outside those (code 1, of zeros and subnormals,
// among them, and code 0) the kernel converts in float64 as
// fromFixed32Go does: float64(s) is exact; then the division (below),
// for a divisor not a power of two; then the product by 2^-S (S =
// Scale32(c, h), plus log2(avg) for a power of two), a normal float64 for
// h in 0..64 and codes 0..254 (2^-188..2^161), exact: a quotient that is
// not 0 lies in 2^-31..2^31 in magnitude, so the product stays in
// float64's normal range, where it is also the quotient of s·2^-S that Go
// takes (scaling by a power of two commutes with rounding there). The
// conversion to float32 is the one rounding
// (to a subnormal, 0 or an infinity as well), Go's float32(r). A sum of 0
// gives +0 (the division's steps too), and code 0 gives -0 whatever the
// sum. Only a block with code 255 is left.
//
// A division by d = avg not a power of two is the correctly rounded
// quotient of a float64 a (here s) by the integer d: q0 = a·r rounded,
// r = 1/d rounded, is within 2^-51 of a/d relatively, so the remainder
// a - d·q0 is exact (a multiple of q0's ulp, a few d of them), and
// q0 + remainder·r rounded once (both fused multiply-adds) is within
// 2^-104·|a/d| of a/d. The quotient lies at least ulp/(2d) from every
// midpoint between float64s (a is a multiple of its own ulp, at least
// the quotient's; nor is it one: a midpoint's odd 54-bit significand
// would divide a's), so for d < 2^50 the sum rounds as the division
// does. That holds while a and the quotient are normal and finite.
func fromFixed32(q []int32, codes []uint8, out []float32, h, avg int) {
	if !vector || h < 0 || h > 64 || avg > 1<<31 {
		fromFixed32Go(q, codes, out, h, avg)
		return
	}
	bias, lo, span, div, recip := fromFixed32Args(h, avg)
	n := len(q) &^ (block - 1)
	for i := 0; i < n; {
		i += fromFixed32AVX2(&q[i], &codes[i], &out[i], n-i, bias, lo, span, div, recip)
		for j := min(i+block, n); i < j; i++ {
			out[i] = fromFixed32Of(q[i], codes[i], h, avg)
		}
	}
	for i := n; i < len(q); i++ {
		out[i] = fromFixed32Of(q[i], codes[i], h, avg)
	}
}

// fromFixed32Args are fromFixed32AVX2's arguments at headroom h and
// divisor avg (up to 2^31).
func fromFixed32Args(h, avg int) (bias, lo, span int, div, recip float64) {
	k := bits.Len(uint(max(avg, 1))) - 1
	bias = h - 30 - k
	if avg > 1 && avg&(avg-1) != 0 {
		k = bits.Len(uint(avg))
		div = float64(avg)
		recip = 1 / div
		bias = h - 30
	}
	lo, hi := max(31-h+k, 1), min(254-bias, Code32Special-1)
	return bias, lo, hi - lo, div, recip
}

// fromFixed32Of is one element of fromFixed32Go, the power of two
// computed rather than looked up.
func fromFixed32Of(s int32, c uint8, h, avg int) float32 {
	var r float64
	switch c {
	case Code32Special:
		r = specialOf(int64(s&(1<<15-1)), int64(s>>15))
	case Code32NegZero:
		r = math.Copysign(0, -1)
	default:
		r = float64(s) * pow2(-Scale32(c, h))
	}
	if avg > 1 {
		r /= float64(avg)
	}
	return float32(r)
}

// codes64AVX2 is Codes64 of n elements, n a multiple of block.
//
//go:noescape
func codes64AVX2(x *float64, codes *int32, n int)

// toFixed64AVX2 is ToFixed64 of n elements (a multiple of block) at
// headroom h: fixed64's integer arithmetic, lane by lane. A block with
// code 2047 it leaves. It returns the elements converted before the first
// block it leaves.
//
//go:noescape
func toFixed64AVX2(x *float64, codes *int32, q *int64, n, h int) int

// fromFixed64AVX2 is FromFixed64 of n elements (a multiple of block)
// where every code c of a block it converts lies in lo..lo+span: each
// integer to float64 (rounded once), multiplied by the float64 of
// exponent bits c+bias, then by mul if mul is not 0, or divided by div if
// div is not 0 (the correctly rounded quotient by recip = 1/div and a
// remainder, as fromFixed32's). It returns the elements converted before
// the first block it leaves.
//
//go:noescape
func fromFixed64AVX2(q *int64, codes *int32, out *float64, n, bias, lo, span int, mul, div, recip float64) int

func codes64(x []float64, codes []int32) {
	n := 0
	if vector && len(x) >= block {
		n = len(x) &^ (block - 1)
		codes64AVX2(&x[0], &codes[0], n)
	}
	codes64Go(x[n:], codes[n:])
}

// toFixed64 runs the kernel on the whole blocks and toFixed64Of on the
// blocks it leaves and the tail. The kernel's arithmetic is fixed64's in
// 64-bit lanes (a shift by 64 or more is 0 in both), the same for every
// code and h; it leaves only the blocks with code 2047.
func toFixed64(x []float64, codes []int32, q []int64, h int) {
	if !vector {
		toFixed64Go(x, codes, q, h)
		return
	}
	n := len(x) &^ (block - 1)
	for i := 0; i < n; {
		i += toFixed64AVX2(&x[i], &codes[i], &q[i], n-i, h)
		for j := min(i+block, n); i < j; i++ {
			q[i] = toFixed64Of(x[i], codes[i], h)
		}
	}
	for i := n; i < len(x); i++ {
		q[i] = toFixed64Of(x[i], codes[i], h)
	}
}

// toFixed64Of is one element of toFixed64Go.
func toFixed64Of(v float64, c int32, h int) int64 {
	switch {
	case c == Code64Special:
		if Code64(v) == Code64Special {
			return special64(v)
		}
		return 0
	case v == 0:
		return 0
	}
	return fixed64(v, c, h)
}

// fromFixed64 runs the kernel on the whole blocks and fromFixed64Of on the
// blocks it leaves and the tail.
//
// The kernel's float64(s) is the conversion's, rounded once: the high
// and low parts of s are exact float64s, and their sum rounds. Then
// math.Ldexp(f, e) is f·2^e rounded once (to a subnormal, 0 or an
// infinity past the normal range), which is the product by 2^e where 2^e
// is a normal float64: codes 63-h..2108-h. A division by a power of two is
// the product by its reciprocal. Another divisor's quotient is
// fromFixed32's, which here needs the scaled sum (at least 2^e in
// magnitude for s ≠ 0) finite and the quotient normal: codes
// 63-h+bits.Len(avg)..2045-h. Outside those codes, and at codes 0 and
// 2047, a block is left.
func fromFixed64(q []int64, codes []int32, out []float64, h, avg int) {
	if !vector || h < 0 || h > 64 || avg > 1<<31 {
		fromFixed64Go(q, codes, out, h, avg)
		return
	}
	lo, hi := max(63-h, 1), min(2108-h, Code64Special-1)
	var mul, div, recip float64
	switch {
	case avg > 1 && avg&(avg-1) == 0:
		mul = 1 / float64(avg)
	case avg > 1:
		div = float64(avg)
		recip = 1 / div
		lo, hi = max(63-h+bits.Len(uint(avg)), 1), min(2045-h, Code64Special-1)
	}
	// The exponent bits of 2^-Scale64(c, h) are c+h-62.
	bias := h - 62
	n := len(q) &^ (block - 1)
	for i := 0; i < n; {
		i += fromFixed64AVX2(&q[i], &codes[i], &out[i], n-i, bias, lo, hi-lo, mul, div, recip)
		for j := min(i+block, n); i < j; i++ {
			out[i] = fromFixed64Of(q[i], codes[i], h, avg)
		}
	}
	for i := n; i < len(q); i++ {
		out[i] = fromFixed64Of(q[i], codes[i], h, avg)
	}
}

// fromFixed64Of is one element of fromFixed64Go.
func fromFixed64Of(s int64, c int32, h, avg int) float64 {
	var r float64
	switch {
	case c == Code64Special:
		r = specialOf(s&(1<<31-1), s>>31)
	case c == 0:
		r = math.Copysign(0, -1)
	default:
		r = math.Ldexp(float64(s), -Scale64(c, h))
	}
	if avg > 1 {
		r /= float64(avg)
	}
	return r
}
