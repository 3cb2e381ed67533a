package ring

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// sender writes a call's frames so that a rank can receive while its
// sends are under way: each goes out at once if the transport can take it
// without waiting (TrySend: a shared-memory ring with room for it), and
// otherwise, with every later one, from a writer goroutine started for it.
// A call whose frames all fit hands nothing to another goroutine, which
// is what a caller on a locked OS thread (a C or Python thread) pays for
// most. put never blocks; wait returns the first send error.
type sender[T Elem] struct {
	ctx      context.Context
	cancel   context.CancelFunc
	tr       Transport
	try      transport.TrySender // nil: every frame goes from the writer
	o        Options
	pooled   bool
	capacity int
	queue    chan sendItem[T] // nil until the writer starts
	errc     chan error
}

type sendItem[T Elem] struct {
	to   int
	step uint32
	data []T
}

// startSender returns the sender of a call of at most capacity frames;
// ctx is the executor's own context, which cancel cancels on a send
// failure.
func startSender[T Elem](ctx context.Context, cancel context.CancelFunc, tr Transport, capacity int, o Options) *sender[T] {
	return newSender[T](ctx, cancel, tr, capacity, o, false)
}

// newSender is startSender; with pooled set, every item's data is a buffer
// from transport.GetBuf (an encoded segment), which the sender gives back
// once it is sent, or when it drops the item after a failure.
func newSender[T Elem](ctx context.Context, cancel context.CancelFunc, tr Transport, capacity int, o Options, pooled bool) *sender[T] {
	s := &sender[T]{ctx: ctx, cancel: cancel, tr: tr, o: o, pooled: pooled, capacity: capacity}
	s.try, _ = tr.(transport.TrySender)
	return s
}

// put sends it, or queues it for the writer (starting it), in order.
func (s *sender[T]) put(it sendItem[T]) {
	if s.queue == nil && s.try != nil {
		hd := s.o.Header
		hd.Step = it.step
		if s.try.TrySend(it.to, hd, reduce.AsBytes(it.data)) {
			s.done(it)
			return
		}
	}
	if s.queue == nil {
		s.start()
	}
	s.queue <- it
}

func (s *sender[T]) done(it sendItem[T]) {
	if s.pooled {
		transport.PutBuf(reduce.AsBytes(it.data))
	}
}

// start starts the writer; its queue holds the rest of the call's
// frames, so put never blocks.
func (s *sender[T]) start() {
	s.queue, s.errc = make(chan sendItem[T], s.capacity), make(chan error, 1)
	ctx := cpu.Unlocked(s.ctx) // the caller's thread may be locked; this goroutine's is not
	go func() {
		for it := range s.queue {
			hd := s.o.Header
			hd.Step = it.step
			err := s.tr.Send(ctx, it.to, hd, reduce.AsBytes(it.data))
			s.done(it)
			if err != nil {
				s.errc <- fmt.Errorf("send to rank %d: %w", global(s.tr, it.to), err)
				s.cancel()
				for it := range s.queue {
					s.done(it)
				}
				return
			}
		}
		s.errc <- nil
	}()
}

// wait waits for the writer, if it started, and returns the error that
// explains the failure: a send error beats the cancellation it caused.
// After a failure of the call (err) it first cancels the sends still under
// way: their peer may never read them.
func (s *sender[T]) wait(err error) error {
	if s.queue == nil {
		return err
	}
	if err != nil {
		s.cancel()
	}
	close(s.queue)
	return explains(err, <-s.errc)
}

// explains returns the error that explains a call's failure, given err,
// its receiving side's, and serr, its sends': a send's failure beats the
// cancellation of this rank's own context that it caused, and nothing
// else. A peer's abort beats it even when it carries the code of a
// cancellation (the peer's context ended: the cause of this failure),
// and a send that saw only this rank's cancellation explains nothing.
func explains(err, serr error) error {
	if serr != nil && (err == nil || ownCancel(err) && !ownCancel(serr)) {
		return serr
	}
	return err
}

// ownCancel reports whether err is this rank's own context ending, not a
// peer's abort.
func ownCancel(err error) bool {
	var re *transport.RemoteError
	return !errors.As(err, &re) && transport.IsCanceled(err)
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
