package ring

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/transport"
)

// sender writes frames in the background so that a rank can receive while
// its sends are under way. Wait returns the first send error.
type sender[T Elem] struct {
	queue chan sendItem[T]
	errc  chan error
}

type sendItem[T Elem] struct {
	to   int
	step uint32
	data []T
}

// startSender starts the background writer; ctx is the executor's own
// context, which cancel cancels on a send failure.
func startSender[T Elem](ctx context.Context, cancel context.CancelFunc, tr Transport, capacity int, o Options) *sender[T] {
	s := &sender[T]{queue: make(chan sendItem[T], capacity), errc: make(chan error, 1)}
	go func() {
		for it := range s.queue {
			hd := o.Header
			hd.Step = it.step
			if err := tr.Send(ctx, it.to, hd, asBytes(it.data)); err != nil {
				s.errc <- fmt.Errorf("send to rank %d: %w", it.to, err)
				cancel()
				for range s.queue {
				}
				return
			}
		}
		s.errc <- nil
	}()
	return s
}

// wait closes the queue, waits for the writer and returns the error that
// explains the failure: a send error beats the cancellation it caused.
func (s *sender[T]) wait(err error) error {
	close(s.queue)
	serr := <-s.errc
	if serr != nil && (err == nil || errors.Is(err, context.Canceled) || transport.IsCanceled(err)) {
		return serr
	}
	return err
}

// recvInto receives the segments of span from peer into dst (reduce nil:
// copy) and checks every frame.
func recvInto[T Elem](ctx context.Context, tr Transport, peer int, step uint32, dst []T, seg int, reduce func(dst, src []T), o Options) error {
	es := elemSize[T]()
	for _, s := range segments(Span{0, len(dst)}, seg) {
		f, err := tr.Recv(ctx, peer)
		if err != nil {
			return fmt.Errorf("recv from rank %d: %w", peer, err)
		}
		if err := check(&f, o.Header, peer, step, s.Len*es); err != nil {
			f.Release()
			return err
		}
		if reduce != nil {
			reduce(dst[s.Off:s.Off+s.Len], fromBytes[T](f.Payload))
		} else {
			copy(dst[s.Off:s.Off+s.Len], fromBytes[T](f.Payload))
		}
		f.Release()
	}
	return nil
}

// Direct is the latency-optimal all-reduce for small buffers: one round in
// which every rank sends its buffer to every other rank, then reduces all
// of them in rank order, so every rank gets the same bits.
func Direct[T Elem](ctx context.Context, tr Transport, buf []T, reduce func(dst, src []T), o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	seg := max(1, o.SegmentBytes/elemSize[T]())
	segs := segments(Span{0, len(buf)}, seg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(segs) == 1 && len(buf)*elemSize[T]()*(size-1) <= inlineBytes {
		// Small: the frames fit in the socket buffers, so writing them
		// here cannot block on the peers, and saves a goroutine handoff.
		for i := 1; i < size; i++ {
			h := o.Header
			if err := tr.Send(ctx, (rank+i)%size, h, asBytes(buf)); err != nil {
				return fmt.Errorf("send to rank %d: %w", (rank+i)%size, err)
			}
		}
		return directReduce(ctx, tr, buf, reduce, seg, o, nil)
	}
	snd := startSender[T](ctx, cancel, tr, (size-1)*len(segs), o)
	for i := 1; i < size; i++ {
		for _, s := range segs {
			snd.queue <- sendItem[T]{(rank + i) % size, 0, buf[s.Off : s.Off+s.Len]}
		}
	}
	return directReduce(ctx, tr, buf, reduce, seg, o, snd)
}

// inlineBytes bounds what Direct writes without a sender goroutine.
const inlineBytes = 256 << 10

// directReduce receives every peer's buffer and reduces in rank order.
// snd, if not nil, must finish before buf is overwritten.
func directReduce[T Elem](ctx context.Context, tr Transport, buf []T, reduce func(dst, src []T), seg int, o Options, snd *sender[T]) error {
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
			reduce(acc, src)
		}
	}
	// Every send of buf must be written before buf is overwritten.
	if err := wait(nil); err != nil {
		return err
	}
	copy(buf, acc)
	return nil
}

// Broadcast copies root's buf into every rank's buf. Large buffers go down
// a pipelined chain root -> root+1 -> ...; small ones (direct true) go from
// the root to every rank at once.
func Broadcast[T Elem](ctx context.Context, tr Transport, buf []T, root int, direct bool, o Options) (err error) {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	seg := max(1, o.SegmentBytes/elemSize[T]())
	segs := segments(Span{0, len(buf)}, seg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if direct {
		if rank != root {
			return recvInto(ctx, tr, root, 0, buf, seg, nil, o)
		}
		snd := startSender[T](ctx, cancel, tr, (size-1)*len(segs), o)
		for i := 1; i < size; i++ {
			for _, s := range segs {
				snd.queue <- sendItem[T]{(root + i) % size, 0, buf[s.Off : s.Off+s.Len]}
			}
		}
		return snd.wait(nil)
	}
	pos := (rank - root + size) % size
	next := (rank + 1) % size
	last := pos == size-1
	snd := startSender[T](ctx, cancel, tr, len(segs), o)
	defer func() { err = snd.wait(err) }()
	for _, s := range segs {
		if pos != 0 {
			if err := recvInto(ctx, tr, (rank-1+size)%size, 0, buf[s.Off:s.Off+s.Len], len(buf)+1, nil, o); err != nil {
				return err
			}
		}
		if !last {
			snd.queue <- sendItem[T]{next, 0, buf[s.Off : s.Off+s.Len]}
		}
	}
	return nil
}

// Barrier is a dissemination barrier: in round k every rank signals the
// rank 2^k to its right and waits for the one 2^k to its left. No rank
// leaves before every rank has entered.
func Barrier(ctx context.Context, tr Transport, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	for k, dist := uint32(0), 1; dist < size; k, dist = k+1, dist*2 {
		h := o.Header
		h.Step = k
		to, from := (rank+dist)%size, (rank-dist+size)%size
		if err := tr.Send(ctx, to, h, nil); err != nil {
			return fmt.Errorf("barrier round %d: send to rank %d: %w", k, to, err)
		}
		f, err := tr.Recv(ctx, from)
		if err != nil {
			return fmt.Errorf("barrier round %d: recv from rank %d: %w", k, from, err)
		}
		err = check(&f, o.Header, from, k, 0)
		f.Release()
		if err != nil {
			return fmt.Errorf("barrier round %d: %w", k, err)
		}
	}
	return nil
}
