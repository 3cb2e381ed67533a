package ring

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/reduce"
)

// Direct is the latency-optimal all-reduce for small buffers: one round in
// which every rank sends its buffer to every other rank, then reduces all
// of them in rank order, so every rank gets the same bits.
func Direct[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	segs := segments(Span{0, len(buf)}, seg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(segs) == 1 && len(buf)*reduce.SizeOf[T]()*(size-1) <= inlineBytes {
		// Small: the frames fit in the socket buffers, so writing them
		// here cannot block on the peers, and saves a goroutine handoff.
		for i := 1; i < size; i++ {
			h := o.Header
			if err := tr.Send(ctx, (rank+i)%size, h, reduce.AsBytes(buf)); err != nil {
				return fmt.Errorf("send to rank %d: %w", (rank+i)%size, err)
			}
		}
		return directReduce(ctx, tr, buf, fold, seg, o, nil)
	}
	snd := startSender[T](ctx, cancel, tr, (size-1)*len(segs), o)
	for i := 1; i < size; i++ {
		for _, s := range segs {
			snd.queue <- sendItem[T]{(rank + i) % size, 0, buf[s.Off : s.Off+s.Len]}
		}
	}
	return directReduce(ctx, tr, buf, fold, seg, o, snd)
}

// inlineBytes bounds what Direct writes without a sender goroutine.
const inlineBytes = 256 << 10

// directReduce receives every peer's buffer and reduces in rank order.
// snd, if not nil, must finish before buf is overwritten.
func directReduce[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), seg int, o Options, snd *sender[T]) error {
	rank, size := tr.Rank(), tr.Size()
	wait := func(err error) error {
		if snd != nil {
			return snd.wait(err)
		}
		return err
	}
	// acc = buf_0 op buf_1 op ... op buf_{size-1}, in rank order.
	acc := make([]T, len(buf))
	tmp := make([]T, len(buf))
	for j := range size {
		src := buf
		if j != rank {
			if err := recvInto(ctx, tr, j, 0, tmp, seg, nil, o); err != nil {
				return wait(err)
			}
			src = tmp
		}
		if j == 0 {
			copy(acc, src)
		} else {
			fold(acc, src)
		}
	}
	// Every send of buf must be written before buf is overwritten.
	if err := wait(nil); err != nil {
		return err
	}
	copy(buf, acc)
	return nil
}
