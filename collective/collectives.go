package collective

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
)

// localError fails a collective before any data moved. It still goes
// through Comm.do, so the other ranks are told instead of left waiting.
func localError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSizeMismatch}, args...)...)
}

func header[T Number](op Op, count int) transport.Header {
	return transport.Header{DType: dtype[T](), Op: uint8(op), Count: uint64(count)}
}

func bytesOf[T Number](n int) int {
	var z T
	return n * int(unsafe.Sizeof(z))
}

// reduceAll is the all-reduce of buf by the plan's algorithm (finish not
// applied).
func reduceAll[T Number](ctx context.Context, x *call, buf []T, op Op, kind uint8, wire Wire) error {
	c := x.c
	fold := reducer[T](op)
	p := c.planFor(kind, bytesOf[T](len(buf)))
	var hubWire Wire
	if wire != WireFull {
		// The ring's executors and the hub carry the wire format (the
		// small-buffer algorithms stay at full precision: a few bytes
		// saved is not worth a rounding).
		switch p {
		case viaHub:
			if bytesOf[T](len(buf)) > c.cfg.SmallBytes {
				if dtype[T]() != reduce.Float32 {
					return fmt.Errorf("%w: wire format %v, buffer of %s", ring.ErrWireType, wire, reduce.DTypeName(dtype[T]()))
				}
				hubWire = wire
			}
		case viaRing, viaHalving:
			p = viaRing // halving carries no wire format; the ring does
			x.o.Wire = wire
		case viaHierarchical:
			x.o.Wire = wire
		}
	}
	switch p {
	case viaHub:
		b := reduce.AsBytes(buf)
		return c.hubRound(ctx, x.o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantLen: len(buf), Wire: hubWire})
	case viaHierarchical:
		t, err := x.tiers()
		if err != nil {
			return err
		}
		return ring.Hierarchical(ctx, t, buf, fold, x.o)
	case viaDoubling:
		return ring.Doubling(ctx, x.net, buf, fold, x.o)
	case viaDirect:
		return ring.Direct(ctx, x.net, buf, fold, x.o)
	case viaHalving:
		return ring.Halving(ctx, x.net, buf, fold, x.o)
	}
	return ring.AllReduce(ctx, x.net, buf, fold, x.o)
}

func allReduceFunc[T Number](buf []T, op Op) func(ctx context.Context, x *call) error {
	return allReduceWireFunc(buf, op, commWire)
}

// commWire stands for the Comm's wire format (Config.Wire) for float32
// buffers, full precision for others.
const commWire Wire = 255

// allReduceWireFunc is allReduceFunc with wire format w (or commWire).
func allReduceWireFunc[T Number](buf []T, op Op, w Wire) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		if !op.Valid() {
			return localError("unknown op %d", op)
		}
		wire := w
		if w == commWire {
			wire = WireFull
			if dtype[T]() == reduce.DTypeOf[float32]() {
				wire = x.c.cfg.Wire
			}
		}
		if !wire.Valid() {
			return localError("unknown wire format %d", wire)
		}
		if op == Avg && wire == WireFull && x.c.Size() > 1 && x.c.planFor(kindAllReduce, bytesOf[T](len(buf))) == viaRing {
			return ringAvg(ctx, x, buf)
		}
		if err := reduceAll(ctx, x, buf, op, kindAllReduce, wire); err != nil {
			return err
		}
		finish(op, buf, x.c.Size())
		return nil
	}
}

// ringAvg is an Avg all-reduce on the ring that divides in its middle:
// the reduce-scatter half sums, this rank divides its own chunk, and the
// all-gather half passes the quotients round. Each rank divides 1/N of the
// elements instead of all of them, with the same bits (each element's
// quotient is its own). With a wire format the chunks travel rounded, so
// the division stays after the all-reduce there.
func ringAvg[T Number](ctx context.Context, x *call, buf []T) error {
	s, err := ring.ReduceScatter(ctx, x.net, buf, reducer[T](Avg), x.o)
	if err != nil {
		return err
	}
	finish(Avg, buf[s.Off:s.Off+s.Len], x.c.Size())
	return ringGatherChunks(ctx, x, buf, x.o)
}

// ringGatherChunks runs the all-gather half of the ring's plan over buf's
// chunks (ring.Chunks), each rank's own in place: ring.AllGather wants
// equal blocks, and the chunks of an uneven buffer are not.
func ringGatherChunks[T ring.Elem](ctx context.Context, x *call, buf []T, o ring.Options) error {
	size := x.net.Size()
	steps := ring.Plan(x.net.Rank(), size)
	return ring.Run(ctx, x.net, buf, ring.Chunks(len(buf), size), steps[len(steps)/2:], nil, o)
}

// AllReduce replaces buf on every rank with the element-wise reduction of
// all ranks' bufs. Every rank ends with the same bits.
func AllReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op) error {
	if exactFor[T](c, op) {
		return doExact(ctx, c, newExact(c, buf, op, nil), kindAllReduce)
	}
	return c.do(ctx, kindAllReduce, allReduceFunc(buf, op), header[T](op, len(buf)))
}

// StartAllReduce starts an AllReduce and returns at once; buf belongs to
// the collective until its handle is done.
func StartAllReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op) *Handle {
	if exactFor[T](c, op) {
		return startExact(ctx, c, newExact(c, buf, op, nil), kindAllReduce, nil)
	}
	return c.async(ctx, kindAllReduce, allReduceFunc(buf, op), header[T](op, len(buf)), nil)
}

// AllReduceWire is AllReduce of a float32 buffer whose data travels in
// wire format w (WireFP16, WireBF16, or WireFull), whatever Config.Wire
// says; see Config.Wire for what that means for the result. Every rank
// passes the same w.
func AllReduceWire(ctx context.Context, c *Comm, buf []float32, op Op, w Wire) error {
	return c.do(ctx, kindAllReduce, allReduceWireFunc(buf, op, w), header[float32](op, len(buf)))
}

// StartAllReduceWire starts an AllReduceWire.
func StartAllReduceWire(ctx context.Context, c *Comm, buf []float32, op Op, w Wire) *Handle {
	return c.async(ctx, kindAllReduce, allReduceWireFunc(buf, op, w), header[float32](op, len(buf)), nil)
}

func reduceFunc[T Number](c *Comm, buf []T, op Op, root int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		if _, err := c.rootIndex(root); err != nil {
			return err
		}
		if !op.Valid() {
			return localError("unknown op %d", op)
		}
		if c.planFor(kindReduce, bytesOf[T](len(buf))) == viaHub {
			want := 0
			if c.Rank() == root {
				want = len(buf)
			}
			b := reduce.AsBytes(buf)
			if err := c.hubRound(ctx, x.o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantLen: want}); err != nil {
				return err
			}
			finish(op, buf[:want], c.Size())
			return nil
		}
		if err := reduceAll(ctx, x, buf, op, kindReduce, WireFull); err != nil {
			return err
		}
		finish(op, buf, c.Size())
		return nil
	}
}

// Reduce leaves the reduction of all ranks' bufs in root's buf. On the
// other ranks buf is used as scratch: its contents afterwards are
// unspecified.
func Reduce[T Number](ctx context.Context, c *Comm, buf []T, op Op, root int) error {
	return c.do(ctx, kindReduce, reduceFunc(c, buf, op, root), header[T](op, len(buf)))
}

// StartReduce starts a Reduce; buf belongs to it until its handle is done.
func StartReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op, root int) *Handle {
	return c.async(ctx, kindReduce, reduceFunc(c, buf, op, root), header[T](op, len(buf)), nil)
}

func broadcastFunc[T Number](c *Comm, buf []T, root int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		jobRoot := root
		root, err := c.rootIndex(root)
		if err != nil {
			return err
		}
		o := x.o
		switch c.planFor(kindBroadcast, bytesOf[T](len(buf))) {
		case viaHub:
			b := reduce.AsBytes(buf)
			return c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundBroadcast, DType: dtype[T](), Root: jobRoot, Count: len(buf), Send: b, Recv: b})
		case viaTree:
			return ring.TreeBroadcast(ctx, x.net, buf, root, o)
		case viaDirect:
			return ring.Broadcast(ctx, x.net, buf, root, true, o)
		case viaChainByHost:
			// Ranks placed round-robin over hosts: chain host after host
			// (Algorithm Ring keeps the chain in rank order).
			g, err := ring.NewGroup(x.net, c.topo.byHost)
			if err != nil {
				return err
			}
			return ring.Broadcast(ctx, g, buf, g.Index(root), false, o)
		}
		return ring.Broadcast(ctx, x.net, buf, root, false, o)
	}
}

// Broadcast copies root's buf into buf on every other rank.
func Broadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	return c.do(ctx, kindBroadcast, broadcastFunc(c, buf, root), header[T](Op(root%256), len(buf)))
}

// StartBroadcast starts a Broadcast; buf belongs to it until its handle
// is done.
func StartBroadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) *Handle {
	return c.async(ctx, kindBroadcast, broadcastFunc(c, buf, root), header[T](Op(root%256), len(buf)), nil)
}

func allGatherFunc[T Number](c *Comm, send, recv []T) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		n := len(send)
		if len(recv) != n*c.Size() {
			return localError("all-gather recv holds %d elements, want %d ranks x %d", len(recv), c.Size(), n)
		}
		switch p := c.planFor(kindAllGather, bytesOf[T](len(recv))); p {
		case viaHub:
			return c.hubRound(ctx, x.o.Header.Seq, ps.Collective{Kind: ps.RoundGather, DType: dtype[T](), Count: n, Send: reduce.AsBytes(send), Recv: reduce.AsBytes(recv)})
		case viaHierarchical:
			t, err := x.tiers()
			if err != nil {
				return err
			}
			copy(recv[c.index()*n:], send)
			return ring.HierarchicalAllGather(ctx, t, recv, x.o)
		case viaDoubling:
			copy(recv[c.index()*n:], send)
			return ring.DoublingGather(ctx, x.net, recv, n, x.o)
		case viaDirect:
			copy(recv[c.index()*n:], send)
			return ring.DirectGather(ctx, x.net, recv, n, x.o)
		}
		copy(recv[c.index()*n:], send)
		return ring.AllGather(ctx, x.net, recv, x.o)
	}
}

// AllGather concatenates every rank's send into recv, in rank order:
// recv[r*len(send):(r+1)*len(send)] is rank r's send. recv must hold
// Size()*len(send) elements, and every rank must send the same length.
func AllGather[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	return c.do(ctx, kindAllGather, allGatherFunc(c, send, recv), header[T](0, len(send)))
}

// StartAllGather starts an AllGather; send and recv belong to it until
// its handle is done.
func StartAllGather[T Number](ctx context.Context, c *Comm, send, recv []T) *Handle {
	return c.async(ctx, kindAllGather, allGatherFunc(c, send, recv), header[T](0, len(send)), nil)
}

func reduceScatterFunc[T Number](c *Comm, buf []T, op Op, mine *[]T) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		if !op.Valid() {
			return localError("unknown op %d", op)
		}
		var s ring.Span
		var err error
		fold := reducer[T](op)
		switch c.planFor(kindReduceScatter, bytesOf[T](len(buf))) {
		case viaHub:
			s = ring.Chunks(len(buf), c.Size())[c.Rank()]
			b := reduce.AsBytes(buf)
			err = c.hubRound(ctx, x.o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantOff: s.Off, WantLen: s.Len})
		case viaHierarchical:
			var t ring.Tiers
			if t, err = x.tiers(); err == nil {
				s, err = ring.HierarchicalReduceScatter(ctx, t, buf, fold, x.o)
			}
		case viaDoubling:
			// Small: the whole all-reduce in log2 N steps beats the ring's
			// N-1; every rank then keeps its chunk.
			s = ring.Chunks(len(buf), c.Size())[c.index()]
			err = ring.Doubling(ctx, x.net, buf, fold, x.o)
		default:
			s, err = ring.ReduceScatter(ctx, x.net, buf, fold, x.o)
		}
		if err != nil {
			return err
		}
		*mine = buf[s.Off : s.Off+s.Len]
		finish(op, *mine, c.Size())
		return nil
	}
}

// ReduceScatter reduces buf element-wise over all ranks and leaves each
// rank its own share of the result: mine is a sub-slice of buf, the
// rank's chunk of Chunk(len(buf), Size(), Rank()). The rest of buf is
// scratch afterwards.
func ReduceScatter[T Number](ctx context.Context, c *Comm, buf []T, op Op) (mine []T, err error) {
	if exactFor[T](c, op) {
		err = doExact(ctx, c, newExact(c, buf, op, &mine), kindReduceScatter)
		return mine, err
	}
	err = c.do(ctx, kindReduceScatter, reduceScatterFunc(c, buf, op, &mine), header[T](op, len(buf)))
	return mine, err
}

// StartReduceScatter starts a ReduceScatter; once its handle is done,
// this rank's share is buf[off:off+len] of Chunk(len(buf), Size(),
// Rank()) (the hub strategy and the ring alike), and the rest of buf is
// scratch.
func StartReduceScatter[T Number](ctx context.Context, c *Comm, buf []T, op Op) *Handle {
	var mine []T
	if exactFor[T](c, op) {
		return startExact(ctx, c, newExact(c, buf, op, &mine), kindReduceScatter, nil)
	}
	return c.async(ctx, kindReduceScatter, reduceScatterFunc(c, buf, op, &mine), header[T](op, len(buf)), nil)
}

// Chunk returns the [off, off+len) range of n elements that rank owns
// after ReduceScatter over size ranks: lengths differ by at most one, and
// the first n%size ranks get the longer ones.
func Chunk(n, size, rank int) (off, length int) {
	s := ring.Chunks(n, size)[rank]
	return s.Off, s.Len
}
