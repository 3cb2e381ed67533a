package ring

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
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
	if len(segs) == 1 && len(buf)*reduce.SizeOf[T]()*(size-1) <= inlineBytes {
		// Small: the frames fit in the socket buffers (or the shared
		// rings), so writing them here cannot block on the peers, and
		// saves a goroutine handoff.
		for i := 1; i < size; i++ {
			h := o.Header
			if err := tr.Send(ctx, (rank+i)%size, h, reduce.AsBytes(buf)); err != nil {
				return fmt.Errorf("send to rank %d: %w", global(tr, (rank+i)%size), err)
			}
		}
		return directFold(ctx, tr, buf, fold, o)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snd := startSender[T](ctx, cancel, tr, (size-1)*len(segs), o)
	for i := 1; i < size; i++ {
		for _, s := range segs {
			snd.put(sendItem[T]{(rank + i) % size, 0, buf[s.Off : s.Off+s.Len]})
		}
	}
	return directReduce(ctx, tr, buf, fold, seg, o, snd)
}

// DirectGather is the latency-optimal all-gather for small blocks: buf
// holds size blocks of n elements, this rank's own at rank*n; in one round
// every rank sends its block to every other rank and copies each peer's
// into its place. Every rank calls it with the same n.
func DirectGather[T Elem](ctx context.Context, tr Transport, buf []T, n int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	if len(buf) != n*size {
		return fmt.Errorf("ring: all-gather of %d elements over %d ranks of %d", len(buf), size, n)
	}
	mine := buf[rank*n : (rank+1)*n]
	es := reduce.SizeOf[T]()
	seg := max(1, o.SegmentBytes/es)
	segs := segments(Span{0, n}, seg)
	recvAll := func() error {
		for i := 1; i < size; i++ {
			j := (rank - i + size) % size
			if err := recvInto(ctx, tr, j, 0, buf[j*n:(j+1)*n], seg, nil, o); err != nil {
				return err
			}
		}
		return nil
	}
	if len(segs) == 1 && n*es*(size-1) <= inlineBytes {
		// Small: written here, as Direct writes its small frames.
		for i := 1; i < size; i++ {
			if err := tr.Send(ctx, (rank+i)%size, o.Header, reduce.AsBytes(mine)); err != nil {
				return fmt.Errorf("send to rank %d: %w", global(tr, (rank+i)%size), err)
			}
		}
		return recvAll()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snd := startSender[T](ctx, cancel, tr, (size-1)*len(segs), o)
	for i := 1; i < size; i++ {
		for _, s := range segs {
			snd.put(sendItem[T]{(rank + i) % size, 0, mine[s.Off : s.Off+s.Len]})
		}
	}
	return snd.wait(recvAll())
}

// inlineBytes bounds what Direct writes without a sender goroutine, over
// all its peers: each peer's frame is at most inlineBytes/(size-1).
const inlineBytes = 256 << 10

// peerInlineBytes bounds one frame to one peer that an executor writes
// without a sender goroutine before it receives from that peer (an
// exchange's swap, an all-to-all's streams). The peer may be writing to
// this rank the same way, so the write must complete without the peer
// reading: a TCP peer's reader drains its socket into memory, but a
// shared-memory ring takes at most half its capacity a frame, and rings
// are 64 KiB at least (256 KiB at 64 ranks a host, where two ranks
// exchanging 256 KiB frames inline each waited for the other to read).
const peerInlineBytes = 16 << 10

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

// directFold is directReduce for buffers that travel in one frame, once
// this rank's sends are done: it reduces straight from each received
// payload (which may lie in a peer's shared memory), in rank order, and
// allocates nothing.
func directFold[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) error {
	rank, size := tr.Rank(), tr.Size()
	es := reduce.SizeOf[T]()
	// Rank 0 folds into buf; the others gather the fold in acc, since
	// rank 0's data must come first.
	var acc []T
	if rank != 0 {
		s := getScratch(len(buf) * es)
		defer putScratch(s)
		acc = reduce.FromBytes[T](*s)
	}
	for j := range size {
		src := buf
		var f transport.Frame
		if j != rank {
			var err error
			if f, err = tr.Recv(ctx, j); err != nil {
				return fmt.Errorf("recv from rank %d: %w", global(tr, j), err)
			}
			if err := check(&f, o.Header, global(tr, j), 0, len(buf)*es); err != nil {
				f.Release()
				return err
			}
			src = reduce.FromBytes[T](f.Payload)
		}
		switch {
		case rank == 0 && j == 0:
		case rank == 0:
			fold(buf, src)
		case j == 0:
			copy(acc, src)
		default:
			fold(acc, src)
		}
		f.Release()
	}
	if rank != 0 {
		copy(buf, acc)
	}
	return nil
}

// scratch recycles directFold's accumulators.
var scratch sync.Pool

func getScratch(n int) *[]byte {
	if b, ok := scratch.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func putScratch(b *[]byte) { scratch.Put(b) }
