package ring

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/reduce"
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
	return newSender[T](ctx, cancel, tr, capacity, o, false)
}

// newSender is startSender; with pooled set, every item's data is a buffer
// from transport.GetBuf (an encoded segment), which the writer gives back
// once Send has returned, or when it drops the item after a failure.
func newSender[T Elem](ctx context.Context, cancel context.CancelFunc, tr Transport, capacity int, o Options, pooled bool) *sender[T] {
	s := &sender[T]{queue: make(chan sendItem[T], capacity), errc: make(chan error, 1)}
	go func() {
		for it := range s.queue {
			hd := o.Header
			hd.Step = it.step
			err := tr.Send(ctx, it.to, hd, reduce.AsBytes(it.data))
			if pooled {
				transport.PutBuf(reduce.AsBytes(it.data))
			}
			if err != nil {
				s.errc <- fmt.Errorf("send to rank %d: %w", global(tr, it.to), err)
				cancel()
				for it := range s.queue {
					if pooled {
						transport.PutBuf(reduce.AsBytes(it.data))
					}
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

// recvInto receives the segments of span from peer into dst (fold nil:
// copy) and checks every frame.
func recvInto[T Elem](ctx context.Context, tr Transport, peer int, step uint32, dst []T, seg int, fold func(dst, src []T), o Options) error {
	es := reduce.SizeOf[T]()
	for _, s := range segments(Span{0, len(dst)}, seg) {
		f, err := tr.Recv(ctx, peer)
		if err != nil {
			return fmt.Errorf("recv from rank %d: %w", global(tr, peer), err)
		}
		if err := check(&f, o.Header, global(tr, peer), step, s.Len*es); err != nil {
			f.Release()
			return err
		}
		if fold != nil {
			fold(dst[s.Off:s.Off+s.Len], reduce.FromBytes[T](f.Payload))
		} else {
			copy(reduce.AsBytes(dst[s.Off:s.Off+s.Len]), f.Payload)
		}
		f.Release()
	}
	return nil
}
