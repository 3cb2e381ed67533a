// Package ring implements the algorithms of gorun's ring strategy: a pure
// plan of which chunk moves where at each step, and small synchronous
// executors that run a plan over a Transport.
//
// The all-reduce is the bandwidth-optimal ring: a reduce-scatter followed
// by an all-gather, 2(N-1) steps in all, each moving 1/N of the buffer to
// the right-hand neighbour. Each step is cut into segments and pipelined:
// a segment is forwarded as soon as it has been reduced, so sending,
// receiving and reducing overlap. Small buffers use recursive doubling or
// a one-round direct exchange instead, which are latency-optimal; the
// package also holds recursive halving-doubling, the node-aware tiers,
// binomial trees, the dissemination barrier, all-to-all (pairwise and
// Bruck) and gather/scatter.
//
// # Sends
//
// An executor receives while its sends are under way: two ranks that both
// send first must not both wait for the other to read. A frame goes out at
// once when the transport can take it without waiting (a
// transport.TrySender: a shared-memory ring with room for it, up to half
// the ring); the first that cannot, and every later frame of the same
// sender, goes from a writer goroutine started for it, in order. A call
// between ranks that share memory, whose frames all find room, thus runs
// on the caller's goroutine alone (all-to-all with varying counts aside,
// which always starts its own), and that matters most to a caller locked
// to its OS thread (a C or Python thread), for which every hand-off to
// another goroutine is a switch between OS threads. Every executor
// returns once its sends are written, so the caller owns its buffer
// again.
//
// # Wire formats
//
// Options.Wire lets float32 buffers travel as fp16 or bf16 (reduce.Wire),
// two bytes an element instead of four, in Run and what is built on it:
// AllReduce, ReduceScatter, AllGather and the Hierarchical executors (the
// others ignore it and send full precision). Sums are always taken in
// float32: a hop decodes the segment it receives, adds it into its own
// float32 chunk, and encodes the new partial sum when it forwards it. The
// rank that completes a chunk rounds its own copy to the wire format before
// the all-gather sends it, so every rank ends with the same bits, the
// owner's rounded values. The result is therefore the sum rounded to the
// wire format once per hop: over N ranks a chunk's sum is rounded N times,
// each time with a relative error of at most 2^-11 (fp16) or 2^-8 (bf16) of
// a partial sum, so |result - exact| <= N*u*sum|x_r| or so (wire_test.go
// states the bound it checks). Max and min are exact up to the rounding of
// the inputs. fp16 saturates: finite values and sums beyond ±65504 come out
// as ±65504, never as infinities, so scale (pre-divide) the inputs when the
// sums can grow that large, or use bf16, which keeps float32's range.
// Only float32 buffers take a 2-byte format; any other element type is
// refused with ErrWireType before anything is sent. The wire format rides in
// the frame's DType byte, so ranks that disagree on it fail at the first
// frame with a MismatchError that names it.
package ring

// Span is a contiguous range of a buffer, in elements.
type Span struct{ Off, Len int }

// Chunks splits n elements into size spans whose lengths differ by at most
// one; the first n%size spans get the extra element. Spans may be empty
// when n < size.
func Chunks(n, size int) []Span {
	spans := make([]Span, size)
	q, rem := n/size, n%size
	off := 0
	for i := range spans {
		l := q
		if i < rem {
			l++
		}
		spans[i] = Span{Off: off, Len: l}
		off += l
	}
	return spans
}

// Step is one step of a ring plan for one rank: send chunk Send to the
// right neighbour, receive chunk Recv from the left one, and either reduce
// it into the buffer (reduce-scatter) or copy it (all-gather).
type Step struct {
	Send, Recv int
	Reduce     bool
}

// Plan returns the 2(size-1) steps of a ring all-reduce for rank. Steps
// [0, size-1) are the reduce-scatter, after which rank r holds the fully
// reduced chunk r; steps [size-1, 2(size-1)) are the all-gather, which
// starts by sending chunk r. The chunk a step receives is the one the next
// step sends.
func Plan(rank, size int) []Step {
	if size < 2 {
		return nil
	}
	mod := func(x int) int { return ((x % size) + size) % size }
	steps := make([]Step, 2*(size-1))
	for t := range steps {
		steps[t] = Step{Send: mod(rank - t - 1), Recv: mod(rank - t - 2), Reduce: t < size-1}
	}
	return steps
}

// Right and Left are a rank's ring neighbours.
func Right(rank, size int) int { return (rank + 1) % size }

// Left is the rank that sends to rank in the ring.
func Left(rank, size int) int { return (rank + size - 1) % size }

// segments cuts a span into pieces of at most seg elements. An empty span
// gives one empty piece, so that every step moves at least one frame and
// a length mismatch between ranks is always seen at the first step.
func segments(s Span, seg int) []Span {
	if s.Len == 0 || seg <= 0 {
		return []Span{s}
	}
	out := make([]Span, 0, (s.Len+seg-1)/seg)
	for off := 0; off < s.Len; off += seg {
		out = append(out, Span{Off: s.Off + off, Len: min(seg, s.Len-off)})
	}
	return out
}
