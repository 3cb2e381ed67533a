package collective

import (
	"context"
	"fmt"
	"slices"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport"
)

// The collectives of this file have no ParamHub round: under the hub
// strategy they run over the rank mesh as under ring (see plan).

// spansOf lays counts end to end; an error names a negative count.
func spansOf(what string, counts []int, size int) ([]ring.Span, int, error) {
	if len(counts) != size {
		return nil, 0, localError("%s: %d counts for %d ranks", what, len(counts), size)
	}
	spans := make([]ring.Span, size)
	off := 0
	for i, n := range counts {
		if n < 0 {
			return nil, 0, localError("%s: count %d for rank %d is negative", what, n, i)
		}
		spans[i] = ring.Span{Off: off, Len: n}
		off += n
	}
	return spans, off, nil
}

func equalSpans(n, size int) []ring.Span {
	spans := make([]ring.Span, size)
	for i := range spans {
		spans[i] = ring.Span{Off: i * n, Len: n}
	}
	return spans
}

func allToAllFunc[T Number](c *Comm, send, recv []T) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		size := c.Size()
		if len(send)%size != 0 {
			return localError("all-to-all send holds %d elements, not %d equal blocks", len(send), size)
		}
		if len(recv) != len(send) {
			return localError("all-to-all recv holds %d elements, send %d", len(recv), len(send))
		}
		n := len(send) / size
		if c.planFor(kindAllToAll, bytesOf[T](n)) == viaBruck {
			return ring.AllToAllBruck(ctx, x.net, send, recv, n, x.o)
		}
		spans := equalSpans(n, size)
		return ring.AllToAllV(ctx, x.net, send, spans, recv, spans, x.o)
	}
}

// AllToAll sends block j of send (len(send)/Size() elements each) to rank
// j, which receives it as block i of its recv, where i is this rank. send
// and recv hold Size() equal blocks, the same length on every rank, and
// must not overlap. Small blocks go by Bruck's algorithm (log2 N rounds),
// others by pairwise exchange (N-1 steps, one peer at a time).
func AllToAll[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	return c.do(ctx, kindAllToAll, allToAllFunc(c, send, recv), header[T](0, len(send)))
}

// StartAllToAll starts an AllToAll; send and recv belong to it until its
// handle is done.
func StartAllToAll[T Number](ctx context.Context, c *Comm, send, recv []T) *Handle {
	return c.async(ctx, kindAllToAll, allToAllFunc(c, send, recv), header[T](0, len(send)), nil)
}

func allToAllVFunc[T Number](c *Comm, send []T, sendCounts []int, recv []T, recvCounts []int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		size := c.Size()
		ss, stotal, err := spansOf("all-to-all send", sendCounts, size)
		if err != nil {
			return err
		}
		rs, rtotal, err := spansOf("all-to-all recv", recvCounts, size)
		if err != nil {
			return err
		}
		if stotal != len(send) || rtotal != len(recv) {
			return localError("all-to-all: send holds %d elements for counts totalling %d, recv %d for %d", len(send), stotal, len(recv), rtotal)
		}
		return ring.AllToAllV(ctx, x.net, send, ss, recv, rs, x.o)
	}
}

// AllToAllV sends sendCounts[j] elements to rank j, laid end to end in
// send in rank order, and receives recvCounts[j] from rank j, end to end
// in recv. sendCounts[j] on rank i must equal recvCounts[i] on rank j: a
// disagreement fails every rank with ErrSizeMismatch naming the two
// ranks. Use Exchange when this rank does not know what it receives.
func AllToAllV[T Number](ctx context.Context, c *Comm, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	return c.do(ctx, kindAllToAllV, allToAllVFunc(c, send, sendCounts, recv, recvCounts), header[T](0, 0))
}

// StartAllToAllV starts an AllToAllV; the buffers and counts belong to it
// until its handle is done.
func StartAllToAllV[T Number](ctx context.Context, c *Comm, send []T, sendCounts []int, recv []T, recvCounts []int) *Handle {
	return c.async(ctx, kindAllToAllV, allToAllVFunc(c, send, sendCounts, recv, recvCounts), header[T](0, 0), nil)
}

// Exchange is AllToAllV when each rank knows only what it sends (as
// Horovod's alltoall with splits): one all-to-all of the counts, then of
// the data. It returns what this rank received, end to end in rank
// order, and how many elements came from each rank.
func Exchange[T Number](ctx context.Context, c *Comm, send []T, sendCounts []int) (recv []T, recvCounts []int, err error) {
	size := c.Size()
	if len(sendCounts) != size {
		return nil, nil, fmt.Errorf("collective: rank %d: exchange: %d counts for %d ranks", c.cfg.Rank, len(sendCounts), size)
	}
	sc := make([]int64, size)
	for i, n := range sendCounts {
		sc[i] = int64(n)
	}
	rc := make([]int64, size)
	if err := AllToAll(ctx, c, sc, rc); err != nil {
		return nil, nil, err
	}
	recvCounts = make([]int, size)
	total := 0
	for i, n := range rc {
		if n < 0 || n > int64(c.cfg.MaxFrame)*1024 {
			return nil, nil, fmt.Errorf("collective: rank %d: exchange: rank %d announces %d elements: %w", c.cfg.Rank, i, n, ErrSizeMismatch)
		}
		recvCounts[i] = int(n)
		total += int(n)
	}
	recv = make([]T, total)
	if err := AllToAllV(ctx, c, send, sendCounts, recv, recvCounts); err != nil {
		return nil, nil, err
	}
	return recv, recvCounts, nil
}

func gatherFunc[T Number](c *Comm, send, recv []T, root int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		ri, err := c.rootIndex(root)
		if err != nil {
			return err
		}
		n, size := len(send), c.Size()
		if c.index() == ri && len(recv) != n*size {
			return localError("gather: root's recv holds %d elements, want %d ranks x %d", len(recv), size, n)
		}
		if c.index() != ri {
			recv = nil
		}
		return ring.Gather(ctx, x.net, send, recv, equalSpans(n, size), ri, x.o)
	}
}

// Gather concatenates every rank's send into root's recv, in rank order
// (recv[r*len(send):(r+1)*len(send)] is rank r's send), down a binomial
// tree. Every rank sends the same length; recv is read only on the root
// (Size()*len(send) elements) and may be nil elsewhere.
func Gather[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.do(ctx, kindGather, gatherFunc(c, send, recv, root), header[T](Op(root%256), len(send)))
}

// StartGather starts a Gather; send and recv belong to it until its
// handle is done.
func StartGather[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Handle {
	return c.async(ctx, kindGather, gatherFunc(c, send, recv, root), header[T](Op(root%256), len(send)), nil)
}

func scatterFunc[T Number](c *Comm, send, recv []T, root int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		ri, err := c.rootIndex(root)
		if err != nil {
			return err
		}
		n, size := len(recv), c.Size()
		if c.index() == ri && len(send) != n*size {
			return localError("scatter: root's send holds %d elements, want %d ranks x %d", len(send), size, n)
		}
		if c.index() != ri {
			send = nil
		}
		return ring.Scatter(ctx, x.net, send, equalSpans(n, size), recv, ri, x.o)
	}
}

// Scatter gives rank r block r of root's send (len(recv) elements each)
// in its recv, down a binomial tree. Every rank's recv has the same
// length; send is read only on the root and may be nil elsewhere.
func Scatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.do(ctx, kindScatter, scatterFunc(c, send, recv, root), header[T](Op(root%256), len(recv)))
}

// StartScatter starts a Scatter; send and recv belong to it until its
// handle is done.
func StartScatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int) *Handle {
	return c.async(ctx, kindScatter, scatterFunc(c, send, recv, root), header[T](Op(root%256), len(recv)), nil)
}

func allGatherVFunc[T Number](c *Comm, send, recv []T, counts []int) func(ctx context.Context, x *call) error {
	return func(ctx context.Context, x *call) error {
		spans, total, err := spansOf("all-gather", counts, c.Size())
		if err != nil {
			return err
		}
		me := spans[c.index()]
		if len(send) != me.Len || len(recv) != total {
			return localError("all-gather: send holds %d elements for a count of %d, recv %d for %d", len(send), me.Len, len(recv), total)
		}
		copy(recv[me.Off:], send)
		steps := ring.Plan(x.net.Rank(), x.net.Size())
		return ring.Run(ctx, x.net, recv, spans, steps[len(steps)/2:], nil, x.o)
	}
}

// AllGatherV is AllGather with a length per rank: rank r sends counts[r]
// elements, and recv receives them all end to end in rank order. Every
// rank passes the same counts (a disagreement fails with
// ErrSizeMismatch).
func AllGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts []int) error {
	return c.do(ctx, kindAllGatherV, allGatherVFunc(c, send, recv, counts), header[T](0, len(recv)))
}

// StartAllGatherV starts an AllGatherV; the buffers belong to it until
// its handle is done.
func StartAllGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts []int) *Handle {
	return c.async(ctx, kindAllGatherV, allGatherVFunc(c, send, recv, counts), header[T](0, len(recv)), nil)
}

// p2pPiece is the largest payload of one point-to-point frame.
const p2pPiece = 4 << 20

// jobRank is the job rank of rank i of c.
func (c *Comm) jobRank(i int) (int, error) {
	if i < 0 || i >= c.Size() {
		return 0, fmt.Errorf("collective: rank %d: rank %d out of range for size %d", c.cfg.Rank, i, c.Size())
	}
	switch {
	case c.members != nil:
		return c.members[i], nil
	case c.el != nil:
		return c.el.installed.Load().Ranks[i], nil
	}
	return i, nil
}

// Send sends buf to rank to of c with a tag (0 to 2^31-1). It returns once
// buf is handed to the transport (the caller may reuse it); it does not
// wait for the matching Recv. Messages from one rank to another with the
// same tag arrive in the order sent; different tags are independent, and
// Send and Recv never mix with c's collectives. A message of any length
// goes in frames of at most 4 MiB.
func Send[T Number](ctx context.Context, c *Comm, buf []T, to, tag int) error {
	dst, err := c.jobRank(to)
	if err != nil {
		return err
	}
	if tag < 0 || int64(tag) >= 1<<31 {
		return fmt.Errorf("collective: rank %d: send: tag %d out of range", c.cfg.Rank, tag)
	}
	if c.isClosed() {
		return fmt.Errorf("collective: rank %d: send to rank %d: %w", c.cfg.Rank, to, ErrClosed)
	}
	b := reduce.AsBytes(buf)
	h := transport.Header{Type: transport.TypeData, DType: dtype[T](), Comm: c.id | transport.ChanP2P, Seq: uint32(tag), Count: uint64(len(buf))}
	for i := 0; i == 0 || i*p2pPiece < len(b); i++ {
		h.Step = uint32(i)
		if err := c.tr.Send(ctx, dst, h, b[i*p2pPiece:min(len(b), (i+1)*p2pPiece)]); err != nil {
			return fmt.Errorf("collective: rank %d: send to rank %d, tag %d: %w", c.cfg.Rank, to, tag, err)
		}
	}
	return nil
}

// Recv receives into buf the next message that rank from of c sent with
// tag. buf must have the message's length exactly: a message of another
// length or element type fails with ErrSizeMismatch (its frames are
// consumed). Recv wakes when from is lost, c closes or ctx ends.
func Recv[T Number](ctx context.Context, c *Comm, buf []T, from, tag int) error {
	src, err := c.jobRank(from)
	if err != nil {
		return err
	}
	if tag < 0 || int64(tag) >= 1<<31 {
		return fmt.Errorf("collective: rank %d: recv: tag %d out of range", c.cfg.Rank, tag)
	}
	if c.isClosed() {
		return fmt.Errorf("collective: rank %d: recv from rank %d: %w", c.cfg.Rank, from, ErrClosed)
	}
	ctx, stop := c.withClose(ctx)
	defer stop()
	return recvPieces(ctx, c, buf, from, src, tag, nil)
}

// recvPieces receives into buf a message from rank from of c (job rank
// src) with tag, piece by piece; first, if not nil, is its first piece,
// received already.
func recvPieces[T Number](ctx context.Context, c *Comm, buf []T, from, src, tag int, first *transport.Frame) error {
	b := reduce.AsBytes(buf)
	key := transport.Key{Comm: c.id | transport.ChanP2P, Seq: uint32(tag)}
	var mismatch error
	for i, off := 0, 0; ; i++ {
		var f transport.Frame
		var err error
		if i == 0 && first != nil {
			f = *first
		} else {
			f, err = c.mux.Recv(ctx, src, key)
		}
		if err != nil {
			if c.isClosed() {
				err = ErrClosed
			}
			return fmt.Errorf("collective: rank %d: recv from rank %d, tag %d: %w", c.cfg.Rank, from, tag, err)
		}
		total := int(f.Count) * reduce.Size(f.DType)
		switch {
		case mismatch != nil:
		case f.DType != dtype[T]() || f.Count != uint64(len(buf)):
			mismatch = &transport.MismatchError{Peer: src, What: "message (type, elements)", Mine: fmt.Sprintf("%s x %d", reduce.DTypeName(dtype[T]()), len(buf)), Got: fmt.Sprintf("%s x %d", dtypeName(f.DType), f.Count)}
		case f.Step != uint32(i) || off+len(f.Payload) > len(b):
			mismatch = &transport.MismatchError{Peer: src, What: "message framing", Mine: fmt.Sprintf("piece %d at byte %d", i, off), Got: fmt.Sprintf("piece %d of %d bytes", f.Step, len(f.Payload))}
		default:
			copy(b[off:], f.Payload)
		}
		got := len(f.Payload)
		off += got
		f.Release()
		if off >= total || got == 0 {
			break
		}
	}
	if mismatch != nil {
		return fmt.Errorf("collective: rank %d: recv from rank %d, tag %d: %w", c.cfg.Rank, from, tag, mismatch)
	}
	return nil
}

// RecvAny receives into buf the next message sent to this rank with tag
// by any other rank of c, and returns the sender's rank in c. It is Recv
// with the source left open (MPI_ANY_SOURCE): when several ranks have sent,
// which message it takes is not set, and the others wait for the next
// receive; a message is never lost or split. An any-source receive and a
// Recv of the same tag from the same rank running at once match messages
// in no set order. It fails when any rank of c is lost, c closes or ctx
// ends; on a communicator of one rank it fails at once.
func RecvAny[T Number](ctx context.Context, c *Comm, buf []T, tag int) (int, error) {
	if tag < 0 || int64(tag) >= 1<<31 {
		return -1, fmt.Errorf("collective: rank %d: recv from any rank: tag %d out of range", c.cfg.Rank, tag)
	}
	if c.isClosed() {
		return -1, fmt.Errorf("collective: rank %d: recv from any rank: %w", c.cfg.Rank, ErrClosed)
	}
	me := c.index()
	srcs := make([]int, 0, c.Size())
	for i := 0; i < c.Size(); i++ {
		if i == me {
			continue
		}
		r, err := c.jobRank(i)
		if err != nil {
			return -1, err
		}
		srcs = append(srcs, r)
	}
	if len(srcs) == 0 {
		return -1, fmt.Errorf("collective: rank %d: recv from any rank, tag %d: no other rank in a communicator of %d", c.cfg.Rank, tag, c.Size())
	}
	ctx, stop := c.withClose(ctx)
	defer stop()
	key := transport.Key{Comm: c.id | transport.ChanP2P, Seq: uint32(tag)}
	src, f, err := c.mux.RecvAny(ctx, srcs, key)
	if err != nil {
		if c.isClosed() {
			err = ErrClosed
		}
		return -1, fmt.Errorf("collective: rank %d: recv from any rank, tag %d: %w", c.cfg.Rank, tag, err)
	}
	from := slices.Index(srcs, src)
	if from >= me {
		from++
	}
	return from, recvPieces(ctx, c, buf, from, src, tag, &f)
}

// withClose is ctx ended also by Close.
func (c *Comm) withClose(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
