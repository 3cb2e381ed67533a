package ps

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/reduce"
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
}

// RoundPartitions is how a collective round of count elements of size
// bytes is cut and placed on hubs hubs: partitions of at most
// partitionBytes (for a gather, of the gathered result), each on the
// least-loaded hub. Every worker computes the same.
func RoundPartitions(kind uint8, count, size, partitionBytes, workers, hubs int) []Partition {
	partElems := max(1, partitionBytes/max(size, 1))
	if kind == kindGather {
		partElems = max(1, partElems/max(workers, 1))
	}
	p, err := NewPlacement(max(hubs, 1), partElems)
	if err != nil {
		return nil
	}
	return p.Add("", count)
}

// Collective runs one collective round through the hubs: the buffer is
// cut into partitions placed on the hubs, every partition is sent, and
// the results are copied into Recv as they come back.
func (c *Client) Collective(ctx context.Context, r Collective) error {
	size := reduce.Size(r.DType)
	if size == 0 {
		return fmt.Errorf("%w: unknown element type %d", ErrBadRequest, r.DType)
	}
	parts := RoundPartitions(r.Kind, r.Count, size, c.cfg.PartitionBytes, c.cfg.Workers, len(c.hubs))
	h := c.newHandle(kindOther, len(parts))
	isRoot := r.Kind == kindBroadcast && r.Root == c.cfg.Worker
	for i, p := range parts {
		m := &message{Type: msgRound, Kind: r.Kind, Code: uint8(r.Op), DType: r.DType, Clock: r.Seq, Part: uint32(i),
			Root: uint32(r.Root), Count: uint64(r.Count), Off: uint64(p.Off), N: uint64(p.Len)}
		if r.Kind != kindBroadcast || isRoot {
			m.Data = r.Send[p.Off*size : (p.Off+p.Len)*size]
			c.iter.addBytes(int64(len(m.Data)), 0)
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
		want := max(0, hi-lo) * size
		if r.Kind == kindGather {
			want = c.cfg.Workers * p.Len * size
		}
		on := func(rep *message) {
			c.iter.addBytes(0, int64(len(rep.Data)))
			if r.Kind != kindGather {
				copy(r.Recv[lo*size:], rep.Data)
				return
			}
			for w := range c.cfg.Workers {
				copy(r.Recv[(w*r.Count+p.Off)*size:(w*r.Count+p.Off+p.Len)*size], rep.Data[w*p.Len*size:])
			}
		}
		c.send(p.Hub, m, h, on, want)
	}
	return h.Wait(ctx)
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
