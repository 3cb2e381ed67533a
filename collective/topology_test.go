package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestHostsOf(t *testing.T) {
	got := hostsOf([]int64{0, 0, 2, 2, 0, 5})
	want := [][]int{{0, 1, 4}, {2, 3}, {5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hostsOf = %v, want %v", got, want)
	}
	for _, c := range []struct {
		hosts [][]int
		want  bool
	}{
		{[][]int{{0, 1}, {2, 3}}, true},
		{[][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}, true},
		{[][]int{{0, 1, 2, 3}}, false},   // one host
		{[][]int{{0}, {1}, {2}}, false},  // one rank per host
		{[][]int{{0, 1, 2}, {3}}, false}, // uneven
		{[][]int{{0, 2}, {1, 3}}, true},  // round-robin placement
		{[][]int{{0, 1}, {2, 3}, {4}}, false},
	} {
		if got := nodeAware(c.hosts); got != c.want {
			t.Errorf("nodeAware(%v) = %v", c.hosts, got)
		}
	}
}

// hostComms joins ranks over TCP on loopback, each on the "host" named by
// hostOf[rank]: ranks with the same name share memory, the others talk TCP.
func hostComms(t *testing.T, hostOf []string, algo Algorithm) []*Comm {
	t.Helper()
	cfgs := tcpConfigs(t, len(hostOf), "a-secret-of-the-right-length")
	for r := range cfgs {
		cfgs[r].HostKey, cfgs[r].Algorithm = hostOf[r], algo
		cfgs[r].SmallBytes, cfgs[r].SegmentBytes = 256, 64
	}
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(comms) })
	return comms
}

// TestNodeAware: with ranks spread over simulated hosts, the node-aware
// all-reduce, reduce-scatter and all-gather (forced, and chosen by Auto
// above SmallBytes) match the naive reference for every op, dtype and
// length, every rank gets the same bits, and an uneven layout falls back
// to the flat ring.
func TestNodeAware(t *testing.T) {
	for _, layout := range [][]string{
		{"a", "a", "b", "b"},
		{"a", "b", "a", "b"},
		{"a", "a", "a", "b", "b", "b"},
		{"a", "a", "b", "b", "c", "c"},
		{"a", "a", "a", "b"}, // uneven: flat ring
	} {
		for _, algo := range []Algorithm{Hierarchical, Auto} {
			t.Run(fmt.Sprintf("%v/algo%d", layout, algo), func(t *testing.T) {
				comms := hostComms(t, layout, algo)
				hosts := comms[0].Hosts()
				for _, c := range comms {
					if fmt.Sprint(c.Hosts()) != fmt.Sprint(hosts) {
						t.Fatalf("ranks disagree on the hosts: %v vs %v", c.Hosts(), hosts)
					}
					var want []int
					for r, h := range layout {
						if h == layout[c.Rank()] && r != c.Rank() {
							want = append(want, r)
						}
					}
					if got := c.tr.LocalPeers(); !slices.Equal(got, want) {
						t.Fatalf("rank %d finds %v on its host, want %v", c.Rank(), got, want)
					}
				}
				if even := nodeAware(hosts); even != (comms[0].topo.nodeAware) || even == slices.Equal(layout, []string{"a", "a", "a", "b"}) {
					t.Fatalf("hosts %v: node-aware groups %v", hosts, comms[0].topo.nodeAware)
				}
				nodeAwareSuite[float32](t, comms)
				nodeAwareSuite[int64](t, comms)
				if algo == Hierarchical {
					// Auto runs the same code above SmallBytes; the other
					// two types once are enough.
					nodeAwareSuite[float64](t, comms)
					nodeAwareSuite[int32](t, comms)
					nodeAwareSuite[uint8](t, comms)
				}
			})
		}
	}
}

func nodeAwareSuite[T Number](t *testing.T, comms []*Comm) {
	t.Helper()
	size := len(comms)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for li, n := range lengths {
		for oi, op := range ops {
			in := inputs[T](uint64(size*1000+li*10+oi), size, n, op)
			want := reference(in, op)
			got := make([][]T, size)
			err := runAll(comms, func(c *Comm) error {
				got[c.Rank()] = append([]T(nil), in[c.Rank()]...)
				return AllReduce(ctx, c, got[c.Rank()], op)
			})
			if err != nil {
				t.Fatalf("n %d %v: %v", n, op, err)
			}
			checkAllReduced(t, fmt.Sprintf("n %d %v", n, op), got, want)

			// ReduceScatter: each rank's chunk of the reference.
			err = runAll(comms, func(c *Comm) error {
				buf := append([]T(nil), in[c.Rank()]...)
				mine, err := ReduceScatter(ctx, c, buf, op)
				if err != nil {
					return err
				}
				off, l := Chunk(n, size, c.Rank())
				if len(mine) != l {
					return fmt.Errorf("rank %d: reduce-scatter gave %d elements, want %d", c.Rank(), len(mine), l)
				}
				for i := range mine {
					if !near(mine[i], want[off+i], size) {
						return fmt.Errorf("rank %d: reduce-scatter [%d] = %v, want %v", c.Rank(), off+i, mine[i], want[off+i])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("n %d %v: %v", n, op, err)
			}
		}
		// AllGather: every rank's block, in rank order, exactly.
		in := inputs[T](uint64(size*1000+li), size, n, Sum)
		err := runAll(comms, func(c *Comm) error {
			recv := make([]T, n*size)
			if err := AllGather(ctx, c, in[c.Rank()], recv); err != nil {
				return err
			}
			for q := range size {
				if !slices.Equal(recv[q*n:(q+1)*n], in[q]) {
					return fmt.Errorf("rank %d: all-gather block %d differs from rank %d's data", c.Rank(), q, q)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("all-gather n %d: %v", n, err)
		}
	}
}

// TestBroadcastByHost: with ranks placed round-robin over hosts, a large
// broadcast chains host after host, from every root, and every rank gets
// the root's data exactly; with block placement the rank order is kept.
func TestBroadcastByHost(t *testing.T) {
	for _, layout := range [][]string{{"a", "b", "a", "b"}, {"a", "b", "c", "a", "b", "c"}, {"a", "a", "b", "b"}} {
		t.Run(fmt.Sprint(layout), func(t *testing.T) {
			comms := hostComms(t, layout, Auto)
			for _, c := range comms {
				if byHost := c.topo.byHost != nil; byHost != !slices.IsSorted(slices.Concat(c.Hosts()...)) {
					t.Fatalf("rank %d: host-order chain %v for hosts %v", c.Rank(), byHost, c.Hosts())
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for root := range comms {
				for li, n := range lengths {
					in := inputs[int64](uint64(root*100+li), len(comms), n, Sum)
					got := make([][]int64, len(comms))
					err := runAll(comms, func(c *Comm) error {
						got[c.Rank()] = make([]int64, n)
						if c.Rank() == root {
							copy(got[root], in[root])
						}
						return Broadcast(ctx, c, got[c.Rank()], root)
					})
					if err != nil {
						t.Fatalf("root %d n %d: %v", root, n, err)
					}
					for r := range got {
						if !slices.Equal(got[r], in[root]) {
							t.Fatalf("root %d n %d: rank %d got other data", root, n, r)
						}
					}
				}
			}
		})
	}
}
