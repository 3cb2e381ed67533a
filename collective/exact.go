package collective

import (
	"context"
	"math"
	"math/bits"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// Exact sums (Config.Exact): a float32 or float64 Sum or Avg whose result
// is the same bits whatever the algorithm, strategy, placement, rank
// order, fusion or chunking. Each element is summed as integers at an
// exponent every rank shares, in two collectives:
//
//  1. a Max all-reduce of each element's exponent code (exactCode32/64):
//     the largest binary exponent any rank holds there, or a mark for
//     Inf and NaN, or for "every rank holds -0";
//  2. a Sum all-reduce of each element as a fixed-point integer at that
//     exponent (int32 for float32, int64 for float64), with headroom for
//     the job's size: integer sums do not depend on their order.
//
// Each element's result is then its integer sum rounded once to the
// element type. The conversion to fixed point rounds each term to
// 2^-(W-h) of the largest term's binade (W = 31 or 63 bits, h =
// bits.Len(size)), so the result is within size * 2^(e-W+h-1) of the
// exact sum, e being the exponent past the largest term's magnitude,
// plus its own final rounding: for float32 at 16 ranks, each term keeps
// 26 significant bits relative to the largest, more than float32's 24.
// Inf and NaN follow IEEE 754: NaN if any rank holds NaN or both infinities
// meet, else the infinity; an exact sum past the type's range is an
// infinity. A sum of zeros is -0 only when every rank holds -0.
//
// What it cannot promise: equal bits across jobs of different sizes (the
// headroom, and the sum itself, depend on the size), nor when ranks compute
// their inputs differently; the fp16 and bf16 wire formats do not apply
// (the integers travel at full width). It costs the exponent round (one
// byte per float32 element, four per float64) and integers as wide as the
// elements.

// SetExact turns exact sums (Config.Exact) on or off for the collectives
// this Comm starts from now on (its groups made later inherit it). Like a
// collective, every rank must switch at the same point: ranks that
// disagree fail their next sum with ErrSizeMismatch.
func (c *Comm) SetExact(on bool) { c.exact.Store(on) }

// Exact reports whether this Comm's float sums are exact.
func (c *Comm) Exact() bool { return c.exact.Load() }

// exactLimit is the largest job an exact float32 sum serves: the
// infinities are counted in 15-bit fields of the int32 sum.
const exactLimit = 1<<15 - 1

// exactFor reports whether a reduction of T with op is summed exactly on
// c.
func exactFor[T Number](c *Comm, op Op) bool {
	if !c.exact.Load() || (op != Sum && op != Avg) {
		return false
	}
	dt := dtype[T]()
	return dt == reduce.Float32 || dt == reduce.Float64
}

// headroom is h: the bits a sum over n ranks needs above one term's.
func headroom(n int) int { return bits.Len(uint(max(n, 1))) }

// The float32 exponent codes: 0 every rank's element is -0, 1 a zero or a
// subnormal (their binade), 2..254 the biased exponent, 255 Inf or NaN.
const (
	code32NegZero = 0
	code32Special = 255
	code64Special = 2047
)

func exactCode32(x float32) uint8 {
	b := math.Float32bits(x)
	e := uint8(b >> 23)
	switch {
	case e == 255:
		return code32Special
	case b == 1<<31:
		return code32NegZero
	case e == 0:
		return 1
	}
	return e
}

func exactCode64(x float64) int32 {
	b := math.Float64bits(x)
	e := int32(b>>52) & 2047
	switch {
	case e == 2047:
		return code64Special
	case b == 1<<63:
		return 0
	case e == 0:
		return 1
	}
	return e
}

// scale32 is the power of two that takes a float32 of code c (1..254) to
// a fixed-point integer below 2^(31-h): |x| < 2^(c-126).
func scale32(c uint8, h int) int { return 157 - h - int(c) }

// scale64 is scale32's counterpart for float64 (|x| < 2^(c-1022)).
func scale64(c int32, h int) int { return 1085 - h - int(c) }

// special32 and special64 are what a rank adds for an Inf or NaN: +Inf
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
// with headroom h: x·2^scale32(c, h) rounded half to even, by integer
// shifts of its significand.
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

func toFixed32(x []float32, codes []uint8, q []int32, h int) {
	codes = codes[:len(x)]
	q = q[:len(x)]
	for i, v := range x {
		c := codes[i]
		b := math.Float32bits(v)
		ex := int(b>>23) & 255
		if c == code32Special || ex == 0 || ex == 255 {
			q[i] = fixedRare32(v, c, h)
			continue
		}
		// x = m·2^(ex-150), so x·2^S = m·2^(ex-150+S), S = 157-h-c.
		m := uint64(b&(1<<23-1) | 1<<23)
		var f uint64
		if k := ex + 7 - h - int(c); k >= 0 {
			f = m << k
		} else {
			f = roundShift(m, -k)
		}
		r := int32(f)
		if b>>31 != 0 {
			r = -r
		}
		q[i] = r
	}
}

// fixedRare32 is toFixed32's element when it is special, zero or
// subnormal, or its code is the special one.
func fixedRare32(v float32, c uint8, h int) int32 {
	switch {
	case c == code32Special:
		if exactCode32(v) == code32Special {
			return special32(v)
		}
		return 0
	case v == 0:
		return 0
	}
	return fixed32(v, c, h)
}

func fromFixed32(q []int32, codes []uint8, out []float32, h, avg int) {
	// The scale of each code: 2^-S, a normal float64 for every code, so
	// float64(s)·2^-S is exact and float32 rounds once.
	var scale [256]float64
	for c := 1; c < code32Special; c++ {
		scale[c] = pow2(-scale32(uint8(c), h))
	}
	codes = codes[:len(q)]
	out = out[:len(q)]
	for i, s := range q {
		c := codes[i]
		var r float64
		switch c {
		case code32Special:
			r = specialOf(int64(s&(1<<15-1)), int64(s>>15))
		case code32NegZero:
			r = math.Copysign(0, -1)
		default:
			r = float64(s) * scale[c]
		}
		if avg > 1 {
			r /= float64(avg)
		}
		out[i] = float32(r)
	}
}

func toFixed64(x []float64, codes []int32, q []int64, h int) {
	for i, v := range x {
		switch c := codes[i]; {
		case c == code64Special:
			q[i] = 0
			if exactCode64(v) == code64Special {
				q[i] = special64(v)
			}
		case v == 0:
			q[i] = 0
		default:
			q[i] = fixed64(v, c, h)
		}
	}
}

func fromFixed64(q []int64, codes []int32, out []float64, h, avg int) {
	for i, s := range q {
		c := codes[i]
		var r float64
		switch {
		case c == code64Special:
			r = specialOf(s&(1<<31-1), s>>31)
		case c == 0:
			r = math.Copysign(0, -1)
		default:
			// float64(s) rounds once; the scaling is exact but for a
			// subnormal result.
			r = math.Ldexp(float64(s), -scale64(c, h))
		}
		if avg > 1 {
			r /= float64(avg)
		}
		out[i] = r
	}
}

// exactOp is one exact reduction of a float32 or float64 buffer: its
// exponent round and its integer round, each a collective of its own.
type exactOp struct {
	codeFn, sumFn   func(ctx context.Context, x *call) error
	codeHdr, sumHdr transport.Header
	// before, set by the caller, waits for the exponent round (nil when it
	// has ended: a blocking call runs the rounds one after the other).
	before func() error
}

// newExact plans an exact reduction of buf with op (Sum or Avg): an
// all-reduce, or with mine a reduce-scatter that sets *mine to this rank's
// share of buf. The exponent codes are computed now (buf is the
// collective's from its start).
func newExact[T Number](buf []T, op Op, mine *[]T) *exactOp {
	switch b := any(buf).(type) {
	case []float32:
		return planExact(b, op, any(mine).(*[]float32), exactCode32, toFixed32, fromFixed32)
	case []float64:
		return planExact(b, op, any(mine).(*[]float64), exactCode64, toFixed64, fromFixed64)
	}
	panic("collective: an exact sum of a type other than float32 and float64")
}

// planExact is newExact for elements F, with exponent codes C and
// fixed-point terms Q, and their conversions.
func planExact[F float32 | float64, C uint8 | int32, Q int32 | int64](b []F, op Op, mine *[]F,
	code func(F) C, to func([]F, []C, []Q, int), from func([]Q, []C, []F, int, int)) *exactOp {
	codes := make([]C, len(b))
	for i, v := range b {
		codes[i] = code(v)
	}
	e := &exactOp{codeHdr: header[C](Max, len(b)), sumHdr: header[Q](Sum, len(b))}
	e.codeFn = allReduceWireFunc(codes, Max, WireFull)
	e.sumFn = func(ctx context.Context, x *call) error {
		if err := e.wait(); err != nil {
			return err
		}
		h, avg, err := exactSizes(x.c, op)
		if err != nil {
			return err
		}
		q, free := pooled[Q](len(b))
		defer free()
		to(b, codes, q, h)
		off, q, err := exactSum(ctx, x, q, mine != nil)
		if err != nil {
			return err
		}
		from(q, codes[off:], b[off:], h, avg)
		if mine != nil {
			*mine = b[off : off+len(q)]
		}
		return nil
	}
	return e
}

// pooled is a scratch buffer of n elements from the transport's pool, and
// what gives it back.
func pooled[Q int32 | int64](n int) ([]Q, func()) {
	if n == 0 {
		return nil, func() {}
	}
	raw := transport.GetBuf(bytesOf[Q](n))
	if q, ok := reduce.View[Q](raw); ok {
		return q[:n], func() { transport.PutBuf(raw) }
	}
	transport.PutBuf(raw)
	return make([]Q, n), func() {}
}

func (e *exactOp) wait() error {
	if e.before == nil {
		return nil
	}
	return e.before()
}

// exactSizes is the headroom of a sum over c's ranks, and the divisor of
// an Avg (1 for a Sum).
func exactSizes(c *Comm, op Op) (h, avg int, err error) {
	n := c.Size()
	if n > exactLimit {
		return 0, 0, localError("an exact sum over %d ranks: at most %d", n, exactLimit)
	}
	avg = 1
	if op == Avg {
		avg = n
	}
	return headroom(n), avg, nil
}

// exactSum sums q (integers) over every rank with x: all of it, or with
// scatter this rank's share, which it returns with its offset.
func exactSum[Q int32 | int64](ctx context.Context, x *call, q []Q, scatter bool) (int, []Q, error) {
	if !scatter {
		return 0, q, reduceAll(ctx, x, q, Sum, kindAllReduce, WireFull)
	}
	var mine []Q
	if err := reduceScatterFunc(x.c, q, Sum, &mine)(ctx, x); err != nil {
		return 0, nil, err
	}
	return cap(q) - cap(mine), mine, nil
}

// doExact runs an exact reduction to its end: the exponent round, then
// the integer round (kind names it).
func doExact(ctx context.Context, c *Comm, e *exactOp, kind uint8) error {
	if err := c.do(ctx, kindAllReduce, e.codeFn, e.codeHdr); err != nil {
		return err
	}
	return c.do(ctx, kind, e.sumFn, e.sumHdr)
}

// startExact starts both rounds of an exact reduction (one after the
// other in every rank's order of collectives) and returns the second's
// handle, which ends with the first's error if that failed; after runs
// once it succeeded.
func startExact(ctx context.Context, c *Comm, e *exactOp, kind uint8, after func()) *Handle {
	first := c.async(ctx, kindAllReduce, e.codeFn, e.codeHdr, nil)
	e.before = func() error { return first.Wait(context.Background()) }
	return c.async(ctx, kind, e.sumFn, e.sumHdr, after)
}
