package ring

import (
	"context"

	"github.com/gorun/gorun/reduce"
)

// Broadcast copies root's buf into every rank's buf. Large buffers go down
// a pipelined chain root -> root+1 -> ...; small ones (direct true) go from
// the root to every rank at once.
func Broadcast[T Elem](ctx context.Context, tr Transport, buf []T, root int, direct bool, o Options) (err error) {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	seg := max(1, o.SegmentBytes/reduce.SizeOf[T]())
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
				snd.put(sendItem[T]{(root + i) % size, 0, buf[s.Off : s.Off+s.Len]})
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
			snd.put(sendItem[T]{next, 0, buf[s.Off : s.Off+s.Len]})
		}
	}
	return nil
}
