package ps

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
)

// Round kinds of Collective.
const (
	RoundReduce    = kindReduce
	RoundGather    = kindGather
	RoundBroadcast = kindBroadcast
)

// Collective is one collective call of the hub strategy.
type Collective struct {
	Seq   uint32 // the call's number, the same on every worker
	Kind  uint8  // RoundReduce, RoundGather or RoundBroadcast
	Op    reduce.Op
	DType uint8
	Root  int // RoundBroadcast
	Count int // elements in this worker's buffer
	// Send is this worker's buffer (for RoundBroadcast, the root's; nil
	// elsewhere). Recv receives the result: for RoundReduce and
	// RoundBroadcast the elements [WantOff, WantOff+WantLen) at the same
	// offsets (Recv may be Send); for RoundGather Workers*Count elements
	// in rank order.
	Send, Recv       []byte
	WantOff, WantLen int
	// Wire, for a RoundReduce of float32 data, is the format the data
	// travels in both ways (reduce.WireFP16 or WireBF16: half the
	// bytes). The hub decodes every part and folds it in float32, then
	// encodes the result once, so every worker gets the same bits: the
	// float32 reduction of the rounded parts, rounded to the format
	// (reduce.Wire has the rounding and saturation rules). The zero
	// value, WireFull, sends the buffer as it is. Every worker must use
	// the same; a round whose parts differ fails, naming it.
	Wire reduce.Wire
}

// The floor of RoundPartitionBytes: a round's partitions are at least
// spread/hubs and at least MinRoundPartitionBytes. Below 64 KiB a hub's
// cost per partition (about 0.1 ms on the test hosts) outweighs the
// shorter pipeline fill. RoundSpreadBytes is the spread for hubs on the
// workers' host, ClientConfig.RoundSpreadBytes' default: there a frame
// costs more than the pipeline gains (over shared memory a 1 MiB round
// took 1.4× as long in 64 KiB partitions as in 512 KiB ones, over
// loopback TCP 1.6×). Over the network the finer cut wins (1 MiB through
// one hub on 1 Gbit/s: 28 ms against 44), and collective sets the spread
// to 0 for a job on more than one host (results/hub/2026-11-25-b591681.md).
const (
	MinRoundPartitionBytes = 64 << 10
	RoundSpreadBytes       = 512 << 10
)

// RoundPartitionBytes is the partition size of a collective round of
// total bytes on hubs hubs: the round is cut into about perHub
// partitions per hub, each at least max(spread/hubs,
// MinRoundPartitionBytes) and at most limit (a limit below that floor is
// the size itself). Many partitions per hub keep the pipeline full: a hub
// answers a partition only when every worker's part of it is in, so the
// round's first results wait for one partition's fan-in and its last
// results for the last one's. perHub 0 cuts every round into partitions
// of limit.
func RoundPartitionBytes(total, hubs, limit, perHub, spread int) int {
	if perHub <= 0 {
		return limit
	}
	hubs = max(hubs, 1)
	floor := max(spread/hubs, MinRoundPartitionBytes)
	return max(min(total/(perHub*hubs), limit), min(floor, limit))
}

// RoundRule is how a client cuts collective rounds: ClientConfig's
// PartitionBytes (the limit), RoundPartitionsPerHub and
// RoundSpreadBytes. Every worker must use the same.
type RoundRule struct{ Limit, PerHub, Spread int }

// RoundPartitions is how a collective round of count elements of size
// bytes is cut and placed on hubs hubs under rule: partitions of
// RoundPartitionBytes(total, hubs, rule.Limit, rule.PerHub, rule.Spread)
// bytes, where total is the round's buffer (for a gather, the gathered
// result), each on the least-loaded hub. Every worker computes the same.
func RoundPartitions(kind uint8, count, size, workers, hubs int, rule RoundRule) []Partition {
	size = max(size, 1)
	total := count * size
	if kind == kindGather {
		total *= max(workers, 1)
	}
	partElems := max(1, RoundPartitionBytes(total, hubs, rule.Limit, rule.PerHub, rule.Spread)/size)
	if kind == kindGather {
		partElems = max(1, partElems/max(workers, 1))
	}
	p, err := NewPlacement(max(hubs, 1), partElems)
	if err != nil {
		return nil
	}
	return p.Add("", count)
}

// RoundRule is this client's rule for cutting collective rounds.
func (c *Client) RoundRule() RoundRule {
	return RoundRule{Limit: c.cfg.PartitionBytes, PerHub: c.cfg.RoundPartitionsPerHub, Spread: c.cfg.RoundSpreadBytes}
}

// Collective runs one collective round through the hubs: the buffer is
// cut into partitions placed on the hubs, the partitions are sent, at
// most ClientConfig.RoundWindow of them to a hub at a time, and the
// results are copied into Recv as they come back. Once the round has
// failed, or ctx has ended, the partitions not yet sent are not sent.
func (c *Client) Collective(ctx context.Context, r Collective) error {
	size := reduce.Size(r.DType)
	if size == 0 {
		return fmt.Errorf("%w: unknown element type %d", ErrBadRequest, r.DType)
	}
	es := size // bytes an element takes on the wire
	if r.Wire != reduce.WireFull {
		switch {
		case !r.Wire.Valid():
			return fmt.Errorf("%w: unknown wire format %d", ErrBadRequest, uint8(r.Wire))
		case r.Kind != kindReduce || r.DType != reduce.DTypeOf[float32]():
			return fmt.Errorf("%w: wire format %v needs a reduction of float32 data, not round kind %d of %s", ErrBadRequest, r.Wire, r.Kind, reduce.DTypeName(r.DType))
		}
		es = r.Wire.Size()
	}
	// Partitions are cut by the bytes that travel.
	parts := RoundPartitions(r.Kind, r.Count, es, c.cfg.Workers, len(c.hubs), c.RoundRule())
	h := c.newHandle(kindOther, len(parts))
	win := newWindow(c, h, len(c.hubs), c.cfg.RoundWindow)
	isRoot := r.Kind == kindBroadcast && r.Root == c.cfg.Worker
	for i, p := range parts {
		m := &message{Type: msgRound, Kind: r.Kind, Code: uint8(r.Op), DType: r.DType, Wire: uint8(r.Wire), Clock: r.Seq, Part: uint32(i),
			Root: uint32(r.Root), Count: uint64(r.Count), Off: uint64(p.Off), N: uint64(p.Len)}
		var prep func()
		if r.Kind != kindBroadcast || isRoot {
			m.Data = r.Send[p.Off*size : (p.Off+p.Len)*size]
			if es != size {
				// Encoded when the window sends it: the round's sends
				// start at once, and only partitions on their way hold
				// an encoded copy.
				src := m.Data
				m.Data = nil
				prep = func() {
					enc := transport.GetBuf(p.Len * es)
					// Encode cannot fail: the lengths agree and r.Wire is valid.
					_ = reduce.Encode(r.Wire, enc, reduce.FromBytes[float32](src))
					m.Data, m.release = enc, func() { transport.PutBuf(enc) }
				}
			}
			c.addBytes(int64(p.Len*es), 0)
		}
		lo, hi := max(p.Off, r.WantOff), min(p.Off+p.Len, r.WantOff+r.WantLen)
		if r.Kind == kindBroadcast {
			lo, hi = p.Off, p.Off+p.Len
			if isRoot {
				hi = lo
			}
		}
		if hi > lo {
			m.WantOff, m.WantLen = uint64(lo-p.Off), uint64(hi-lo)
		}
		want := max(0, hi-lo) * es
		if r.Kind == kindGather {
			want = c.cfg.Workers * p.Len * size
		}
		on := func(rep *message) {
			c.addBytes(0, int64(len(rep.Data)))
			if es != size {
				// The reply path has checked the length and the format.
				if hi > lo {
					decodeInto(r.Wire, r.Recv[lo*size:hi*size], rep.Data)
				}
				return
			}
			if r.Kind != kindGather {
				copy(r.Recv[lo*size:], rep.Data)
				return
			}
			for w := range c.cfg.Workers {
				copy(r.Recv[(w*r.Count+p.Off)*size:(w*r.Count+p.Off+p.Len)*size], rep.Data[w*p.Len*size:])
			}
		}
		win.add(p.Hub, windowed{m: m, on: on, want: want, prep: prep})
	}
	win.start()
	return h.Wait(ctx)
}

// window sends a round's partitions to each hub reached over the network
// at most limit at a time: the next one when an answer comes back. Every
// worker then stays within limit partitions of the slowest on every hub,
// so that no worker's pushes run ahead and take the link a late
// partition needs, and the hubs complete partitions in order. A hub on
// this host, reached through shared memory, shares no network link and
// gets every partition at once: each answer that lets the next partition
// go costs wake-ups, which an oversubscribed host pays dearly. Each
// worker may decide alone: a partition completes when every worker's
// part has come, whenever each sends it.
type window struct {
	c     *Client
	h     *Handle
	limit int // 0: no limit

	mu     sync.Mutex
	queues [][]windowed // per hub, in order
}

type windowed struct {
	m    *message
	on   func(*message)
	want int
	prep func() // if not nil, fills m.Data just before m is sent
}

func newWindow(c *Client, h *Handle, hubs, limit int) *window {
	return &window{c: c, h: h, limit: limit, queues: make([][]windowed, hubs)}
}

func (w *window) add(hub int, p windowed) { w.queues[hub] = append(w.queues[hub], p) }

// limited: hub's partitions go limit at a time.
func (w *window) limited(hub int) bool { return w.limit > 0 && !w.c.hubs[hub].shm }

// start sends the first limit partitions of every hub.
func (w *window) start() {
	for hub, q := range w.queues {
		n := len(q)
		if w.limited(hub) {
			n = min(n, w.limit)
		}
		for range n {
			w.next(hub)
		}
	}
}

// next sends hub's next partition, unless the round has failed or been
// given up.
func (w *window) next(hub int) {
	w.mu.Lock()
	q := w.queues[hub]
	if len(q) == 0 || w.h.stopped() {
		w.mu.Unlock()
		return
	}
	p := q[0]
	q[0] = windowed{}
	w.queues[hub] = q[1:]
	w.mu.Unlock()
	var after func()
	if w.limited(hub) {
		after = func() { w.next(hub) }
	}
	if p.prep != nil {
		p.prep()
	}
	w.c.sendAfter(hub, p.m, w.h, p.on, p.want, after)
}

// HubBytes reports the data bytes (tensor contents, without message
// headers) this worker has sent to and received from each hub.
func (c *Client) HubBytes() (sent, recvd []int64) {
	for _, h := range c.hubs {
		sent = append(sent, h.sent.Load())
		recvd = append(recvd, h.recvd.Load())
	}
	return sent, recvd
}

// decodeInto decodes src, hi-lo elements in format w (their length checked
// by the call's want), into dst's float32 bytes, aligned or not.
func decodeInto(w reduce.Wire, dst, src []byte) {
	if f, ok := reduce.View[float32](dst); ok {
		_ = reduce.Decode(w, f, src)
		return
	}
	f := make([]float32, len(dst)/4)
	_ = reduce.Decode(w, f, src)
	copy(dst, reduce.AsBytes(f))
}
