package ps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/reduce"
)

// TestRoundPartitionBytes: the partition size follows the round's size
// and the hub count, within [max(RoundSpreadBytes/hubs,
// MinRoundPartitionBytes), limit]; a limit below the floor is the size
// itself; perHub 0 is the limit.
func TestRoundPartitionBytes(t *testing.T) {
	const Ki, Mi = 1 << 10, 1 << 20
	if MinRoundPartitionBytes != 64*Ki || RoundSpreadBytes != 512*Ki {
		t.Fatalf("the floors changed (%d, %d): this table expects 64 KiB and 512 KiB", MinRoundPartitionBytes, RoundSpreadBytes)
	}
	for _, c := range []struct{ total, hubs, limit, perHub, want int }{
		{16 * Mi, 1, 4 * Mi, 32, 512 * Ki},
		{16 * Mi, 2, 4 * Mi, 32, 256 * Ki},
		{16 * Mi, 4, 4 * Mi, 32, 128 * Ki},
		{64 * Mi, 1, 4 * Mi, 32, 2 * Mi},
		{64 * Mi, 4, 4 * Mi, 32, 512 * Ki},
		{256 * Mi, 1, 4 * Mi, 32, 4 * Mi}, // capped at the limit
		{64 * Mi, 1, 1 * Mi, 32, 1 * Mi},  // capped at the limit
		{64 * Mi, 0, 4 * Mi, 32, 2 * Mi},  // no hubs counts as one
		{16 * Mi, 1, 4 * Mi, 16, 1 * Mi},
		{1 * Mi, 1, 4 * Mi, 32, 512 * Ki}, // the floor: 512 KiB per hub
		{1 * Mi, 2, 4 * Mi, 32, 256 * Ki},
		{1 * Mi, 4, 4 * Mi, 32, 128 * Ki},
		{1 * Mi, 16, 4 * Mi, 32, 64 * Ki},    // and never below 64 KiB
		{4 * Ki, 1, 4 * Mi, 32, 512 * Ki},    // one partition
		{0, 3, 4 * Mi, 32, 512 * Ki / 3},     // empty round
		{16 * Mi, 1, 256 * Ki, 32, 256 * Ki}, // the limit is an override below the rule's size
		{16 * Mi, 4, 96, 32, 96},             // a limit below the floor is the size
		{16 * Mi, 4, 4 * Mi, 0, 4 * Mi},      // perHub 0: fixed partitions
		{16 * Mi, 1, 96, 0, 96},
	} {
		if got := RoundPartitionBytes(c.total, c.hubs, c.limit, c.perHub); got != c.want {
			t.Errorf("RoundPartitionBytes(%d, %d, %d, %d) = %d, want %d", c.total, c.hubs, c.limit, c.perHub, got, c.want)
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
		parts := RoundPartitions(kind, count, size, limit, perHub, workers, hubs)
		total := count * size
		if kind == kindGather {
			total *= workers
		}
		want := max(1, RoundPartitionBytes(total, hubs, limit, perHub)/size)
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
// the rule (several partitions per hub, the floor, the limit, fixed), are
// exact against a naive sum, on every worker; a gather returns every
// worker's buffer in rank order.
func TestCollectiveExactRandomSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 25))
	counts := []int{0, 1, 7, 1031, 16<<10 + 3, 70001, 200003}
	if testing.Short() {
		counts = counts[:5]
	}
	for trial := range 6 {
		n, k := 1+rng.IntN(4), 1+rng.IntN(3)
		limit := []int{4 << 20, 256 << 10, 96}[trial%3]
		_, addrs := startHubs(t, k, n, false)
		cs := make([]*Client, n)
		perHub := []int{16, 3, 0}[rng.IntN(3)]
		for w := range n {
			cfg := clientConfig(w, n, addrs, limit)
			cfg.RoundPartitionsPerHub = perHub
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
			name := fmt.Sprintf("n=%d k=%d limit=%d perHub=%d count=%d", n, k, limit, perHub, count)
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
