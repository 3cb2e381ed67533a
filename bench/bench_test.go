package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/gorun/gorun/ps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/commtest"
	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/transport/mem"
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
	// The network's rule (no spread) cuts a 1 MiB round into 64 KiB
	// partitions where the default keeps 512 KiB per hub.
	for _, c := range []struct {
		spread, k int
		parts     []int
		largest   int64
	}{
		{0, 1, []int{16}, 64 << 10},
		{0, 2, []int{8, 8}, 64 << 10},
		{ps.RoundSpreadBytes, 1, []int{2}, 512 << 10},
		{ps.RoundSpreadBytes, 2, []int{2, 2}, 256 << 10},
	} {
		rule := DefaultRule(4 << 20)
		rule.Spread = c.spread
		loads, parts, largest := HubPlan(1<<20, c.k, rule)
		if !slices.Equal(parts, c.parts) || largest != c.largest || slices.Max(loads)*int64(c.k) != 1<<20 {
			t.Errorf("1 MiB on %d hubs, spread %d: loads %v, parts %v, largest %d; want parts %v of %d", c.k, c.spread, loads, parts, largest, c.parts, c.largest)
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
			out[r], errs[r] = Compare(ctx, c, sizes, 5*time.Millisecond)
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

// TestExtendedModel: the hub's time is the larger of the host link's and
// the hub's pipelined traffic, plus its cost per partition and the last
// fold; it is never below the bandwidth model, and the comparison prints
// it beside the measurement.
func TestExtendedModel(t *testing.T) {
	const bw = 1e9 // bytes/s: 1 byte per ns
	for _, c := range []struct {
		m          Model
		ring, want time.Duration
	}{
		// One hub: (n-1)(L+p) = 3.75e6 beats S+(n-2)L = 3e6; 4 partitions; 3·250000·0.06 ns fold.
		{Model{Ranks: 4, Bytes: 1e6, Lmax: 1e6, Part: 250e3, Parts: 4}, 1500 * time.Microsecond, 3750*time.Microsecond + 400*time.Microsecond + 45*time.Microsecond},
		// Four hubs: the host link, S+(n-2)L = 1.5e6, is the bound.
		{Model{Ranks: 4, Bytes: 1e6, Lmax: 250e3, Part: 62500, Parts: 4}, 1500 * time.Microsecond, 1500*time.Microsecond + 400*time.Microsecond + 11250*time.Nanosecond},
		{Model{Ranks: 1, Bytes: 1e6, Lmax: 1e6, Part: 1e6, Parts: 1}, 0, 0},
	} {
		if got := c.m.RingTime(bw); got != c.ring {
			t.Errorf("%+v: ring %v, want %v", c.m, got, c.ring)
		}
		if got := c.m.HubTime(bw); got != c.want {
			t.Errorf("%+v: hub %v, want %v", c.m, got, c.want)
		}
	}
	if r := (Model{Ranks: 1, Bytes: 10}).Ratio(bw); r != 1 {
		t.Errorf("one rank: ratio %v", r)
	}
	rng := rand.New(rand.NewPCG(4, 23))
	for range 1000 {
		n, k := 2+rng.IntN(15), 1+rng.IntN(8)
		s := int64(4 * (1 + rng.IntN(1<<24)))
		rule := DefaultRule(1 << (10 + rng.IntN(13)))
		rule.Spread = []int{0, rule.Spread}[rng.IntN(2)]
		loads, parts, part := HubPlan(int(s), k, rule)
		p := Pair{Bytes: int(s), Loads: loads, Parts: parts, Part: part}
		m := p.Model(n)
		if m.Lmax != p.Lmax() || m.Parts < 1 || m.Part > m.Lmax {
			t.Fatalf("model %+v of loads %v, parts %v, largest %d", m, loads, parts, part)
		}
		if got, floor := m.Ratio(bw), ModelRatio(n, s, m.Lmax); got < floor-1e-9 {
			t.Fatalf("%+v: extended ratio %v below the bandwidth model's %v", m, got, floor)
		}
	}
	pairs := []Pair{{Bytes: 16 << 20, Ring: Row{Median: 250 * time.Millisecond, Min: 200 * time.Millisecond, BusBW: BusBW(16<<20, 250*time.Millisecond, 4)},
		Hub: Row{Median: 440 * time.Millisecond}, HubBytes: []int64{8 * 16 << 20}, Loads: []int64{16 << 20}, Parts: []int{16}, Part: 1 << 20}}
	rate := pairs[0].LinkRate(4)
	if want := BusBW(16<<20, 200*time.Millisecond, 4); rate != want {
		t.Fatalf("link rate %v, want the fastest ring batch's busbw %v", rate, want)
	}
	var b strings.Builder
	if err := WriteComparison(&b, pairs, 4); err != nil {
		t.Fatal(err)
	}
	m := pairs[0].Model(4)
	if d := m.RingTime(rate) - 200*time.Millisecond; d < -time.Microsecond || d > time.Microsecond {
		t.Fatalf("model ring time %v at the fastest batch's rate, want 200ms", m.RingTime(rate))
	}
	want := fmt.Sprintf("16x1MiB %12.1f %10.2f %10.2f", us(m.HubTime(rate)), m.Ratio(rate), 440e3/us(m.HubTime(rate)))
	if !strings.Contains(b.String(), want) || !strings.Contains(b.String(), "hub/model") {
		t.Fatalf("comparison lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	if err := WriteCSV(&b, pairs, 4); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ",16,1048576,") {
		t.Fatalf("csv:\n%s", b.String())
	}
}

// TestAvgOfValues: each rank's buffer is filled once with values of its
// own, every rank ends with their average, and a second call keeps it.
func TestAvgOfValues(t *testing.T) {
	const size = 3
	for _, n := range []int{0, 1, 7, 1031} {
		outs := make([][]float32, size)
		errs := commtest.OnAll(t, mem.NewNetwork(size), func(c *collective.Comm) error {
			r, op, buf := c.Rank(), AvgOfValues(), make([]float32, n)
			if err := op(context.Background(), c, buf); err != nil {
				return err
			}
			outs[r] = slices.Clone(buf)
			if err := op(context.Background(), c, buf); err != nil {
				return err
			}
			for i := range buf {
				if d := math.Abs(float64(buf[i] - outs[r][i])); d > 1e-6*math.Abs(float64(outs[r][i])) {
					return fmt.Errorf("[%d]: a second call moved %g to %g", i, outs[r][i], buf[i])
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("n %d: %v", n, err)
		}
		fills := make([][]float32, size)
		for r := range fills {
			fills[r] = make([]float32, n)
			fillValues(fills[r], r)
		}
		for i := range n {
			var want float64
			for r := range size {
				want += float64(fills[r][i]) / size
			}
			for r := range size {
				if got := float64(outs[r][i]); math.Abs(got-want) > 1e-6*math.Abs(want) {
					t.Fatalf("n %d rank %d [%d] = %g, want the average %g", n, r, i, got, want)
				}
			}
		}
		if n > 1 && slices.Equal(fills[0], fills[1]) {
			t.Fatalf("n %d: ranks 0 and 1 filled the same values", n)
		}
	}
}
