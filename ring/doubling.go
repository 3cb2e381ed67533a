package ring

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/reduce"
)

// Doubling is the recursive-doubling all-reduce: in round k every rank
// swaps its partial result with the rank 2^k away and combines the two,
// so log2(N) rounds of one message each replace Direct's N-1 messages.
// When N is not a power of two, the first 2·(N−p) ranks (p the largest
// power of two below N) first fold in pairs, and the result is sent back
// to the ranks that sat out. Partners combine the lower ranks' part first,
// so every rank ends with the same bits.
func Doubling[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	q := newPow2(size)
	x, cancel := newExchanger[T](ctx, tr, o)
	defer cancel()
	tmp := make([]T, len(buf))
	// combine leaves lower op higher in buf, whichever of the two is ours.
	combine := func(theirsLower bool) {
		if theirsLower {
			fold(tmp, buf)
			copy(buf, tmp)
		} else {
			fold(buf, tmp)
		}
	}
	v, err := foldIn(x, q, rank, buf, func(from int) error {
		if err := x.recv(from, 0, tmp); err != nil {
			return err
		}
		combine(true)
		return nil
	})
	if err != nil {
		return err
	}
	step := uint32(1)
	for dist := 1; dist < q.p; dist, step = dist*2, step+1 {
		if v < 0 {
			continue
		}
		peer := q.real(v ^ dist)
		if err := x.swap(peer, step, buf, tmp); err != nil {
			return err
		}
		combine(v^dist < v)
	}
	return sendBack(x, q, rank, step, buf)
}

// pow2 is the power-of-two group recursive doubling and halving run on:
// p is the largest power of two up to the job's size, and the first
// 2·rem ranks (rem = size − p) pair up before and after, each even one
// sitting out while its odd partner stands for both.
type pow2 struct{ p, rem int }

func newPow2(size int) pow2 {
	p := 1
	for p*2 <= size {
		p *= 2
	}
	return pow2{p: p, rem: size - p}
}

// real is the rank of virtual rank v of the group.
func (q pow2) real(v int) int {
	if v < q.rem {
		return 2*v + 1
	}
	return v + q.rem
}

// foldIn pairs the first 2·rem ranks: an even one sends its buf to its
// odd partner, whose recv folds it in. It returns rank's virtual rank in
// the power-of-two group, -1 for a rank that sits out.
func foldIn[T Elem](x *exchanger[T], q pow2, rank int, buf []T, recv func(from int) error) (int, error) {
	if rank >= 2*q.rem {
		return rank - q.rem, nil
	}
	if rank%2 == 0 {
		return -1, x.send(rank+1, 0, buf)
	}
	return rank / 2, recv(rank - 1)
}

// sendBack gives the ranks that sat out the result, as step step.
func sendBack[T Elem](x *exchanger[T], q pow2, rank int, step uint32, buf []T) error {
	if rank >= 2*q.rem {
		return nil
	}
	if rank%2 == 1 {
		return x.send(rank-1, step, buf)
	}
	return x.recv(rank+1, step, buf)
}

// exchanger moves whole buffers between two ranks in segments, for the
// executors that talk to one peer at a time.
type exchanger[T Elem] struct {
	ctx    context.Context
	cancel context.CancelFunc
	tr     Transport
	o      Options
	seg    int
}

// newExchanger is an exchanger for one call over tr, whose context ends
// with the call: the caller defers the cancel it returns (a failed send
// cancels it too).
func newExchanger[T Elem](ctx context.Context, tr Transport, o Options) (*exchanger[T], context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	return &exchanger[T]{ctx: ctx, cancel: cancel, tr: tr, o: o, seg: max(1, o.SegmentBytes/reduce.SizeOf[T]())}, cancel
}

func (x *exchanger[T]) send(to int, step uint32, data []T) error {
	return x.swap(to, step, data, nil)
}

func (x *exchanger[T]) recv(from int, step uint32, dst []T) error {
	return x.recvFold(from, step, dst, nil)
}

// recvFold receives from's data of step into dst, reducing it in with
// fold as each segment arrives (fold nil: copy).
func (x *exchanger[T]) recvFold(from int, step uint32, dst []T, fold func(dst, src []T)) error {
	if err := recvInto(x.ctx, x.tr, from, step, dst, x.seg, fold, x.o); err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	return nil
}

// swap sends data to peer and, if dst is not nil, receives peer's data of
// the same step into dst. Small buffers (peerInlineBytes) are written
// inline, since they fit in the socket buffers and the shared rings;
// larger ones from a sender goroutine, so that the two ranks never both
// block writing.
func (x *exchanger[T]) swap(peer int, step uint32, data, dst []T) error {
	return x.swapFold(peer, step, data, dst, nil)
}

// swapFold is swap that reduces what it receives into dst with fold.
func (x *exchanger[T]) swapFold(peer int, step uint32, data, dst []T, fold func(dst, src []T)) error {
	segs := segments(Span{0, len(data)}, x.seg)
	if len(segs) == 1 && len(data)*reduce.SizeOf[T]() <= peerInlineBytes {
		h := x.o.Header
		h.Step = step
		if err := x.tr.Send(x.ctx, peer, h, reduce.AsBytes(data)); err != nil {
			return fmt.Errorf("step %d: send to rank %d: %w", step, peer, err)
		}
		if dst == nil {
			return nil
		}
		return x.recvFold(peer, step, dst, fold)
	}
	snd := startSender[T](x.ctx, x.cancel, x.tr, len(segs), x.o)
	for _, s := range segs {
		snd.put(sendItem[T]{peer, step, data[s.Off : s.Off+s.Len]})
	}
	var err error
	if dst != nil {
		err = x.recvFold(peer, step, dst, fold)
	}
	return snd.wait(err)
}

// DoublingGather is the all-gather by recursive doubling: buf holds size
// blocks of n elements, this rank's own at rank*n. In round k every rank
// swaps the blocks it holds (2^k of them, side by side) with the rank 2^k
// away, so log2(N) rounds move each block once to each rank, as the ring
// does, in log2(N) steps instead of N-1. When N is not a power of two the
// first 2·(N−p) ranks first pair up (the even one sends its block to its
// odd partner, which then holds both), and the odd ones send the whole
// result back at the end. Every rank calls it with the same n.
func DoublingGather[T Elem](ctx context.Context, tr Transport, buf []T, n int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if len(buf) != n*size {
		return fmt.Errorf("ring: all-gather of %d elements over %d ranks of %d", len(buf), size, n)
	}
	if size < 2 {
		return nil
	}
	q := newPow2(size)
	x, cancel := newExchanger[T](ctx, tr, o)
	defer cancel()
	// first is the first block virtual rank v holds after the pairing:
	// blocks 2v and 2v+1 for a pair, block v+rem after them. A run of
	// virtual ranks holds a run of blocks.
	first := func(v int) int {
		if v < q.rem {
			return 2 * v
		}
		return v + q.rem
	}
	blocks := func(lo, hi int) []T { return buf[first(lo)*n : first(hi)*n] }
	v, err := foldIn(x, q, rank, buf[rank*n:(rank+1)*n], func(from int) error {
		return x.recv(from, 0, buf[from*n:(from+1)*n])
	})
	if err != nil {
		return err
	}
	step := uint32(1)
	for dist := 1; dist < q.p; dist, step = dist*2, step+1 {
		if v < 0 {
			continue
		}
		mine, theirs := v&^(dist-1), (v^dist)&^(dist-1)
		if err := x.swap(q.real(v^dist), step, blocks(mine, mine+dist), blocks(theirs, theirs+dist)); err != nil {
			return err
		}
	}
	return sendBack(x, q, rank, step, buf)
}
