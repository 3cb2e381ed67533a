package collective

import (
	"context"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/reduce/exact"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
)

// Exact sums (Config.Exact): a float32 or float64 Sum or Avg whose result
// is the same bits whatever the algorithm, strategy, placement, rank
// order, fusion or chunking. Package reduce/exact holds the arithmetic
// (each element summed as an integer at an exponent every rank shares)
// and its bound; here it runs as collectives:
//
//   - small buffers (exactGatherBytes over all ranks): one all-gather of
//     every rank's input, then the sum of the rows here (exact.SumRows32);
//   - larger ones on the ring of two ranks: its reduce-scatter half, one
//     exchange whose fold sums the two ranks' chunks exactly
//     (exact.SumOf32), then its all-gather half, which passes the floats;
//   - larger ones otherwise: a Max all-reduce of each element's exponent
//     code, then a Sum all-reduce of the fixed-point integers (on the
//     ring: its reduce-scatter half, each rank's chunk converted back,
//     then its all-gather half).
//
// All give the same bits: the codes are the same Max, the integers the
// same sum in another order.
//
// What it cannot promise: equal bits across jobs of different sizes (the
// headroom, and the sum itself, depend on the size), nor when ranks compute
// their inputs differently; the fp16 and bf16 wire formats do not apply
// (the integers travel at full width). It costs the conversions and, past
// two ranks, the exponent round (one byte per float32 element, four per
// float64); the integers are as wide as the elements.

// SetExact turns exact sums (Config.Exact) on or off for the collectives
// this Comm starts from now on (its groups made later inherit it). Like a
// collective, every rank must switch at the same point: ranks that
// disagree fail their next sum with ErrSizeMismatch.
func (c *Comm) SetExact(on bool) { c.exact.Store(on) }

// Exact reports whether this Comm's float sums are exact.
func (c *Comm) Exact() bool { return c.exact.Load() }

// exactFor reports whether a reduction of T with op is summed exactly on
// c.
func exactFor[T Number](c *Comm, op Op) bool {
	if !c.exact.Load() || (op != Sum && op != Avg) {
		return false
	}
	dt := dtype[T]()
	return dt == reduce.Float32 || dt == reduce.Float64
}

// exactOp is one exact reduction of a float32 or float64 buffer: its
// exponent round and its integer round, each a collective of its own, or
// (codeFn nil) one all-gather.
type exactOp struct {
	codeFn, sumFn   func(ctx context.Context, x *call) error
	codeHdr, sumHdr transport.Header
	// before, set by the caller, waits for the exponent round (nil when it
	// has ended: a blocking call runs the rounds one after the other).
	before func() error
}

// exactGatherBytes is the most bytes (every rank's buffer together) that an
// exact sum gathers to sum here, in one round instead of two.
const exactGatherBytes = 64 << 10

// opExactGather is the Op in the header of an exact sum's all-gather: a
// rank that sums plainly (or gathers plainly) at the same point fails with
// ErrSizeMismatch instead of mixing the two.
const opExactGather Op = 0xe5

// newExact plans an exact reduction of buf with op (Sum or Avg) on c: an
// all-reduce, or with mine a reduce-scatter that sets *mine to this rank's
// share of buf. The exponent codes are computed now (buf is the
// collective's from its start).
func newExact[T Number](c *Comm, buf []T, op Op, mine *[]T) *exactOp {
	switch b := any(buf).(type) {
	case []float32:
		switch {
		case gatherExact[float32](c, len(b), mine == nil):
			return gatherSum(b, op, exact.SumRows32)
		case pairExact[float32](c, len(b), mine == nil):
			return pairSum(b, op, any(mine).(*[]float32), exact.SumOf32)
		}
		return planExact(b, op, any(mine).(*[]float32), exact.Codes32, exact.ToFixed32, exact.FromFixed32)
	case []float64:
		switch {
		case gatherExact[float64](c, len(b), mine == nil):
			return gatherSum(b, op, exact.SumRows64)
		case pairExact[float64](c, len(b), mine == nil):
			return pairSum(b, op, any(mine).(*[]float64), exact.SumOf64)
		}
		return planExact(b, op, any(mine).(*[]float64), exact.Codes64, exact.ToFixed64, exact.FromFixed64)
	}
	panic("collective: an exact sum of a type other than float32 and float64")
}

// gatherExact reports whether an exact all-reduce of n elements of F on c
// gathers every rank's buffer and sums here: small buffers, where a
// second round costs more than n·Size() conversions.
func gatherExact[F float32 | float64](c *Comm, n int, all bool) bool {
	size := c.Size()
	return all && size <= exact.MaxRanks && size*bytesOf[F](n) <= exactGatherBytes
}

// gatherSum is an exact all-reduce in one round: every rank's buffer
// gathered, and their exact sum (sum: exact.SumRows32 or 64) computed
// here, the same bits as the two rounds give.
func gatherSum[F float32 | float64](b []F, op Op, sum func(all []F, n int, out []F, avg int)) *exactOp {
	e := &exactOp{sumHdr: header[F](opExactGather, len(b))}
	e.sumFn = func(ctx context.Context, x *call) error {
		_, avg, err := exactSizes(x.c, op)
		if err != nil {
			return err
		}
		n := x.c.Size()
		all, free := pooled[F](n * len(b))
		defer free()
		if err := allGatherFunc(x.c, b, all)(ctx, x); err != nil {
			return err
		}
		sum(all, n, b, avg)
		return nil
	}
	return e
}

// opExactPair is the Op in the header of a two-rank exact sum's
// exchange, as opExactGather is of an all-gather.
const opExactPair Op = 0xe6

// pairExact reports whether an exact all-reduce (all) or reduce-scatter
// of n elements of F on c sums pairs (pairSum): two ranks, on the ring.
func pairExact[F float32 | float64](c *Comm, n int, all bool) bool {
	kind := kindReduceScatter
	if all {
		kind = kindAllReduce
	}
	return c.Size() == 2 && c.planFor(kind, bytesOf[F](n)) == viaRing
}

// pairSum is an exact sum of two ranks in one round: the ring's
// reduce-scatter half, one exchange of chunks (ring.Chunks) at two ranks,
// whose fold sums this rank's chunk and the peer's exactly (sum:
// exact.SumOf32 or 64), the same bits as the two rounds give, and (for
// an all-reduce) the all-gather half. It needs no exponent round: both
// terms' codes are at hand where they meet. With mine it is a
// reduce-scatter: *mine is set to this rank's chunk, and nothing is
// gathered. On an error b holds the input and sums mixed, as a plain
// all-reduce's buffer holds partial sums.
func pairSum[F float32 | float64](b []F, op Op, mine *[]F, sum func(rows [][]F, out []F, avg int)) *exactOp {
	e := &exactOp{sumHdr: header[F](opExactPair, len(b))}
	e.sumFn = func(ctx context.Context, x *call) error {
		_, avg, err := exactSizes(x.c, op)
		if err != nil {
			return err
		}
		rank, size := x.net.Rank(), x.net.Size()
		if size != 2 {
			return localError("an exact sum of pairs over %d ranks", size)
		}
		spans := ring.Chunks(len(b), size)
		steps := ring.Plan(rank, size)
		fold := func(dst, src []F) { sum([][]F{dst, src}, dst, avg) }
		o := x.o
		o.Wire = WireFull
		if err := ring.Run(ctx, x.net, b, spans, steps[:len(steps)/2], fold, o); err != nil {
			return err
		}
		if mine != nil {
			own := spans[rank]
			*mine = b[own.Off : own.Off+own.Len]
			return nil
		}
		return ringGatherChunks(ctx, x, b, o)
	}
	return e
}

// planExact is newExact's two rounds for elements F, with exponent codes
// C and fixed-point terms Q, and their conversions.
func planExact[F float32 | float64, C uint8 | int32, Q int32 | int64](b []F, op Op, mine *[]F,
	code func([]F, []C), to func([]F, []C, []Q, int), from func([]Q, []C, []F, int, int)) *exactOp {
	// The codes come from the transport's pool (a fresh buffer each call
	// cost its zeroing and page faults) and go back when the integer round
	// ends, after the exponent round has; if that round never runs they
	// are the collector's.
	codes, freeCodes := pooled[C](len(b))
	code(b, codes)
	e := &exactOp{codeHdr: header[C](Max, len(b)), sumHdr: header[Q](Sum, len(b))}
	e.codeFn = allReduceWireFunc(codes, Max, WireFull)
	e.sumFn = func(ctx context.Context, x *call) error {
		err := e.wait() // the exponent round has ended, whatever its outcome
		defer freeCodes()
		if err != nil {
			return err
		}
		h, avg, err := exactSizes(x.c, op)
		if err != nil {
			return err
		}
		if mine == nil && x.c.planFor(kindAllReduce, bytesOf[Q](len(b))) == viaRing {
			return ringExactSum(ctx, x, b, codes,
				func(x []F, codes []C, q []Q) { to(x, codes, q, h) },
				func(q []Q, codes []C, out []F) { from(q, codes, out, h, avg) })
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
func pooled[Q uint8 | int32 | int64 | float32 | float64](n int) ([]Q, func()) {
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
	if n > exact.MaxRanks {
		return 0, 0, localError("an exact sum over %d ranks: at most %d", n, exact.MaxRanks)
	}
	avg = 1
	if op == Avg {
		avg = n
	}
	return exact.Headroom(n), avg, nil
}

// ringExactSum is the integer round of an exact all-reduce on the ring,
// in place: b's elements become their fixed-point integers (the same
// width: float32 and int32, float64 and int64) as the reduce-scatter half
// reaches them, so no pass converts the whole buffer first. This rank
// converts the chunk it sends first before the ring starts; every other
// chunk it converts where it adds the integers it receives into it (each
// is received once). Its own chunk's sum it converts back (from), and the
// all-gather half passes the converted chunks round. On an error b holds
// integers and floats mixed, as a plain all-reduce's buffer holds partial
// sums.
func ringExactSum[F float32 | float64, C uint8 | int32, Q int32 | int64](ctx context.Context, x *call, b []F, codes []C,
	to func([]F, []C, []Q), from func([]Q, []C, []F)) error {
	q, ok := reduce.View[Q](reduce.AsBytes(b))
	if !ok {
		return localError("an exact sum's buffer is not aligned to its elements")
	}
	rank, size := x.net.Rank(), x.net.Size()
	spans := ring.Chunks(len(b), size)
	steps := ring.Plan(rank, size)
	steps = steps[:len(steps)/2]
	convert := func(off, n int) { to(b[off:off+n], codes[off:off+n], q[off:off+n]) }
	switch {
	case len(steps) == 0: // one rank: its chunk is the whole buffer
		convert(0, len(b))
	default:
		first := spans[steps[0].Send]
		convert(first.Off, first.Len)
	}
	add := reducer[Q](Sum)
	fold := func(dst, src []Q) {
		// dst (a span of q) still holds this rank's floats.
		convert(cap(q)-cap(dst), len(dst))
		add(dst, src)
	}
	o := x.o
	o.Wire = WireFull
	if err := ring.Run(ctx, x.net, q, spans, steps, fold, o); err != nil {
		return err
	}
	s := spans[rank]
	from(q[s.Off:s.Off+s.Len], codes[s.Off:s.Off+s.Len], b[s.Off:s.Off+s.Len])
	return ringGatherChunks(ctx, x, b, o)
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
	if e.codeFn == nil {
		return c.do(ctx, kind, e.sumFn, e.sumHdr)
	}
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
	if e.codeFn == nil {
		return c.async(ctx, kind, e.sumFn, e.sumHdr, after)
	}
	first := c.async(ctx, kindAllReduce, e.codeFn, e.codeHdr, nil)
	e.before = func() error { return first.Wait(context.Background()) }
	return c.async(ctx, kind, e.sumFn, e.sumHdr, after)
}
