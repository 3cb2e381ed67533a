package ps

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/shm"
	"github.com/gorun/gorun/transport/wire"
)

// TestRoundPartitionBytes: the partition size follows the round's size
// and the hub count, within [max(spread/hubs, MinRoundPartitionBytes),
// limit]; a limit below the floor is the size itself; perHub 0 is the
// limit; spread 0 (the network's) leaves MinRoundPartitionBytes.
func TestRoundPartitionBytes(t *testing.T) {
	const Ki, Mi = 1 << 10, 1 << 20
	if MinRoundPartitionBytes != 64*Ki || RoundSpreadBytes != 512*Ki {
		t.Fatalf("the floors changed (%d, %d): this table expects 64 KiB and 512 KiB", MinRoundPartitionBytes, RoundSpreadBytes)
	}
	const sp = RoundSpreadBytes
	for _, c := range []struct{ total, hubs, limit, perHub, spread, want int }{
		{16 * Mi, 1, 4 * Mi, 32, sp, 512 * Ki},
		{16 * Mi, 2, 4 * Mi, 32, sp, 256 * Ki},
		{16 * Mi, 4, 4 * Mi, 32, sp, 128 * Ki},
		{64 * Mi, 1, 4 * Mi, 32, sp, 2 * Mi},
		{64 * Mi, 4, 4 * Mi, 32, sp, 512 * Ki},
		{256 * Mi, 1, 4 * Mi, 32, sp, 4 * Mi}, // capped at the limit
		{64 * Mi, 1, 1 * Mi, 32, sp, 1 * Mi},  // capped at the limit
		{64 * Mi, 0, 4 * Mi, 32, sp, 2 * Mi},  // no hubs counts as one
		{16 * Mi, 1, 4 * Mi, 16, sp, 1 * Mi},
		{1 * Mi, 1, 4 * Mi, 32, sp, 512 * Ki}, // the floor: 512 KiB per hub
		{1 * Mi, 2, 4 * Mi, 32, sp, 256 * Ki},
		{1 * Mi, 4, 4 * Mi, 32, sp, 128 * Ki},
		{1 * Mi, 16, 4 * Mi, 32, sp, 64 * Ki},    // and never below 64 KiB
		{4 * Ki, 1, 4 * Mi, 32, sp, 512 * Ki},    // one partition
		{0, 3, 4 * Mi, 32, sp, 512 * Ki / 3},     // empty round
		{16 * Mi, 1, 256 * Ki, 32, sp, 256 * Ki}, // the limit is an override below the rule's size
		{16 * Mi, 4, 96, 32, sp, 96},             // a limit below the floor is the size
		{16 * Mi, 4, 4 * Mi, 0, sp, 4 * Mi},      // perHub 0: fixed partitions
		{16 * Mi, 1, 96, 0, sp, 96},
		{1 * Mi, 1, 4 * Mi, 32, 0, 64 * Ki}, // the network's spread: 16 partitions
		{1 * Mi, 4, 4 * Mi, 32, 0, 64 * Ki},
		{16 * Mi, 1, 4 * Mi, 32, 0, 512 * Ki}, // above the floor, the spread does not matter
		{16 * Mi, 4, 4 * Mi, 32, 0, 128 * Ki},
		{4 * Ki, 2, 4 * Mi, 32, 0, 64 * Ki},
		{1 * Mi, 1, 96, 32, 0, 96},
	} {
		if got := RoundPartitionBytes(c.total, c.hubs, c.limit, c.perHub, c.spread); got != c.want {
			t.Errorf("RoundPartitionBytes(%d, %d, %d, %d, %d) = %d, want %d", c.total, c.hubs, c.limit, c.perHub, c.spread, got, c.want)
		}
	}
}

// TestRoundPartitionsCover: a round's partitions cover its buffer in
// order, each of the rule's size (the last one shorter), spread evenly;
// a gather's partitions are of the gathered result.
func TestRoundPartitionsCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 2))
	for range 500 {
		kind := []uint8{kindReduce, kindGather, kindBroadcast}[rng.IntN(3)]
		size := []int{4, 8}[rng.IntN(2)]
		count, workers, hubs := rng.IntN(3<<20/size), 1+rng.IntN(5), 1+rng.IntN(4)
		limit, perHub := []int{96, 64 << 10, 256 << 10, 4 << 20}[rng.IntN(4)], rng.IntN(20)
		spread := []int{0, 100 << 10, RoundSpreadBytes}[rng.IntN(3)]
		parts := RoundPartitions(kind, count, size, workers, hubs, RoundRule{Limit: limit, PerHub: perHub, Spread: spread})
		total := count * size
		if kind == kindGather {
			total *= workers
		}
		want := max(1, RoundPartitionBytes(total, hubs, limit, perHub, spread)/size)
		if kind == kindGather {
			want = max(1, want/workers)
		}
		off := 0
		load := make([]int, hubs)
		for i, p := range parts {
			if p.Off != off || p.Len > want || (p.Len < want && i != len(parts)-1) {
				t.Fatalf("kind %d, %d×%dB, limit %d, %d/hub: partition %d is %+v, want %d elements", kind, count, size, limit, perHub, i, p, want)
			}
			off += p.Len
			load[p.Hub] += p.Len
		}
		if off != count {
			t.Fatalf("partitions cover %d of %d elements", off, count)
		}
		if slices.Max(load)-slices.Min(load) > want {
			t.Fatalf("loads %v differ by more than a partition of %d", load, want)
		}
	}
}

// TestCollectiveExactRandomSizes: int32 and int64 sum all-reduces of
// random lengths through 1-3 hubs, with the round's partition size from
// the rule (several partitions per hub, the floor, the limit, fixed) and
// windows of 0-4 partitions, over TCP and over shared memory, are exact
// against a naive sum, on every worker; a gather returns every worker's
// buffer in rank order.
func TestCollectiveExactRandomSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 25))
	counts := []int{0, 1, 7, 1031, 16<<10 + 3, 70001, 200003}
	if testing.Short() {
		counts = counts[:5]
	}
	for trial := range 6 {
		n, k := 1+rng.IntN(4), 1+rng.IntN(3)
		limit := []int{4 << 20, 256 << 10, 96}[trial%3]
		// Odd trials over shared memory (a small ring, so that frames
		// span records), even ones over TCP: pooled buffers, given back
		// once folded and once every answer of a round is written, must
		// never be reused while a round still needs them.
		var so shm.Options
		if trial%2 == 1 {
			so = shm.Options{Enabled: true, Dir: t.TempDir(), RingBytes: 64 << 10}
		}
		_, addrs := startHubsShm(t, k, n, false, so)
		cs := make([]*Client, n)
		perHub, window := []int{16, 3, 0}[rng.IntN(3)], rng.IntN(5)
		for w := range n {
			cfg := clientConfig(w, n, addrs, limit)
			cfg.RoundPartitionsPerHub, cfg.RoundWindow, cfg.Shm = perHub, window, so
			c, err := Dial(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			cs[w] = c
		}
		for i, count := range counts {
			seq := uint32(2 * i)
			dt, size := reduce.Int32, 4
			if i%2 == 1 {
				dt, size = reduce.Int64, 8
			}
			in := make([][]byte, n)
			want := make([]int64, count)
			for w := range n {
				in[w] = make([]byte, count*size)
				for j := range count {
					v := rng.Int64N(1<<20) - 1<<19
					want[j] += v
					if size == 4 {
						reduce.FromBytes[int32](in[w])[j] = int32(v)
					} else {
						reduce.FromBytes[int64](in[w])[j] = v
					}
				}
			}
			got := make([][]byte, n)
			gathered := make([][]byte, n)
			name := fmt.Sprintf("n=%d k=%d limit=%d perHub=%d window=%d count=%d", n, k, limit, perHub, window, count)
			if err := each(n, func(w int) error {
				got[w] = make([]byte, count*size)
				r := Collective{Seq: seq, Kind: RoundReduce, Op: reduce.Sum, DType: dt, Count: count, Send: in[w], Recv: got[w], WantLen: count}
				if err := cs[w].Collective(context.Background(), r); err != nil {
					return err
				}
				gathered[w] = make([]byte, n*count*size)
				r = Collective{Seq: seq + 1, Kind: RoundGather, DType: dt, Count: count, Send: in[w], Recv: gathered[w]}
				return cs[w].Collective(context.Background(), r)
			}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for w := range n {
				for j := range count {
					var v int64
					if size == 4 {
						v = int64(reduce.FromBytes[int32](got[w])[j])
					} else {
						v = reduce.FromBytes[int64](got[w])[j]
					}
					if v != want[j] {
						t.Fatalf("%s: worker %d element %d = %d, want %d", name, w, j, v, want[j])
					}
				}
				if !slices.Equal(gathered[w], slices.Concat(in...)) {
					t.Fatalf("%s: worker %d's gather is not every buffer in rank order", name, w)
				}
			}
		}
	}
}

// TestRoundWindow: a worker has at most RoundWindow partitions of a round
// outstanding on a hub, and sends the next one only when an answer comes
// back; once the round is given up, no more. A hand-made hub answers
// nothing at first, so with a window of 3 it must see parts 0-2 of the
// round's 10 and then, after one answer, part 3; after the caller gives
// up and the rest are answered, only the client's goodbye.
func TestRoundWindow(t *testing.T) {
	for _, window := range []int{1, 3} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type seen struct {
			parts []uint32
			err   error
		}
		result := make(chan seen, 1)
		answered := make(chan struct{}) // the caller has given up: answer the rest
		go func() {
			var s seen
			defer func() { result <- s }()
			c, err := ln.Accept()
			if err != nil {
				s.err = err
				return
			}
			defer c.Close()
			if s.err = fakeHubAccept(c); s.err != nil {
				return
			}
			r := wire.NewReader(c, 1<<20)
			answer := func(m message) {
				reply := message{Type: msgReply, ID: m.ID, DType: m.DType, Data: make([]byte, 4*m.WantLen)}
				_, _ = c.Write(wire.AppendFrame(nil, transport.Header{Type: transport.TypeData}, reply.encode()))
			}
			var pending []message
			for {
				fh, p, err := r.Next(nil)
				if err != nil {
					s.err = err
					return
				}
				if fh.Type == transport.TypeBye {
					return
				}
				if fh.Type != transport.TypeData {
					continue
				}
				m, err := decodeMessage(p)
				if err != nil {
					s.err = err
					return
				}
				s.parts = append(s.parts, m.Part)
				pending = append(pending, m)
				switch len(s.parts) {
				case window: // the window is full: answer the first one
					answer(pending[0])
					pending = pending[1:]
				case window + 1: // the one the answer let go
					result <- s
					<-answered
					for _, m := range pending {
						answer(m)
					}
					pending = nil
				}
			}
		}()
		cfg := clientConfig(0, 1, []string{ln.Addr().String()}, 64)
		cfg.RoundPartitionsPerHub, cfg.RoundWindow = 0, window
		c, err := Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10*64)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Collective(ctx, Collective{Seq: 1, Kind: RoundReduce, Op: reduce.Sum, DType: reduce.Float32, Count: 160, Send: buf, Recv: buf, WantLen: 160})
		}()
		s := <-result
		if want := seq(window + 1); s.err != nil || !slices.Equal(s.parts, want) {
			t.Fatalf("window %d: the hub saw parts %v (%v) before it answered more than one, want %v", window, s.parts, s.err, want)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("window %d: given up: %v", window, err)
		}
		close(answered)
		c.Close()
		s = <-result
		if want := seq(window + 1); s.err != nil || !slices.Equal(s.parts, want) {
			t.Fatalf("window %d: after the caller gave up the hub saw parts %v (%v), want only %v", window, s.parts, s.err, want)
		}
	}
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// TestRoundWindowNetworkOnly: the window applies to hubs reached over the
// network; a hub reached through shared memory gets every partition at
// once. A round over shared memory with a window of 1 is still exact.
func TestRoundWindowNetworkOnly(t *testing.T) {
	c := &Client{hubs: []*hubLink{{shm: true}, {shm: false}}}
	w := newWindow(c, nil, 2, 1)
	if w.limited(0) || !w.limited(1) {
		t.Fatalf("limited: shared memory hub %v, network hub %v; want false, true", w.limited(0), w.limited(1))
	}
	if newWindow(c, nil, 2, 0).limited(1) {
		t.Fatal("a window of 0 limits a hub")
	}
	if !shmSupported() {
		t.Skip("no shared memory here")
	}
	const n, count = 3, 100003
	shm := shm.Options{Enabled: true, Dir: t.TempDir(), RingBytes: 64 << 10}
	_, addrs := startHubsShm(t, 2, n, false, shm)
	cs := make([]*Client, n)
	for w := range n {
		cfg := clientConfig(w, n, addrs, 4<<20)
		cfg.Shm, cfg.RoundWindow, cfg.RoundPartitionsPerHub = shm, 1, 64
		c, err := Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if len(c.SharedMemoryHubs()) != 2 {
			t.Fatalf("worker %d reaches hubs %v through shared memory, want both", w, c.SharedMemoryHubs())
		}
		cs[w] = c
	}
	bufs := make([][]int32, n)
	if err := each(n, func(w int) error {
		bufs[w] = make([]int32, count)
		for i := range bufs[w] {
			bufs[w][i] = int32(i*(w+1) - w)
		}
		b := reduce.AsBytes(bufs[w])
		return cs[w].Collective(context.Background(), Collective{Seq: 1, Kind: RoundReduce, Op: reduce.Sum, DType: reduce.Int32, Count: count, Send: b, Recv: b, WantLen: count})
	}); err != nil {
		t.Fatal(err)
	}
	for w := range n {
		for i, v := range bufs[w] {
			if want := int32(6*i - 3); v != want {
				t.Fatalf("worker %d element %d = %d, want %d", w, i, v, want)
			}
		}
	}
}
