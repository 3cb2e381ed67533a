package ring

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// runWire is Run for a float32 buffer whose segments travel in format
// o.Wire (not WireFull): each sent segment is encoded when it is queued,
// so the bytes sent are its value at that moment, and each received one
// is decoded into buf, or added into it in float32. A copy step forwards
// the bytes it received.
func runWire(ctx context.Context, tr Transport, buf []float32, spans []Span, steps []Step, fold func(dst, src []float32), o Options) (err error) {
	w := o.Wire
	rank, size := tr.Rank(), tr.Size()
	right, left := Right(rank, size), Left(rank, size)
	es := w.Size()
	seg := max(1, o.SegmentBytes/es)
	total := 0
	reduces := false
	for _, st := range steps {
		total += len(segments(spans[st.Send], seg))
		reduces = reduces || st.Reduce
	}
	o.Header.DType = wireDType(o.Header.DType, w)
	add := reduce.Op(o.Header.Op) == reduce.Sum || reduce.Op(o.Header.Op) == reduce.Avg
	var scratch []float32
	if reduces && !add {
		if fold == nil {
			return fmt.Errorf("ring: reduce steps without a fold")
		}
		b := getScratch(seg * 4)
		defer putScratch(b)
		var ok bool
		if scratch, ok = reduce.View[float32](*b); !ok {
			scratch = make([]float32, seg)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snd := newSender[uint8](ctx, cancel, tr, total, o, true)
	defer func() { err = snd.wait(err) }()
	// queue encodes data into a pooled buffer and queues it; with keep set
	// it also sets data to what it encoded (the owner's rounding: Decode of
	// the encoded bytes is exact, and cheaper than Round).
	queue := func(step uint32, data []float32, keep bool) error {
		p := transport.GetBuf(len(data) * es)
		err := reduce.Encode(w, p, data)
		if err == nil && keep {
			err = reduce.Decode(w, data, p)
		}
		if err != nil {
			transport.PutBuf(p)
			return err
		}
		snd.put(sendItem[uint8]{right, step, p})
		return nil
	}
	// forward queues a copy of a received payload as it is: decoding then
	// encoding gives back the same bytes, and the copy is cheaper.
	forward := func(step uint32, payload []byte) {
		p := transport.GetBuf(len(payload))
		copy(p, payload)
		snd.put(sendItem[uint8]{right, step, p})
	}
	// An all-gather from the start: this rank's own chunk leaves as the
	// wire rounds it, so keep the rounded copy.
	first := spans[steps[0].Send]
	for _, s := range segments(first, seg) {
		if err := queue(0, buf[s.Off:s.Off+s.Len], !steps[0].Reduce); err != nil {
			return err
		}
	}
	for t, st := range steps {
		for _, s := range segments(spans[st.Recv], seg) {
			f, err := recvStep(ctx, tr, left, o.Header, t, s.Len*es)
			if err != nil {
				return err
			}
			dst := buf[s.Off : s.Off+s.Len]
			switch {
			case st.Reduce && add:
				err = reduce.DecodeAdd(w, dst, f.Payload)
			case st.Reduce:
				src := scratch[:s.Len]
				if err = reduce.Decode(w, src, f.Payload); err == nil {
					fold(dst, src)
				}
			default:
				if err = reduce.Decode(w, dst, f.Payload); err == nil && t+1 < len(steps) {
					forward(uint32(t+1), f.Payload)
				}
			}
			f.Release()
			if err != nil {
				return fmt.Errorf("step %d: %w", t, err)
			}
			if t+1 < len(steps) && st.Reduce {
				// A reduce step followed by a copy step completes the
				// chunk this rank owns: keep it as the others will
				// receive it.
				if err := queue(uint32(t+1), dst, !steps[t+1].Reduce); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
