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

func (c *Comm) direct(nbytes int) bool {
	return c.cfg.Algorithm == Direct || c.cfg.Algorithm == Auto && nbytes <= c.cfg.SmallBytes
}

// doubling says whether an AllReduce of nbytes runs recursive doubling:
// Auto picks it for small buffers when the size is a power of two from 4
// up, or above directMaxRanks. Measured on 4 ranks (2 cores), 4 KiB:
// 55-62 us against Direct's 66-125 us; at 3, 5 and 6 ranks its extra
// fold-in and send-back rounds made it slower than Direct.
func (c *Comm) doubling(nbytes int) bool {
	n := c.Size()
	return c.cfg.Algorithm == Doubling || c.cfg.Algorithm == Auto && nbytes <= c.cfg.SmallBytes && n >= 4 && (n&(n-1) == 0 || n > directMaxRanks)
}

// logSteps reports whether Auto runs a small all-gather or reduce-scatter
// of nbytes (the whole buffer) by recursive doubling: log2 N steps instead
// of the ring's N-1, which above directMaxRanks ranks cost more in
// latency (one wake-up per step on a busy host) than the doubling's extra
// bytes. 256 ranks gathering 24 bytes each took 255 ring steps.
func (c *Comm) logSteps(nbytes int) bool {
	return c.cfg.Algorithm == Auto && nbytes <= c.cfg.SmallBytes && c.Size() > directMaxRanks
}

// gatherByDoubling is AllGather as an all-reduce: every rank's recv is
// zero but for its own block of n elements, and the ranks OR the buffers'
// 32-bit words together by recursive doubling. OR with zeros keeps every
// bit pattern (a sum would turn -0 into +0), so the result is exact for
// every type.
func gatherByDoubling[T Number](ctx context.Context, c *Comm, recv []T, n int, o ring.Options) error {
	me := c.index() * n
	clear(recv[:me])
	clear(recv[me+n:])
	b := reduce.AsBytes(recv) // elements are 4 or 8 bytes: whole words
	words, shared := reduce.View[int32](b)
	if !shared {
		words = reduce.FromBytes[int32](b)
	}
	err := ring.Doubling(ctx, c.net, words, orWords, o)
	if !shared {
		copy(b, reduce.AsBytes(words))
	}
	return err
}

func orWords(dst, src []int32) {
	for i := range dst {
		dst[i] |= src[i]
	}
}

// directMaxRanks is the most ranks Auto lets talk to every other rank in
// one collective (Direct, a broadcast from the root to all): beyond it a
// rank's connections and messages would grow with the job, so Auto takes
// recursive doubling and a binomial tree, whose partners grow as log2 N.
const directMaxRanks = 8

func allReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op, o ring.Options) error {
	if !op.Valid() {
		return localError("unknown op %d", op)
	}
	var err error
	if c.useHub.Load() {
		b := reduce.AsBytes(buf)
		err = c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantLen: len(buf)})
	} else if c.hierarchical(bytesOf[T](len(buf))) {
		err = ring.Hierarchical(ctx, *c.topo.tiers, buf, reducer[T](op), o)
	} else if c.doubling(bytesOf[T](len(buf))) {
		err = ring.Doubling(ctx, c.net, buf, reducer[T](op), o)
	} else if c.direct(bytesOf[T](len(buf))) {
		err = ring.Direct(ctx, c.net, buf, reducer[T](op), o)
	} else if c.cfg.Algorithm == Halving || c.cfg.Algorithm == Auto && ring.HalvingWins(c.Size(), bytesOf[T](len(buf))) {
		err = ring.Halving(ctx, c.net, buf, reducer[T](op), o)
	} else {
		err = ring.AllReduce(ctx, c.net, buf, reducer[T](op), o)
	}
	if err != nil {
		return err
	}
	finish(op, buf, c.Size())
	return nil
}

// AllReduce replaces buf on every rank with the element-wise reduction of
// all ranks' bufs. Every rank ends with the same bits.
func AllReduce[T Number](ctx context.Context, c *Comm, buf []T, op Op) error {
	return c.do(ctx, kindAllReduce, func(ctx context.Context, o ring.Options) error {
		return allReduce(ctx, c, buf, op, o)
	}, header[T](op, len(buf)))
}

// Reduce leaves the reduction of all ranks' bufs in root's buf. On the
// other ranks buf is used as scratch: its contents afterwards are
// unspecified.
func Reduce[T Number](ctx context.Context, c *Comm, buf []T, op Op, root int) error {
	return c.do(ctx, kindReduce, func(ctx context.Context, o ring.Options) error {
		if _, err := c.rootIndex(root); err != nil {
			return err
		}
		if c.useHub.Load() {
			if !op.Valid() {
				return localError("unknown op %d", op)
			}
			want := 0
			if c.Rank() == root {
				want = len(buf)
			}
			b := reduce.AsBytes(buf)
			if err := c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantLen: want}); err != nil {
				return err
			}
			finish(op, buf[:want], c.Size())
			return nil
		}
		return allReduce(ctx, c, buf, op, o)
	}, header[T](op, len(buf)))
}

// Broadcast copies root's buf into buf on every other rank.
func Broadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	return c.do(ctx, kindBroadcast, func(ctx context.Context, o ring.Options) error {
		jobRoot := root
		root, err := c.rootIndex(root)
		if err != nil {
			return err
		}
		if c.useHub.Load() {
			b := reduce.AsBytes(buf)
			return c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundBroadcast, DType: dtype[T](), Root: jobRoot, Count: len(buf), Send: b, Recv: b})
		}
		direct := c.direct(bytesOf[T](len(buf)))
		if direct && c.Size() > directMaxRanks && c.cfg.Algorithm == Auto {
			return ring.TreeBroadcast(ctx, c.net, buf, root, o)
		}
		if c.topo != nil && c.topo.byHost != nil && !direct && c.cfg.Algorithm != Ring {
			// Ranks placed round-robin over hosts: chain host after host
			// (Algorithm Ring keeps the chain in rank order).
			return ring.Broadcast(ctx, c.topo.byHost, buf, c.topo.byHost.Index(root), false, o)
		}
		return ring.Broadcast(ctx, c.net, buf, root, direct, o)
	}, header[T](Op(root%256), len(buf)))
}

// AllGather concatenates every rank's send into recv, in rank order:
// recv[r*len(send):(r+1)*len(send)] is rank r's send. recv must hold
// Size()*len(send) elements, and every rank must send the same length.
func AllGather[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	return c.do(ctx, kindAllGather, func(ctx context.Context, o ring.Options) error {
		n := len(send)
		if len(recv) != n*c.Size() {
			return localError("all-gather recv holds %d elements, want %d ranks x %d", len(recv), c.Size(), n)
		}
		if c.useHub.Load() {
			return c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundGather, DType: dtype[T](), Count: n, Send: reduce.AsBytes(send), Recv: reduce.AsBytes(recv)})
		}
		copy(recv[c.index()*n:], send)
		if c.hierarchical(bytesOf[T](len(recv))) {
			return ring.HierarchicalAllGather(ctx, *c.topo.tiers, recv, o)
		}
		if c.logSteps(bytesOf[T](len(recv))) {
			return gatherByDoubling(ctx, c, recv, n, o)
		}
		return ring.AllGather(ctx, c.net, recv, o)
	}, header[T](0, len(send)))
}

// ReduceScatter reduces buf element-wise over all ranks and leaves each
// rank its own share of the result: mine is a sub-slice of buf, the
// rank's chunk of Chunk(len(buf), Size(), Rank()). The rest of buf is
// scratch afterwards.
func ReduceScatter[T Number](ctx context.Context, c *Comm, buf []T, op Op) (mine []T, err error) {
	err = c.do(ctx, kindReduceScatter, func(ctx context.Context, o ring.Options) error {
		if !op.Valid() {
			return localError("unknown op %d", op)
		}
		var s ring.Span
		var err error
		if c.useHub.Load() {
			s = ring.Chunks(len(buf), c.Size())[c.Rank()]
			b := reduce.AsBytes(buf)
			err = c.hubRound(ctx, o.Header.Seq, ps.Collective{Kind: ps.RoundReduce, Op: op, DType: dtype[T](), Count: len(buf), Send: b, Recv: b, WantOff: s.Off, WantLen: s.Len})
		} else if c.hierarchical(bytesOf[T](len(buf))) {
			s, err = ring.HierarchicalReduceScatter(ctx, *c.topo.tiers, buf, reducer[T](op), o)
		} else if c.logSteps(bytesOf[T](len(buf))) {
			// Small: the whole all-reduce in log2 N steps beats the ring's
			// N-1; every rank then keeps its chunk.
			s = ring.Chunks(len(buf), c.Size())[c.index()]
			err = ring.Doubling(ctx, c.net, buf, reducer[T](op), o)
		} else {
			s, err = ring.ReduceScatter(ctx, c.net, buf, reducer[T](op), o)
		}
		if err != nil {
			return err
		}
		mine = buf[s.Off : s.Off+s.Len]
		finish(op, mine, c.Size())
		return nil
	}, header[T](op, len(buf)))
	return mine, err
}

// Chunk returns the [off, off+len) range of n elements that rank owns
// after ReduceScatter over size ranks: lengths differ by at most one, and
// the first n%size ranks get the longer ones.
func Chunk(n, size, rank int) (off, length int) {
	s := ring.Chunks(n, size)[rank]
	return s.Off, s.Len
}
