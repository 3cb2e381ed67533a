package ring

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// Transport is what the executors need; *tcp.Mesh and
// *mem.Transport provide it.
type Transport interface {
	Rank() int
	Size() int
	Send(ctx context.Context, to int, h transport.Header, payload []byte) error
	Recv(ctx context.Context, from int) (transport.Frame, error)
}

// Elem is an element type the executors move.
type Elem = reduce.Number

// Options are the per-call settings of an executor.
type Options struct {
	// Header is the template of every frame: Kind, DType, Op, Seq and Count
	// identify the collective, and receivers check them.
	Header transport.Header
	// SegmentBytes is the pipelining unit: the most payload bytes a frame
	// carries.
	SegmentBytes int
	// Wire is the format float32 elements take between ranks in Run and
	// the executors built on it (AllReduce, ReduceScatter, AllGather and
	// the Hierarchical ones; the others always send full precision). The
	// zero value, reduce.WireFull, sends the buffer's bytes as they are.
	// A 2-byte format works on float32 buffers only: Run returns
	// ErrWireType, before it sends anything, for any other element type.
	// Sums are taken in float32 and each hop rounds the partial sum it
	// forwards, so the result is the sum rounded to the wire format once
	// per hop (see the package doc). With Header.Op reduce.Sum or
	// reduce.Avg, reduce steps add with reduce.DecodeAdd and do not call
	// fold; with any other Op they decode into a scratch slice and call
	// fold on it.
	Wire reduce.Wire
}

// ErrWireType is returned by Run when Options.Wire is a 2-byte format and
// the buffer does not hold float32: integers and float64 never travel
// lossily.
var ErrWireType = errors.New("ring: a reduced-precision wire format needs float32 elements")

// checkWire says whether T may travel in format w.
func checkWire[T Elem](w reduce.Wire) error {
	switch {
	case w == reduce.WireFull:
		return nil
	case !w.Valid():
		return fmt.Errorf("ring: unknown wire format %d", uint8(w))
	case reduce.DTypeOf[T]() != reduce.Float32:
		return fmt.Errorf("%w: wire format %v, buffer of %s", ErrWireType, w, reduce.DTypeName(reduce.DTypeOf[T]()))
	}
	return nil
}

// wireDType is the DType byte of the frames Run sends: the element type in
// the low four bits (reduce's codes all fit) and the wire format in the high
// four, zero for WireFull. A receiver compares the whole byte, so ranks
// that disagree on the wire format fail at the first frame, and check
// names the wire format rather than the element type.
func wireDType(dtype uint8, w reduce.Wire) uint8 { return dtype&0x0f | uint8(w)<<4 }

// check compares a received frame with what this rank expects.
func check(f *transport.Frame, want transport.Header, peer int, step uint32, wantLen int) error {
	h := f.Header
	switch {
	case h.Seq != want.Seq || h.Kind != want.Kind:
		return &transport.MismatchError{Peer: peer, What: "which collective comes next (kind/sequence)",
			Mine: fmt.Sprintf("kind %d #%d", want.Kind, want.Seq), Got: fmt.Sprintf("kind %d #%d", h.Kind, h.Seq)}
	case h.DType != want.DType && h.DType&0x0f == want.DType&0x0f:
		return &transport.MismatchError{Peer: peer, What: "wire format", Mine: reduce.Wire(want.DType >> 4), Got: reduce.Wire(h.DType >> 4)}
	case h.DType != want.DType:
		return &transport.MismatchError{Peer: peer, What: "element type", Mine: want.DType, Got: h.DType}
	case h.Op != want.Op:
		return &transport.MismatchError{Peer: peer, What: "op or root", Mine: want.Op, Got: h.Op}
	case h.Count != want.Count:
		return &transport.MismatchError{Peer: peer, What: "buffer length", Mine: want.Count, Got: h.Count}
	case h.Step != step || int(h.Len) != wantLen:
		return &transport.MismatchError{Peer: peer, What: "step layout", Mine: fmt.Sprintf("step %d, %d bytes", step, wantLen),
			Got: fmt.Sprintf("step %d, %d bytes", h.Step, h.Len)}
	}
	return nil
}

// Run executes steps of a ring plan over buf, whose chunks are spans. For
// reduce steps it calls fold(dst, src), which must do dst[i] = dst[i] op
// src[i]. Each received segment is forwarded as the next step's send as
// soon as it is ready. Run returns when every send has been written, so
// the caller owns buf again.
//
// With o.Wire set, a run whose first step is a copy (an all-gather) first
// rounds its own chunk, the one it sends, to the wire format in place, and
// a reduce step followed by a copy step rounds the chunk it completes
// before forwarding it: the rank that owns a reduced chunk then holds the
// same bits as the ranks that receive it.
func Run[T Elem](ctx context.Context, tr Transport, buf []T, spans []Span, steps []Step, fold func(dst, src []T), o Options) (err error) {
	if o.Wire != reduce.WireFull {
		if err := checkWire[T](o.Wire); err != nil {
			return err
		}
		if len(steps) == 0 {
			return nil
		}
		f, _ := any(fold).(func(dst, src []float32))
		return runWire(ctx, tr, any(buf).([]float32), spans, steps, f, o)
	}
	if len(steps) == 0 {
		return nil
	}
	rank, size := tr.Rank(), tr.Size()
	right, left := Right(rank, size), Left(rank, size)
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
	total := 0
	for _, st := range steps {
		total += len(segments(spans[st.Send], seg))
	}
	// The queue holds every send of the call, so enqueueing never blocks.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snd := startSender[T](ctx, cancel, tr, total, o)
	defer func() { err = snd.wait(err) }()
	for _, s := range segments(spans[steps[0].Send], seg) {
		snd.put(sendItem[T]{right, 0, buf[s.Off : s.Off+s.Len]})
	}
	es := reduce.SizeOf[T]()
	for t, st := range steps {
		for _, s := range segments(spans[st.Recv], seg) {
			f, err := recvStep(ctx, tr, left, o.Header, t, s.Len*es)
			if err != nil {
				return err
			}
			dst := buf[s.Off : s.Off+s.Len]
			if st.Reduce {
				fold(dst, reduce.FromBytes[T](f.Payload))
			} else {
				copy(reduce.AsBytes(dst), f.Payload)
			}
			f.Release()
			if t+1 < len(steps) {
				snd.put(sendItem[T]{right, uint32(t + 1), dst})
			}
		}
	}
	return nil
}

// recvStep receives step t's next frame from left and checks it against
// want and wantLen payload bytes; a frame that fails the check is
// released.
func recvStep(ctx context.Context, tr Transport, left int, want transport.Header, t, wantLen int) (transport.Frame, error) {
	f, err := tr.Recv(ctx, left)
	if err != nil {
		return f, fmt.Errorf("step %d: recv from rank %d: %w", t, global(tr, left), err)
	}
	if err := check(&f, want, global(tr, left), uint32(t), wantLen); err != nil {
		f.Release()
		return transport.Frame{}, fmt.Errorf("step %d: %w", t, err)
	}
	return f, nil
}

// AllReduce runs the whole ring plan: afterwards every rank's buf holds the
// reduction of all ranks' buffers, bit for bit the same on every rank
// (with o.Wire set, rounded to the wire format as the package doc says).
func AllReduce[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) error {
	size := tr.Size()
	return Run(ctx, tr, buf, Chunks(len(buf), size), Plan(tr.Rank(), size), fold, o)
}

// ReduceScatter runs the reduce-scatter half of the plan. Afterwards this
// rank's chunk of buf, Chunks(len(buf), size)[rank], holds the reduction of
// that chunk over all ranks; the rest of buf is scratch. With o.Wire set
// the chunk holds the float32 sum of this rank's input and the decoded
// partial sum of the others, not yet rounded to the wire format.
func ReduceScatter[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) (Span, error) {
	size := tr.Size()
	spans := Chunks(len(buf), size)
	steps := Plan(tr.Rank(), size)
	return spans[tr.Rank()], Run(ctx, tr, buf, spans, steps[:len(steps)/2], fold, o)
}

// AllGather runs the all-gather half of the plan over recv, which holds
// size blocks of equal length; this rank's own block must already be in
// place. Afterwards every block holds its rank's data. With o.Wire set,
// this rank's own block is first rounded to the wire format in place, so
// every rank ends with the same bits.
func AllGather[T Elem](ctx context.Context, tr Transport, recv []T, o Options) error {
	size := tr.Size()
	if len(recv)%size != 0 {
		return fmt.Errorf("ring: all-gather buffer of %d elements is not %d equal blocks", len(recv), size)
	}
	b := len(recv) / size
	spans := make([]Span, size)
	for i := range spans {
		spans[i] = Span{Off: i * b, Len: b}
	}
	steps := Plan(tr.Rank(), size)
	return Run(ctx, tr, recv, spans, steps[len(steps)/2:], nil, o)
}
