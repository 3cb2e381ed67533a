package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/jobtest"
)

func TestArithmetic(t *testing.T) {
	if got := BusBW(1e9, time.Second, 4); got != 1.5e9 {
		t.Fatalf("BusBW = %v, want 1.5e9", got)
	}
	if got := BusBW(1e9, time.Second, 2); got != 1e9 {
		t.Fatalf("BusBW n=2 = %v", got)
	}
	if got := AlgBW(1000, 0); got != 0 {
		t.Fatalf("AlgBW with no time = %v", got)
	}
	if m := Median([]time.Duration{5, 1, 3}); m != 3 {
		t.Fatalf("median %v", m)
	}
	if m := Median([]time.Duration{4, 1, 3, 2}); m != 2 {
		t.Fatalf("even median %v", m)
	}
	if m, b := Batches(time.Millisecond, 50*time.Millisecond, time.Second); m != 50 || b != 20 {
		t.Fatalf("Batches = %d, %d", m, b)
	}
	if m, b := Batches(time.Second, 50*time.Millisecond, time.Second); m != 1 || b != 5 {
		t.Fatalf("slow Batches = %d, %d", m, b)
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "4KiB": 4096, "16MiB": 16 << 20, "1G": 1 << 30, " 8K ": 8192} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-4", "3", "4QiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	for n, want := range map[int]string{4096: "4KiB", 64 << 20: "64MiB", 100: "100B", 1 << 30: "1GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestSweep runs a short sweep on in-memory ranks: every rank must get the
// same rows, with bandwidths consistent with the times.
func TestSweep(t *testing.T) {
	comms, err := collective.NewLocal(3, collective.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]Row, 3)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Sweep(context.Background(), c, []int{4096, 1 << 16}, 20*time.Millisecond)
			if err != nil {
				t.Error(err)
			}
			rows[c.Rank()] = r
		}()
	}
	wg.Wait()
	if len(rows[0]) != 2 {
		t.Fatalf("rows: %+v", rows[0])
	}
	for _, r := range rows[0] {
		if r.Median <= 0 || r.Min > r.Median || r.BusBW != BusBW(r.Bytes, r.Median, 3) {
			t.Fatalf("inconsistent row %+v", r)
		}
	}
	var b strings.Builder
	if err := WriteTable(&b, rows[0], 3); err != nil || !strings.Contains(b.String(), "64KiB") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
}

func TestCostModel(t *testing.T) {
	const s = 16 << 20
	for n := 2; n <= 16; n++ {
		if got := ModelRatio(n, s, s); math.Abs(got-float64(n)/2) > 1e-12 {
			t.Errorf("one hub, %d ranks: %v, want n/2", n, got)
		}
		if got := ModelRatio(n, s, s/int64(n)); math.Abs(got-1) > 1e-6 { // s/n rounds down
			t.Errorf("%d hubs, %d ranks: %v, want 1", n, n, got)
		}
	}
	if got := ModelHubBytes(4, 1000); got != 8000 {
		t.Errorf("ModelHubBytes = %d", got)
	}
	for _, c := range []struct {
		s, part, k int
		want       []int64
	}{
		{16 << 20, 4 << 20, 4, []int64{4 << 20, 4 << 20, 4 << 20, 4 << 20}}, // 128 partitions of 128 KiB
		{4 << 20, 4 << 20, 2, []int64{2 << 20, 2 << 20}},                    // 16 of the 256 KiB floor
		{5 << 20, 4 << 20, 2, []int64{5 << 19, 5 << 19}},                    // 20 of 256 KiB
		{64 << 20, 4 << 20, 2, []int64{32 << 20, 32 << 20}},                 // 64 of 1 MiB
		{256 << 10, 4 << 20, 2, []int64{256 << 10, 0}},                      // one partition
		{64 << 20, 1 << 20, 1, []int64{64 << 20}},                           // partitions capped at 1 MiB
		{3 << 20, 1 << 20, 2, []int64{3 << 19, 3 << 19}},                    // 12 of 256 KiB
		{16 << 20, 128 << 10, 2, []int64{8 << 20, 8 << 20}},                 // 128 of 128 KiB (the limit)
		{0, 4 << 20, 3, []int64{0, 0, 0}},
	} {
		if got := HubLoads(c.s, c.part, c.k); !slices.Equal(got, c.want) {
			t.Errorf("HubLoads(%d, %d, %d) = %v, want %v", c.s, c.part, c.k, got, c.want)
		}
	}
	pairs := []Pair{{Bytes: 4096, Ring: Row{Median: time.Millisecond}, Hub: Row{Median: 3 * time.Millisecond}, HubBytes: []int64{10, 30}, Loads: []int64{4096, 0}}}
	var b strings.Builder
	if err := WriteComparison(&b, pairs, 4); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "3.00       2.00") || !strings.Contains(b.String(), "      4KiB ring |"+strings.Repeat("#", 16)+"\n") || !strings.Contains(b.String(), " 30 ") {
		t.Fatalf("comparison:\n%s", b.String())
	}
	if err := WriteComparison(&b, nil, 4); err == nil {
		t.Fatal("empty comparison accepted")
	}
}

// TestPredictedHubTraffic runs Compare on a real job (3 ranks over TCP and
// gossip on loopback, 2 colocated hubs) and checks that the bytes the
// cost model predicts through each hub, from the placement ParamHub uses,
// are the bytes the clients measured: 2·n·L for a hub holding L bytes.
func TestPredictedHubTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("a TCP job")
	}
	const n, hubs, part = 3, 2, 4096
	ports := jobtest.LoopbackAddrs(t, n)
	sizes := []int{4, 4 * 1031, 64 << 10}
	out := make([][]Pair, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := collective.DefaultConfig()
			cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret = r, n, "benchjob", []byte("bench-test-secret-0123456789")
			cfg.Seeds, cfg.AdvertiseAddr, cfg.DataListen = ports, "127.0.0.1", "127.0.0.1:0"
			_, p, _ := net.SplitHostPort(ports[r])
			cfg.GossipPort, _ = strconv.Atoi(p)
			cfg.Strategy, cfg.ColocatedHubs, cfg.HubPartitionBytes = collective.StrategyHub, hubs, part
			cfg.JoinTimeout = 20 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := collective.New(ctx, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			out[r], errs[r] = Compare(ctx, c, sizes, 5*time.Millisecond, part)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, p := range out[0] {
		if len(p.HubBytes) != hubs || len(p.Loads) != hubs {
			t.Fatalf("%d bytes: %d hubs measured, %d modelled", p.Bytes, len(p.HubBytes), len(p.Loads))
		}
		for h := range hubs {
			if want := ModelHubBytes(n, p.Loads[h]); p.HubBytes[h] != want {
				t.Errorf("%d bytes, hub %d: measured %d bytes, model predicts %d (loads %v)", p.Bytes, h, p.HubBytes[h], want, p.Loads)
			}
		}
		if p.Busiest() != ModelHubBytes(n, p.Lmax()) {
			t.Errorf("%d bytes: busiest hub %d, model %d", p.Bytes, p.Busiest(), ModelHubBytes(n, p.Lmax()))
		}
	}
}

// TestOps: the sweep's collectives do what their names say on 3 in-memory
// ranks, with a length that does not split evenly.
func TestOps(t *testing.T) {
	const n, size = 13, 3
	comms, err := collective.NewLocal(size, collective.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	val := func(r, i int) float32 { return float32(100*r + i) }
	run := func(op Op, check func(r int, buf []float32) error) {
		t.Helper()
		errs := make([]error, size)
		var wg sync.WaitGroup
		for _, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]float32, n)
				for i := range buf {
					buf[i] = val(c.Rank(), i)
				}
				if errs[c.Rank()] = op(context.Background(), c, buf); errs[c.Rank()] == nil {
					errs[c.Rank()] = check(c.Rank(), buf)
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	sum := func(i int) float32 { return val(0, i) + val(1, i) + val(2, i) }
	run(AllReduceSum, func(r int, buf []float32) error {
		for i, x := range buf {
			if x != sum(i) {
				return fmt.Errorf("all-reduce [%d] = %v, want %v", i, x, sum(i))
			}
		}
		return nil
	})
	run(BroadcastFrom0, func(r int, buf []float32) error {
		for i, x := range buf {
			if x != val(0, i) {
				return fmt.Errorf("broadcast [%d] = %v, want %v", i, x, val(0, i))
			}
		}
		return nil
	})
	run(ReduceScatterSum, func(r int, buf []float32) error {
		off, l := collective.Chunk(n, size, r)
		for i := off; i < off+l; i++ {
			if buf[i] != sum(i) {
				return fmt.Errorf("reduce-scatter [%d] = %v, want %v", i, buf[i], sum(i))
			}
		}
		return nil
	})
	run(AllGatherInto, func(r int, buf []float32) error {
		b := n / size
		for q := range size {
			for i := q * b; i < (q+1)*b; i++ {
				if buf[i] != val(q, i) {
					return fmt.Errorf("all-gather [%d] = %v, want rank %d's %v", i, buf[i], q, val(q, i))
				}
			}
		}
		return nil
	})
}
