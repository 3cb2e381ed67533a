// Command scalesim runs jobs of many ranks in one process over the
// in-memory transport, past what one machine can start as processes, and
// reports how each rank's costs grow with N: the peers it exchanges
// frames with (the connections it would hold over TCP) and the frames it
// sends per collective. Every result is checked exactly.
//
//	go run ./bench/scalesim [-n 256,1024,4096] [-ring-max 1024]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/transport/mem"
)

func main() {
	ns := flag.String("n", "256,1024,4096", "job sizes")
	ringMax := flag.Int("ring-max", 1024, "largest N that also runs the 64 KiB all-reduce (ring: 2(N-1) frames per rank; halving on a power of two: 2 log2 N)")
	flag.Parse()
	fmt.Printf("%6s  %-24s %8s %10s %10s %8s\n", "N", "collective", "algo", "frames/rk", "max/rk", "time")
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			fmt.Fprintln(os.Stderr, "scalesim: bad -n", f)
			os.Exit(2)
		}
		if err := run(n, n <= *ringMax); err != nil {
			fmt.Fprintln(os.Stderr, "scalesim:", err)
			os.Exit(1)
		}
	}
}

type step struct {
	name, algo string
	do         func(ctx context.Context, c *collective.Comm) error
}

func run(n int, large bool) error {
	nw := mem.NewNetwork(n)
	comms, err := collective.NewLocalOn(nw, collective.DefaultConfig())
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	steps := []step{
		{"all-reduce 8 B", "doubling", allReduce(n, 1)},
		{"all-reduce 32 KiB", "doubling", allReduce(n, 4096)},
		{"broadcast 8 KiB", "tree", broadcast(n, 1024)},
		{"barrier", "dissem.", func(ctx context.Context, c *collective.Comm) error { return c.Barrier(ctx) }},
	}
	if large {
		algo := "ring"
		if ring.HalvingWins(n, 64<<10) {
			algo = "halving"
		}
		steps = append(steps, step{"all-reduce 64 KiB", algo, allReduce(n, 8192)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, s := range steps {
		before := make([]int64, n)
		for r := range n {
			before[r] = nw.Frames(r)
		}
		start := time.Now()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = s.do(ctx, c) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%d ranks, %s: %w", n, s.name, err)
		}
		took := time.Since(start)
		var total, most int64
		for r := range n {
			d := nw.Frames(r) - before[r]
			total += d
			most = max(most, d)
		}
		fmt.Printf("%6d  %-24s %8s %10.1f %10d %8s\n", n, s.name, s.algo, float64(total)/float64(n), most, took.Round(time.Millisecond))
	}
	var links, mostLinks int
	for r := range n {
		l := nw.Links(r)
		links += l
		mostLinks = max(mostLinks, l)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%6d  %-24s %8s %10.1f %10d   (heap %d MiB)\n", n, "peers talked to", "", float64(links)/float64(n), mostLinks, ms.HeapInuse>>20)
	return nil
}

// allReduce sums count int64 per rank and checks the exact result.
func allReduce(n, count int) func(context.Context, *collective.Comm) error {
	return func(ctx context.Context, c *collective.Comm) error {
		buf := make([]int64, count)
		for i := range buf {
			buf[i] = int64(c.Rank()+1) * int64(i+1)
		}
		if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
			return err
		}
		tri := int64(n) * int64(n+1) / 2
		for i, v := range buf {
			if v != tri*int64(i+1) {
				return fmt.Errorf("rank %d: element %d is %d, want %d", c.Rank(), i, v, tri*int64(i+1))
			}
		}
		return nil
	}
}

// broadcast sends count int64 from the last rank and checks them.
func broadcast(n, count int) func(context.Context, *collective.Comm) error {
	return func(ctx context.Context, c *collective.Comm) error {
		buf := make([]int64, count)
		root := n - 1
		if c.Rank() == root {
			for i := range buf {
				buf[i] = int64(i) * 7
			}
		}
		if err := collective.Broadcast(ctx, c, buf, root); err != nil {
			return err
		}
		for i, v := range buf {
			if v != int64(i)*7 {
				return fmt.Errorf("rank %d: element %d is %d", c.Rank(), i, v)
			}
		}
		return nil
	}
}
