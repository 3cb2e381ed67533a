package ring

import (
	"context"
	"fmt"
	"math"

	"github.com/gorun/gorun/reduce"
)

// Gather collects every rank's send at root (GatherV): rank r's send
// holds spans[r].Len elements, and at root recv's span spans[r] receives
// them. Every rank passes the same spans; recv is only used at root and
// may be nil elsewhere, and the parts of root's recv outside the spans are
// left as they are. send and recv must not overlap; the caller owns both
// again when Gather returns.
//
// The blocks go up the binomial tree of TreeLinks, so the root receives
// from ⌈log2 size⌉ ranks only. Each rank sends its parent one stream: its
// subtree's blocks packed in relative-rank order (rank − root mod size),
// its own first; a rank with children packs it in scratch, and forwards
// each segment as soon as it is filled. The stream of the child at
// distance 2^k is step k. Every frame's Header.Count is the total of all
// spans, and every frame's length is checked against the receiver's idea
// of the subtree, so ranks that disagree on the spans fail with a
// *transport.MismatchError instead of hanging. Options.Header.Op should
// carry the root, as ranks that disagree on it cannot be told apart
// otherwise.
func Gather[T Elem](ctx context.Context, tr Transport, send []T, recv []T, spans []Span, root int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if err := checkRooted("gather", rank, size, root, spans, len(recv)); err != nil {
		return err
	}
	if len(send) != spans[rank].Len {
		return fmt.Errorf("ring: gather: rank %d sends %d elements, its span has %d", global(tr, rank), len(send), spans[rank].Len)
	}
	if size < 2 {
		copy(part(recv, spans[rank]), send)
		return nil
	}
	t := newTree(rank, root, size, spans)
	o.Header.Count = uint64(t.pre[size])
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parent, children := TreeLinks(rank, root, size)
	if rank == root {
		copy(part(recv, spans[rank]), send)
		for i := len(children) - 1; i >= 0; i-- { // nearest first: done soonest
			c := t.rel(children[i])
			var dst pieces[T]
			for u := c; u < t.end(c); u++ {
				dst.p = append(dst.p, part(recv, spans[t.abs(u)]))
			}
			if err := recvStream[T](ctx, tr, children[i], o.Header, t.level(c), t.levels, t.len(c), seg, dst.put); err != nil {
				return err
			}
		}
		return nil
	}
	buf := send
	if len(children) > 0 {
		s, free := scratchOf[T](t.len(t.v))
		defer free() // after w.wait below
		copy(s, send)
		buf = s
	}
	out := newStream(parent, t.level(t.v), buf, seg)
	w := newWriter(ctx, cancel, tr, o, t.levels, out)
	ready := len(send)
	err := w.flush(out, ready)
	put := func(p []byte) error {
		ready += copy(reduce.AsBytes(buf[ready:]), p) / reduce.SizeOf[T]()
		return w.flush(out, ready)
	}
	// In relative-rank order, the order of the stream.
	for i := len(children) - 1; i >= 0 && err == nil; i-- {
		c := t.rel(children[i])
		err = recvStream[T](ctx, tr, children[i], o.Header, t.level(c), t.levels, t.len(c), seg, put)
	}
	return w.wait(err)
}

// Scatter is Gather reversed (ScatterV): root's send span spans[r] lands
// in rank r's recv, which must hold exactly spans[r].Len elements. Every
// rank passes the same spans; send is only used at root and may be nil
// elsewhere. send and recv must not overlap; the caller owns both again
// when Scatter returns. An argument error is returned before any data
// moves, and then the other ranks would wait: the caller checks its
// arguments on every rank first.
//
// The blocks go down the binomial tree of TreeLinks: the root sends each
// child the blocks of its subtree packed in relative-rank order (straight
// from send when they already lie end to end there, else through
// scratch), deepest subtree first; a rank with children receives its
// stream, keeps its own block and forwards each child's part segment by
// segment as soon as it has arrived. Steps, Counts and checks are as in
// Gather.
func Scatter[T Elem](ctx context.Context, tr Transport, send []T, spans []Span, recv []T, root int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if err := checkRooted("scatter", rank, size, root, spans, len(send)); err != nil {
		return err
	}
	if len(recv) != spans[rank].Len {
		return fmt.Errorf("ring: scatter: rank %d receives into %d elements, its span has %d", global(tr, rank), len(recv), spans[rank].Len)
	}
	if size < 2 {
		copy(recv, part(send, spans[rank]))
		return nil
	}
	t := newTree(rank, root, size, spans)
	o.Header.Count = uint64(t.pre[size])
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parent, children := TreeLinks(rank, root, size)
	if rank == root {
		copy(recv, part(send, spans[rank]))
		var pk []T // every other rank's block, packed, if some subtree needs it
		streams := make([]*stream[T], len(children))
		for i, ch := range children { // farthest, so deepest, first
			c := t.rel(ch)
			buf, ok := subtreeIn(t, send, c)
			if !ok {
				if pk == nil {
					var free func()
					pk, free = scratchOf[T](t.pre[size] - t.pre[1])
					defer free() // after w.wait below
				}
				buf = pk[t.pre[c]-t.pre[1] : t.pre[t.end(c)]-t.pre[1]]
				pack(t, buf, send, c)
			}
			streams[i] = newStream(ch, t.level(c), buf, seg)
		}
		w := newWriter(ctx, cancel, tr, o, t.levels, streams...)
		var err error
		for _, s := range streams {
			if err = w.flush(s, len(s.buf)); err != nil {
				break
			}
		}
		return w.wait(err)
	}
	own := len(recv)
	var rest []T // the children's blocks
	if len(children) > 0 {
		var free func()
		rest, free = scratchOf[T](t.len(t.v) - own)
		defer free() // after w.wait below
	}
	streams := make([]*stream[T], len(children))
	offs := make([]int, len(children)) // of each child's part in the stream
	for i, ch := range children {
		c := t.rel(ch)
		offs[i] = t.pre[c] - t.pre[t.v]
		streams[i] = newStream(ch, t.level(c), rest[offs[i]-own:offs[i]-own+t.len(c)], seg)
	}
	w := newWriter(ctx, cancel, tr, o, t.levels, streams...)
	dst := pieces[T]{p: [][]T{recv, rest}}
	ready := 0
	put := func(p []byte) error {
		if err := dst.put(p); err != nil {
			return err
		}
		ready += len(p) / reduce.SizeOf[T]()
		for i, s := range streams {
			if err := w.flush(s, ready-offs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	err := recvStream[T](ctx, tr, parent, o.Header, t.level(t.v), t.levels, t.len(t.v), seg, put)
	return w.wait(err)
}

// tree is the binomial tree of Gather and Scatter seen from one rank, in
// relative ranks (rank − root mod size): the subtree of relative rank v
// is [v, end(v)), and its blocks are packed in that order.
// checkRooted checks a rooted collective's root and spans; rootLen is
// the length of the buffer only the root uses (non-roots check only the
// spans' lengths).
func checkRooted(what string, rank, size, root int, spans []Span, rootLen int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("ring: %s: root %d is not one of %d ranks", what, root, size)
	}
	n := math.MaxInt
	if rank == root {
		n = rootLen
	}
	return checkSpans(what, spans, size, n)
}

type tree struct {
	root, size int
	v          int   // this rank's relative rank
	levels     int   // ⌈log2 size⌉: the steps
	pre        []int // pre[u]: elements of relative ranks [0, u)
	spans      []Span
}

func newTree(rank, root, size int, spans []Span) tree {
	t := tree{root: root, size: size, v: (rank - root + size) % size, levels: log2(2*size - 1), pre: make([]int, size+1), spans: spans}
	for u := range size {
		t.pre[u+1] = t.pre[u] + spans[t.abs(u)].Len
	}
	return t
}

// rel is rank r's relative rank; abs is relative rank u's rank.
func (t tree) rel(r int) int { return (r - t.root + t.size) % t.size }
func (t tree) abs(u int) int { return (u + t.root) % t.size }

// end is one past the last relative rank of u's subtree.
func (t tree) end(u int) int {
	if u == 0 {
		return t.size
	}
	return min(u+u&-u, t.size)
}

// len is the number of elements in u's subtree.
func (t tree) len(u int) int { return t.pre[t.end(u)] - t.pre[u] }

// level is the step of the link between u (not the root) and its parent,
// which is 2^level away.
func (t tree) level(u int) int { return log2(u & -u) }

// subtreeIn returns the blocks of u's subtree in buf, if they lie there
// end to end in relative-rank order (empty blocks may lie anywhere).
func subtreeIn[T Elem](t tree, buf []T, u int) ([]T, bool) {
	start, at := -1, 0
	for w := u; w < t.end(u); w++ {
		s := t.spans[t.abs(w)]
		switch {
		case s.Len == 0:
		case start < 0:
			start, at = s.Off, s.Off+s.Len
		case s.Off != at:
			return nil, false
		default:
			at += s.Len
		}
	}
	if start < 0 {
		return buf[:0], true
	}
	return buf[start:at], true
}

// pack copies the blocks of u's subtree from buf into dst, end to end.
func pack[T Elem](t tree, dst, buf []T, u int) {
	n := 0
	for w := u; w < t.end(u); w++ {
		n += copy(dst[n:], part(buf, t.spans[t.abs(w)]))
	}
}
