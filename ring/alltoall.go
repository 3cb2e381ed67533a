package ring

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// AllToAllV is the personalised all-to-all exchange by pairwise exchange:
// sendSpans[j] is the part of send that goes to rank j, and recvSpans[j]
// the part of recv that receives rank j's block. Every rank passes spans
// for all size ranks; sendSpans[j].Len on rank i must equal
// recvSpans[i].Len on rank j. Spans may lie in any order and leave gaps;
// the parts of recv outside recvSpans are left as they are. send and
// recv must not overlap; the caller owns both again when AllToAllV
// returns.
//
// The own block is copied locally. Then in step k = 1 … size−1 a rank
// sends its block for rank+k and receives the block of rank−k (mod size):
// size−1 steps of one block each, which suits large blocks (AllToAllBruck
// sends fewer, larger messages for small ones). A block larger than
// o.SegmentBytes goes as several frames; any block but one small frame is
// written from a sender goroutine while this rank receives, so two ranks
// never both block writing. Segment i of step k is Step i·size+k, its
// last segment marked (segStep). Every
// frame's Header.Count is the length of the whole block it belongs to,
// which the receiver checks against its recvSpans: two ranks that
// disagree on a block's length fail with a *transport.MismatchError at
// its first frame. Even an empty block goes as one (empty) frame.
func AllToAllV[T Elem](ctx context.Context, tr Transport, send []T, sendSpans []Span, recv []T, recvSpans []Span, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if err := checkSpans("all-to-all send", sendSpans, size, len(send)); err != nil {
		return err
	}
	if err := checkSpans("all-to-all recv", recvSpans, size, len(recv)); err != nil {
		return err
	}
	if s, r := sendSpans[rank], recvSpans[rank]; s.Len != r.Len {
		return fmt.Errorf("ring: all-to-all: rank %d sends itself %d elements but expects %d", global(tr, rank), s.Len, r.Len)
	}
	copy(part(recv, recvSpans[rank]), part(send, sendSpans[rank]))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	// One goroutine writes every block, step after step, while this one
	// receives them in the same order: a rank runs ahead of its peers as
	// far as the transport's buffers let it, instead of meeting each
	// partner in turn.
	sent := make(chan error, 1)
	wctx := cpu.Unlocked(ctx) // the caller's thread may be locked; this goroutine's is not
	go func() {
		for k := 1; k < size; k++ {
			to := (rank + k) % size
			h := o.Header
			h.Count = uint64(sendSpans[to].Len)
			out := newStream(to, k, part(send, sendSpans[to]), seg)
			for i, g := range out.segs {
				h.Step = segStep(k, i, len(out.segs), size)
				if err := tr.Send(wctx, to, h, reduce.AsBytes(out.buf[g.Off:g.Off+g.Len])); err != nil {
					sent <- fmt.Errorf("step %d: send to rank %d: %w", k, global(tr, to), err)
					return
				}
			}
		}
		sent <- nil
	}()
	var err error
	for k := 1; k < size && err == nil; k++ {
		from := (rank - k + size) % size
		want := o.Header
		want.Count = uint64(recvSpans[from].Len)
		dst := pieces[T]{p: [][]T{part(recv, recvSpans[from])}}
		err = recvStream[T](ctx, tr, from, want, k, size, recvSpans[from].Len, seg, dst.put)
	}
	if err != nil {
		cancel() // the writes still under way: their peer may never read them
	}
	return explains(err, <-sent)
}

// AllToAllBruck is the all-to-all exchange of equal blocks by Bruck's
// algorithm: send and recv hold size blocks of block elements each,
// send's block j goes to rank j, and recv's block j receives rank j's
// block for this rank, exactly as AllToAllV would place them. send and
// recv must not overlap; the caller owns both again when it returns.
//
// After a local rotation (slot i holds the block for rank+i), round
// k = 0 … ⌈log2 size⌉−1 sends the slots whose index has bit k set, packed
// into one message, to rank+2^k and receives the same slots from
// rank−2^k; a final rotation puts every block in place. Each block travels
// ⌈log2 size⌉ times at most, but a rank sends only ⌈log2 size⌉ messages
// instead of size−1, so it wins for small blocks. Every frame's
// Header.Count is block, and the packed length of each round is known on
// both sides, so ranks that disagree on block fail with a
// *transport.MismatchError at the first frame. It uses two scratch
// buffers, of the whole buffer and of half of it.
func AllToAllBruck[T Elem](ctx context.Context, tr Transport, send, recv []T, block int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if block < 0 || len(send) != size*block || len(recv) != size*block {
		return fmt.Errorf("ring: all-to-all of %d-element blocks on %d ranks needs %d elements, have %d to send and %d to receive",
			block, size, size*block, len(send), len(recv))
	}
	if size < 2 {
		copy(recv, send)
		return nil
	}
	blk := func(b []T, i int) []T { return b[i*block : (i+1)*block] }
	tmp, free := scratchOf[T](size * block)
	defer free()
	for i := range size {
		copy(blk(tmp, i), blk(send, (rank+i)%size))
	}
	pk, freePk := scratchOf[T]((size / 2) * block) // round 0 moves the most slots: size/2
	defer freePk()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o.Header.Count = uint64(block)
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	rounds := log2(2*size - 1) // ⌈log2 size⌉
	var dst pieces[T]
	for k, dist := 0, 1; dist < size; k, dist = k+1, dist*2 {
		dst = pieces[T]{p: dst.p[:0]}
		n := 0
		for i := dist; i < size; i++ {
			if i&dist != 0 {
				copy(pk[n:n+block], blk(tmp, i))
				n += block
				dst.p = append(dst.p, blk(tmp, i))
			}
		}
		out := newStream((rank+dist)%size, k, pk[:n], seg)
		w := newWriter(ctx, cancel, tr, o, rounds, out)
		err := w.flush(out, n)
		if err == nil {
			// The slots just packed are free: receive straight into them.
			err = recvStream[T](ctx, tr, (rank-dist+size)%size, o.Header, k, rounds, n, seg, dst.put)
		}
		if err := w.wait(err); err != nil { // pk is reused next round
			return err
		}
	}
	for j := range size {
		copy(blk(recv, j), blk(tmp, (rank-j+size)%size))
	}
	return nil
}

// checkSpans checks that spans has one span per rank, each inside a
// buffer of n elements.
func checkSpans(what string, spans []Span, size, n int) error {
	if len(spans) != size {
		return fmt.Errorf("ring: %s: %d spans for %d ranks", what, len(spans), size)
	}
	for j, s := range spans {
		if s.Off < 0 || s.Len < 0 || s.Off > n || s.Len > n-s.Off {
			return fmt.Errorf("ring: %s: span %d {%d, %d} is outside the buffer of %d elements", what, j, s.Off, s.Len, n)
		}
	}
	return nil
}

// part is buf's span s.
func part[T Elem](buf []T, s Span) []T { return buf[s.Off : s.Off+s.Len] }

// scratchOf returns n elements of scratch from the pool directFold uses,
// and the function that gives them back.
func scratchOf[T Elem](n int) ([]T, func()) {
	b := getScratch(n * reduce.SizeOf[T]())
	if s, ok := reduce.View[T](*b); ok {
		return s[:n:n], func() { putScratch(b) }
	}
	putScratch(b)
	return make([]T, n), func() {}
}

// lastSeg marks the Step of a block's last segment.
const lastSeg = 1 << 31

// segStep is the Step of segment i of the n segments of step k, in a
// collective of steps distinct steps. Each (k, i) gets its own number,
// computed alike on the two sides of a link that agree on the block's
// length, and the last segment is marked: ranks that disagree on a
// block's length fail at the frame where their segmentations part, rather
// than one waiting for a frame the other never sends.
func segStep(k, i, n, steps int) uint32 {
	s := (uint32(i)*uint32(steps) + uint32(k)) &^ lastSeg
	if i == n-1 {
		s |= lastSeg
	}
	return s
}

// stream is a block going to one peer as step step, in segments that are
// written as soon as the part of buf they cover has been filled.
type stream[T Elem] struct {
	to, step int
	buf      []T
	segs     []Span // of buf
	next     int    // the first segment not yet written
}

func newStream[T Elem](to, step int, buf []T, seg int) *stream[T] {
	return &stream[T]{to: to, step: step, buf: buf, segs: segments(Span{0, len(buf)}, seg)}
}

// inline says whether s goes as one small frame, which fits in the
// transport's buffers and so is written without a sender goroutine.
func (s *stream[T]) inline() bool {
	return len(s.segs) == 1 && len(s.buf)*reduce.SizeOf[T]() <= peerInlineBytes
}

// writer writes the streams of one step (or of a tree collective) with
// o's header, whose Count is theirs: inline ones directly, the rest from a
// sender goroutine, which it starts only if some stream needs it.
type writer[T Elem] struct {
	ctx    context.Context
	cancel context.CancelFunc
	tr     Transport
	o      Options
	steps  int
	snd    *sender[T]
}

// newWriter returns the writer of streams in a collective of steps
// distinct steps; cancel must cancel ctx.
func newWriter[T Elem](ctx context.Context, cancel context.CancelFunc, tr Transport, o Options, steps int, streams ...*stream[T]) *writer[T] {
	w := &writer[T]{ctx: ctx, cancel: cancel, tr: tr, o: o, steps: steps}
	queued := 0
	for _, s := range streams {
		if !s.inline() {
			queued += len(s.segs)
		}
	}
	if queued > 0 { // the queue holds every segment, so enqueueing never blocks
		w.snd = startSender[T](ctx, cancel, tr, queued, o)
	}
	return w
}

// flush writes the segments of s that lie within s.buf[:ready] and have
// not been written yet.
func (w *writer[T]) flush(s *stream[T], ready int) error {
	for ; s.next < len(s.segs); s.next++ {
		g := s.segs[s.next]
		if g.Off+g.Len > ready {
			return nil
		}
		step := segStep(s.step, s.next, len(s.segs), w.steps)
		data := s.buf[g.Off : g.Off+g.Len]
		if w.snd == nil || s.inline() {
			h := w.o.Header
			h.Step = step
			if err := w.tr.Send(w.ctx, s.to, h, reduce.AsBytes(data)); err != nil {
				return fmt.Errorf("step %d: send to rank %d: %w", s.step, global(w.tr, s.to), err)
			}
			continue
		}
		w.snd.put(sendItem[T]{s.to, step, data})
	}
	return nil
}

// wait waits for the sender goroutine, if any, and returns the error that
// explains a failure. After an error (err) it first cancels the sends
// still under way: their peer may never read them.
func (w *writer[T]) wait(err error) error {
	if err != nil {
		w.cancel()
	}
	if w.snd == nil {
		return err
	}
	return w.snd.wait(err)
}

// recvStream receives the n elements that peer from sends as step, in
// segments of seg elements, checks every frame against want (whose Count
// is the block's) and hands each payload to put, in order, before
// releasing it.
func recvStream[T Elem](ctx context.Context, tr Transport, from int, want transport.Header, step, steps, n, seg int, put func(p []byte) error) error {
	es := reduce.SizeOf[T]()
	segs := segments(Span{0, n}, seg)
	for i, s := range segs {
		f, err := tr.Recv(ctx, from)
		if err != nil {
			return fmt.Errorf("step %d: recv from rank %d: %w", step, global(tr, from), err)
		}
		if err := check(&f, want, global(tr, from), segStep(step, i, len(segs), steps), s.Len*es); err != nil {
			f.Release()
			return fmt.Errorf("step %d: %w", step, err)
		}
		err = put(f.Payload)
		f.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// pieces is a destination made of several slices, filled in order by the
// payloads of a stream.
type pieces[T Elem] struct {
	p   [][]T
	i   int // the piece being filled
	off int // elements of p[i] filled
}

// put copies the payload b (whole elements) into the next elements.
func (d *pieces[T]) put(b []byte) error {
	es := reduce.SizeOf[T]()
	for len(b) > 0 {
		for d.i < len(d.p) && d.off == len(d.p[d.i]) {
			d.i, d.off = d.i+1, 0
		}
		if d.i == len(d.p) {
			return fmt.Errorf("ring: %d bytes more than the destination holds", len(b)) // check() makes this unreachable
		}
		n := copy(reduce.AsBytes(d.p[d.i][d.off:]), b)
		d.off += n / es
		b = b[n:]
	}
	return nil
}
