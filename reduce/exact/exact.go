// Package exact is the arithmetic of exact, order-independent float sums:
// each element summed as an integer at an exponent every rank shares, so
// that the sum's bits do not depend on the order of its terms. It does no
// I/O; package collective runs the two collectives around it
// (Config.Exact).
//
// A sum over n ranks of float32 (float64) elements goes:
//
//  1. Codes32 (Codes64): each element's exponent code, a Max of which
//     over the ranks (a collective, or MaxCodes) is the exponent every
//     rank shares at that element, or a mark for Inf and NaN, or for
//     "every rank holds -0";
//  2. ToFixed32 (ToFixed64): each element as a fixed-point integer at its
//     shared exponent (int32 for float32, int64 for float64) with
//     Headroom(n) bits to spare, so n terms cannot overflow; integer sums
//     do not depend on their order (a Sum collective, or SumRows);
//  3. FromFixed32 (FromFixed64): each integer sum rounded once to the
//     element type (an Avg divides first, in float64).
//
// SumRows32 and SumRows64 run all three on the rows of one buffer (every
// rank's input, gathered), SumOf32 and SumOf64 on rows that lie apart
// (two ranks' chunks where they meet): the same bits as the collectives
// give.
//
// How close: the conversion rounds each term to 2^-(W-h) of the largest
// term's binade (W = 31 or 63 bits, h = Headroom(n)), so the result is
// within n·2^(e-W+h-1) of the exact sum, e being the exponent past the
// largest term's magnitude, plus its own final rounding: for float32 at 16
// ranks each term keeps 26 significant bits relative to the largest, more
// than float32's 24. Inf and NaN follow IEEE 754: NaN if any rank holds
// NaN or both infinities meet, else the infinity; an exact sum past the
// type's range is an infinity. A sum of zeros is -0 only when every term
// is -0. At most MaxRanks terms: the infinities are counted in 15-bit
// fields of the float32 sum.
//
// The conversions give the same bits on every machine. On amd64 with AVX2
// and FMA they run as vector code (exact_amd64.s), held bit for bit to the
// element-by-element Go that runs elsewhere and with the purego build
// tag, for every input.
package exact

import (
	"math"
	"math/bits"
	"sync"

	"github.com/gorun/gorun/reduce"
)

// MaxRanks is the most terms (ranks) an exact float32 sum serves.
const MaxRanks = 1<<15 - 1

// Headroom is the bits a sum over n terms needs above one term's.
func Headroom(n int) int { return bits.Len(uint(max(n, 1))) }

// The float32 exponent codes: 0 every term is -0, 1 a zero or a subnormal
// (their binade), 2..254 the biased exponent, 255 Inf or NaN. The float64
// codes are the same with 2047 for Inf and NaN.
const (
	Code32NegZero = 0
	Code32Special = 255
	Code64Special = 2047
)

// Code32 is x's exponent code.
func Code32(x float32) uint8 {
	b := math.Float32bits(x)
	e := uint8(b >> 23)
	if e == 0 {
		if b == 1<<31 {
			return Code32NegZero
		}
		return 1
	}
	return e // 255: Inf or NaN
}

// Code64 is x's exponent code.
func Code64(x float64) int32 {
	b := math.Float64bits(x)
	e := int32(b>>52) & 2047
	if e == 0 {
		if b == 1<<63 {
			return 0
		}
		return 1
	}
	return e
}

// Codes32 sets codes[i] to Code32(x[i]); codes holds len(x) elements.
func Codes32(x []float32, codes []uint8) {
	codes32(x, codes[:len(x)])
}

// codes32Go is Codes32 element by element: the definition the vector
// kernels (exact_amd64.s) are held to, and what runs without them.
func codes32Go(x []float32, codes []uint8) {
	codes = codes[:len(x)]
	for i, v := range x {
		codes[i] = Code32(v)
	}
}

// codesMax32Go raises codes[i] to Code32(x[i]) where that is larger: the
// codes of one more term (codesMax32's definition, and its fallback).
func codesMax32Go(x []float32, codes []uint8) {
	codes = codes[:len(x)]
	for i, v := range x {
		codes[i] = max(codes[i], Code32(v))
	}
}

// Codes64 sets codes[i] to Code64(x[i]).
func Codes64(x []float64, codes []int32) {
	codes64(x, codes[:len(x)])
}

// codes64Go is Codes64 element by element (the definition, and the
// fallback).
func codes64Go(x []float64, codes []int32) {
	codes = codes[:len(x)]
	for i, v := range x {
		codes[i] = Code64(v)
	}
}

// MaxCodes sets dst[i] to the larger of dst[i] and src[i]: the codes of
// one more term.
// (package reduce's Max: a vector kernel on amd64).
func MaxCodes[C uint8 | int32](dst, src []C) {
	reduce.Func[C](reduce.Max)(dst, src[:len(dst)])
}

// Scale32 is the power of two that takes a float32 of code c (1..254) to
// a fixed-point integer below 2^(31-h): |x| < 2^(c-126).
func Scale32(c uint8, h int) int { return 157 - h - int(c) }

// Scale64 is Scale32's counterpart for float64 (|x| < 2^(c-1022)).
func Scale64(c int32, h int) int { return 1085 - h - int(c) }

// special32 and special64 are what a term adds for an Inf or NaN: +Inf
// counts in the low field, -Inf in the high one, NaN in both.
func special32(x float32) int32 {
	switch {
	case x != x:
		return 1 | 1<<15
	case x > 0:
		return 1
	}
	return 1 << 15
}

func special64(x float64) int64 {
	switch {
	case x != x:
		return 1 | 1<<31
	case x > 0:
		return 1
	}
	return 1 << 31
}

// specialOf is the IEEE result of counted infinities and NaNs.
func specialOf(pos, neg int64) float64 {
	switch {
	case pos > 0 && neg > 0:
		return math.NaN()
	case pos > 0:
		return math.Inf(1)
	}
	return math.Inf(-1)
}

// roundShift is m / 2^k rounded half to even (m >= 0, k >= 1).
func roundShift(m uint64, k int) uint64 {
	if k >= 64 {
		return 0
	}
	q := m >> k
	rem := m & (1<<k - 1)
	half := uint64(1) << (k - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}

// fixed32 is x (a finite float32 of code at most c) at the scale of code c
// with headroom h: x·2^Scale32(c, h) rounded half to even, by integer
// shifts of its significand. ToFixed32 computes the same by float64
// arithmetic; the tests hold the two to each other.
func fixed32(x float32, c uint8, h int) int32 {
	b := math.Float32bits(x)
	ex := int(b>>23) & 255
	m := uint64(b & (1<<23 - 1))
	if ex == 0 {
		ex = 1 // a subnormal: no implicit bit, the least exponent
	} else {
		m |= 1 << 23
	}
	// x = m·2^(ex-150), so x·2^S = m·2^(ex-150+S), S = 157-h-c.
	var q uint64
	if k := ex + 7 - h - int(c); k >= 0 {
		q = m << k
	} else {
		q = roundShift(m, -k)
	}
	if b>>31 != 0 {
		return -int32(q)
	}
	return int32(q)
}

// fixed64 is fixed32's counterpart for float64.
func fixed64(x float64, c int32, h int) int64 {
	b := math.Float64bits(x)
	ex := int(b>>52) & 2047
	m := b & (1<<52 - 1)
	if ex == 0 {
		ex = 1
	} else {
		m |= 1 << 52
	}
	// x = m·2^(ex-1075), S = 1085-h-c.
	var q uint64
	if k := ex + 10 - h - int(c); k >= 0 {
		q = m << k
	} else {
		q = roundShift(m, -k)
	}
	if b>>63 != 0 {
		return -int64(q)
	}
	return int64(q)
}

// pow2 is 2^k as a float64, for k in the normal range.
func pow2(k int) float64 { return math.Float64frombits(uint64(1023+k) << 52) }

// roundMagic is 1.5·2^52: for |y| < 2^51, (y + roundMagic) - roundMagic
// is y rounded to an integer half to even (the addition rounds at the
// units place, in the default rounding mode).
const roundMagic = 0x1.8p52

// ToFixed32 sets q[i] to x[i] at the scale of codes[i] with headroom h:
// x·2^Scale32(c, h) rounded half to even, or for code 255 the count of
// an Inf or NaN. codes must be at least each element's own code (the Max
// over the terms). It works in float64: float64(x)·2^S is exact (24
// significant bits, inside float64's range for every code), and the
// magic addition rounds it half to even. q may be x's own memory: the
// integers then replace the floats.
func ToFixed32(x []float32, codes []uint8, q []int32, h int) {
	toFixed32(x, codes[:len(x)], q[:len(x)], h)
}

// toFixed32Go is ToFixed32 element by element (the definition, and the
// fallback).
func toFixed32Go(x []float32, codes []uint8, q []int32, h int) {
	var scale [256]float64
	for c := range Code32Special {
		scale[c] = pow2(Scale32(uint8(c), h))
	}
	codes = codes[:len(x)]
	q = q[:len(x)]
	for i, v := range x {
		c := codes[i]
		if c == Code32Special {
			q[i] = 0
			if Code32(v) == Code32Special {
				q[i] = special32(v)
			}
			continue
		}
		y := float64(float64(v) * scale[c])
		q[i] = int32(int64(float64(y+roundMagic) - roundMagic))
	}
}

// addFixed32Go adds ToFixed32's integers to q's (addFixed32's definition,
// and its fallback).
func addFixed32Go(x []float32, codes []uint8, q []int32, h int) {
	var t [2048]int32
	for lo := 0; lo < len(x); lo += len(t) {
		hi := min(lo+len(t), len(x))
		toFixed32Go(x[lo:hi], codes[lo:hi], t[:hi-lo], h)
		for i, v := range t[:hi-lo] {
			q[lo+i] += v
		}
	}
}

// FromFixed32 sets out[i] to the integer sum q[i] at the scale of codes[i],
// divided by avg when avg > 1, rounded once to float32 (an Avg rounds
// twice: the division in float64, then to float32). out may be q's own
// memory.
func FromFixed32(q []int32, codes []uint8, out []float32, h, avg int) {
	fromFixed32(q, codes[:len(q)], out[:len(q)], h, avg)
}

// fromFixed32Go is FromFixed32 element by element (the definition, and
// the fallback).
func fromFixed32Go(q []int32, codes []uint8, out []float32, h, avg int) {
	// The scale of each code: 2^-S, a normal float64 for every code, so
	// float64(s)·2^-S is exact and float32 rounds once.
	var scale [256]float64
	for c := 1; c < Code32Special; c++ {
		scale[c] = pow2(-Scale32(uint8(c), h))
	}
	codes = codes[:len(q)]
	out = out[:len(q)]
	div := float64(max(avg, 1))
	for i, s := range q {
		c := codes[i]
		var r float64
		switch c {
		case Code32Special:
			r = specialOf(int64(s&(1<<15-1)), int64(s>>15))
		case Code32NegZero:
			r = math.Copysign(0, -1)
		default:
			r = float64(s) * scale[c]
		}
		if avg > 1 {
			r /= div
		}
		out[i] = float32(r)
	}
}

// ToFixed64 is ToFixed32 for float64 (int64 terms).
func ToFixed64(x []float64, codes []int32, q []int64, h int) {
	toFixed64(x, codes[:len(x)], q[:len(x)], h)
}

// toFixed64Go is ToFixed64 element by element (the definition, and the
// fallback).
func toFixed64Go(x []float64, codes []int32, q []int64, h int) {
	codes = codes[:len(x)]
	q = q[:len(x)]
	for i, v := range x {
		switch c := codes[i]; {
		case c == Code64Special:
			q[i] = 0
			if Code64(v) == Code64Special {
				q[i] = special64(v)
			}
		case v == 0:
			q[i] = 0
		default:
			q[i] = fixed64(v, c, h)
		}
	}
}

// FromFixed64 is FromFixed32 for float64.
func FromFixed64(q []int64, codes []int32, out []float64, h, avg int) {
	fromFixed64(q, codes[:len(q)], out[:len(q)], h, avg)
}

// fromFixed64Go is FromFixed64 element by element (the definition, and
// the fallback).
func fromFixed64Go(q []int64, codes []int32, out []float64, h, avg int) {
	codes = codes[:len(q)]
	out = out[:len(q)]
	for i, s := range q {
		c := codes[i]
		var r float64
		switch {
		case c == Code64Special:
			r = specialOf(s&(1<<31-1), s>>31)
		case c == 0:
			r = math.Copysign(0, -1)
		default:
			// float64(s) rounds once; the scaling is exact but for a
			// subnormal result.
			r = math.Ldexp(float64(s), -Scale64(c, h))
		}
		if avg > 1 {
			r /= float64(avg)
		}
		out[i] = r
	}
}

// SumRows32 sets out to the exact sum of the n rows of all (row r is
// all[r*len(out):(r+1)*len(out)]), divided by avg when avg > 1: what the
// two collectives give, computed here. The rows' order does not matter.
func SumRows32(all []float32, n int, out []float32, avg int) {
	SumOf32(rowsOf(all, n, len(out)), out, avg)
}

// SumRows64 is SumRows32 for float64.
func SumRows64(all []float64, n int, out []float64, avg int) {
	SumOf64(rowsOf(all, n, len(out)), out, avg)
}

// SumOf32 is SumRows32 of rows that lie apart, each len(out) elements;
// out may be one of them.
func SumOf32(rows [][]float32, out []float32, avg int) {
	sumRows(rows, out, avg, &scratch32, Codes32, codesMax32, ToFixed32, addFixed32, FromFixed32)
}

// SumOf64 is SumOf32 for float64.
func SumOf64(rows [][]float64, out []float64, avg int) {
	sumRows(rows, out, avg, &scratch64, Codes64, nil, ToFixed64, nil, FromFixed64)
}

// rowsOf is the n rows of m elements that all holds one after the other.
func rowsOf[F float32 | float64](all []F, n, m int) [][]F {
	rows := make([][]F, max(n, 0))
	for r := range rows {
		rows[r] = all[r*m : (r+1)*m]
	}
	return rows
}

// rows is SumRows' working memory, kept between calls (scratch32 and
// scratch64 hold them).
type rows[C uint8 | int32, Q int32 | int64] struct {
	codes, row []C
	sum, q     []Q
}

var scratch32, scratch64 sync.Pool

// sized is s with n elements, reusing its memory when it has room.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func sumRows[F float32 | float64, C uint8 | int32, Q int32 | int64](all [][]F, out []F, avg int, pool *sync.Pool,
	code, codeMax func([]F, []C), to, toAdd func([]F, []C, []Q, int), from func([]Q, []C, []F, int, int)) {
	m, n := len(out), len(all)
	if m == 0 || n < 1 {
		return
	}
	w, _ := pool.Get().(*rows[C, Q])
	if w == nil {
		w = new(rows[C, Q])
	}
	defer pool.Put(w)
	// A tile of the rows at a time: its codes and sum stay in the core's
	// caches between the passes (each element's sum is its own, so tiles
	// do not change the bits, and out may be a row: a tile is written
	// after every row's tile is read). codeMax and toAdd, where given,
	// fold a row's codes and integers in as they make them; else each
	// row's go through scratch.
	t := min(m, rowTile)
	w.codes, w.sum = sized(w.codes, t), sized(w.sum, t)
	if codeMax == nil || toAdd == nil {
		w.row, w.q = sized(w.row, t), sized(w.q, t)
	}
	h := Headroom(n)
	add := reduce.Func[Q](reduce.Sum) // integer sums (a vector kernel on amd64)
	for lo := 0; lo < m; lo += t {
		hi := min(lo+t, m)
		k := hi - lo
		codes, sum := w.codes[:k], w.sum[:k]
		code(all[0][lo:hi], codes)
		for _, row := range all[1:] {
			if codeMax != nil {
				codeMax(row[lo:hi], codes)
				continue
			}
			code(row[lo:hi], w.row[:k])
			MaxCodes(codes, w.row[:k])
		}
		to(all[0][lo:hi], codes, sum, h)
		for _, row := range all[1:] {
			if toAdd != nil {
				toAdd(row[lo:hi], codes, sum, h)
				continue
			}
			to(row[lo:hi], codes, w.q[:k], h)
			add(sum, w.q[:k])
		}
		from(sum, codes, out[lo:hi], h, avg)
	}
}

// rowTile is the elements of each row that SumRows takes at a time.
const rowTile = 4096
