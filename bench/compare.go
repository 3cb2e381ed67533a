package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ps"
)

// Pair is one size measured through the ring and through ParamHub on the
// same job, with the hub traffic the cost model predicts.
type Pair struct {
	Bytes     int
	Ring, Hub Row
	// Loads is the model's bytes of the buffer on each hub.
	Loads []int64
	// HubBytes is the payload bytes (in plus out) through each hub per
	// all-reduce, summed over ranks.
	HubBytes []int64
}

// Busiest is the largest per-hub traffic of p.
func (p Pair) Busiest() int64 { return slices.Max(append([]int64{0}, p.HubBytes...)) }

// Lmax is the model's bytes of the buffer on the busiest hub.
func (p Pair) Lmax() int64 { return slices.Max(append([]int64{0}, p.Loads...)) }

// HubLoads is how many bytes of an s-byte float32 buffer each of k hubs
// handles when it is cut into partitions of at most part bytes, cut and
// placed as ParamHub's default client config does.
func HubLoads(s, part, k int) []int64 {
	loads := make([]int64, k)
	for _, p := range ps.RoundPartitions(ps.RoundReduce, s/4, 4, part, ps.DefaultClientConfig().RoundPartitionsPerHub, 1, k) {
		loads[p.Hub] += int64(4 * p.Len)
	}
	return loads
}

// ModelRatio is the time of a hub all-reduce over a ring all-reduce that
// a bandwidth-bound cost model predicts for n ranks, one per host, with
// hub h beside rank h and lmax the bytes of the s-byte buffer on the
// busiest hub: that host's link carries its rank's traffic to the other
// hubs, s-lmax, plus its hub's to the other ranks, (n-1)·lmax, against the
// ring's 2(n-1)/n·s. With lmax = s/k it is n(n+k-2)/(2k(n-1)): n/2 for
// one hub and 1 for k = n.
func ModelRatio(n int, s, lmax int64) float64 {
	if n < 2 || s <= 0 {
		return 1
	}
	return float64(s+int64(n-2)*lmax) * float64(n) / (2 * float64(n-1) * float64(s))
}

// ModelHubBytes is the payload in and out of the busiest hub per
// all-reduce on n ranks: n·lmax each way.
func ModelHubBytes(n int, lmax int64) int64 { return 2 * int64(n) * lmax }

// Compare times float32 Sum all-reduces of each size through the ring
// and then through the hubs, on a Comm that joined with the hub strategy,
// and counts the bytes through each hub. Every rank calls it with the same
// arguments and gets the same pairs. It leaves the Comm on the ring.
// part is the Comm's HubPartitionBytes, for the model.
func Compare(ctx context.Context, c *collective.Comm, sizes []int, target time.Duration, part int) ([]Pair, error) {
	if err := c.SetStrategy(collective.StrategyHub); err != nil {
		return nil, err
	}
	defer c.SetStrategy(collective.StrategyRing)
	var out []Pair
	for _, bytes := range sizes {
		p := Pair{Bytes: bytes}
		for _, s := range []string{collective.StrategyRing, collective.StrategyHub} {
			if err := c.SetStrategy(s); err != nil {
				return nil, err
			}
			rows, err := Sweep(ctx, c, []int{bytes}, target)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", s, FormatSize(bytes), err)
			}
			if s == collective.StrategyRing {
				p.Ring = rows[0]
			} else {
				p.Hub = rows[0]
			}
		}
		var err error
		if p.HubBytes, err = hubTraffic(ctx, c, bytes); err != nil {
			return nil, err
		}
		p.Loads = HubLoads(bytes, part, len(p.HubBytes))
		out = append(out, p)
	}
	return out, nil
}

// hubTraffic counts the payload bytes through each hub over a few
// all-reduces of size bytes, per all-reduce, summed over ranks.
func hubTraffic(ctx context.Context, c *collective.Comm, bytes int) ([]int64, error) {
	const reps = 3
	if err := c.SetStrategy(collective.StrategyRing); err != nil {
		return nil, err
	}
	if err := c.Barrier(ctx); err != nil {
		return nil, err
	}
	s0, r0 := c.HubBytes()
	if err := c.SetStrategy(collective.StrategyHub); err != nil {
		return nil, err
	}
	buf := make([]float32, bytes/4)
	for range reps {
		if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
			return nil, err
		}
	}
	s1, r1 := c.HubBytes()
	per := make([]int64, len(s0))
	for h := range per {
		per[h] = (s1[h] - s0[h] + r1[h] - r0[h]) / reps
	}
	if err := c.SetStrategy(collective.StrategyRing); err != nil {
		return nil, err
	}
	if err := collective.AllReduce(ctx, c, per, collective.Sum); err != nil {
		return nil, err
	}
	return per, nil
}

// WriteComparison prints pairs as a table, with the cost model beside the
// measurements, and a bar chart of the times.
func WriteComparison(w io.Writer, pairs []Pair, ranks int) error {
	if len(pairs) == 0 {
		return errors.New("bench: nothing measured")
	}
	k := len(pairs[0].HubBytes)
	var b strings.Builder
	fmt.Fprintf(&b, "# ring vs ParamHub: %d ranks, %d hub(s); float32 sum; median time per all-reduce\n", ranks, k)
	fmt.Fprintf(&b, "%10s %12s %10s %12s %10s %10s %10s %14s %14s\n", "size", "ring(us)", "ring busbw", "hub(us)", "hub busbw", "hub/ring", "model", "busiest hub B", "model 2nL")
	for _, p := range pairs {
		ratio := 0.0
		if p.Ring.Median > 0 {
			ratio = float64(p.Hub.Median) / float64(p.Ring.Median)
		}
		fmt.Fprintf(&b, "%10s %12.1f %10.3f %12.1f %10.3f %10.2f %10.2f %14d %14d\n", FormatSize(p.Bytes),
			us(p.Ring.Median), p.Ring.BusBW/1e9, us(p.Hub.Median), p.Hub.BusBW/1e9, ratio, ModelRatio(ranks, int64(p.Bytes), p.Lmax()),
			p.Busiest(), ModelHubBytes(ranks, p.Lmax()))
	}
	b.WriteString("# busbw = algbw*2(n-1)/n for both; model = (S+(n-2)L)n/(2(n-1)S), bandwidth-bound, one rank per host, hub h beside rank h,\n")
	b.WriteString("#   L = bytes on the busiest hub (S/K when the partitions spread evenly: n(n+K-2)/(2K(n-1)), n/2 for one hub)\n")
	b.WriteString("# busiest hub B = payload bytes in+out of the busiest hub per all-reduce (model: 2nL)\n\n")
	longest := time.Duration(0)
	for _, p := range pairs {
		longest = max(longest, p.Ring.Median, p.Hub.Median)
	}
	const width = 50
	bar := func(d time.Duration) string {
		n := 0
		if longest > 0 {
			n = int(float64(width) * float64(d) / float64(longest))
		}
		return strings.Repeat("#", max(n, 1))
	}
	b.WriteString("# time per all-reduce (longest bar = " + longest.Round(time.Microsecond).String() + ")\n")
	for _, p := range pairs {
		fmt.Fprintf(&b, "%10s ring |%s\n%10s hub  |%s\n", FormatSize(p.Bytes), bar(p.Ring.Median), "", bar(p.Hub.Median))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes pairs as CSV, one row per size.
func WriteCSV(w io.Writer, pairs []Pair, ranks int) error {
	var b strings.Builder
	b.WriteString("bytes,ranks,hubs,ring_us,ring_busbw,hub_us,hub_busbw,hub_over_ring,model_ratio,busiest_hub_bytes,model_hub_bytes\n")
	for _, p := range pairs {
		k := len(p.HubBytes)
		fmt.Fprintf(&b, "%d,%d,%d,%.1f,%.4g,%.1f,%.4g,%.3f,%.3f,%d,%d\n", p.Bytes, ranks, k, us(p.Ring.Median), p.Ring.BusBW,
			us(p.Hub.Median), p.Hub.BusBW, float64(p.Hub.Median)/float64(max(p.Ring.Median, 1)), ModelRatio(ranks, int64(p.Bytes), p.Lmax()), p.Busiest(), ModelHubBytes(ranks, p.Lmax()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
