// Command allreduce times float32 all-reduces from 4 KiB to 64 MiB and
// prints time, algbw and busbw, nccl-tests style. Run it under gorun:
//
//	gorun -np 4 ./allreduce
//	gorun -np 2 ./allreduce -sizes 16MiB,64MiB -target 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gorun/gorun/bench"
	"github.com/gorun/gorun/collective"
)

func main() {
	sizes := flag.String("sizes", "4KiB,64KiB,1MiB,16MiB,64MiB", "comma-separated buffer sizes")
	target := flag.Duration("target", time.Second, "time spent per size")
	algo := flag.String("algo", "", "auto, ring (flat), direct, doubling, halving or hierarchical (node-aware); default GORUN_ALGORITHM or auto")
	seg := flag.String("seg", "", "ring segment size (default: the library's)")
	coll := flag.String("coll", "allreduce", "allreduce (a Sum of zeros), avg (an Avg of values as gradients hold), broadcast (from rank 0), reducescatter, allgather (size = the whole result), alltoall (size = one rank's send), "+
		"group or separate (-parts all-reduces of size each: one fused group, or one call each), "+
		"split or split-seq (two children of n/2 ranks all-reducing size at once, or one after the other), splittime (a Split into halves and its Close; size unused); the busbw column always applies the all-reduce's factor 2(n-1)/n")
	parts := flag.Int("parts", 128, "buffers per op for -coll group and separate")
	flag.Parse()
	var list []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := bench.ParseSize(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		list = append(list, n)
	}
	ctx := context.Background()
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *algo != "" {
		if cfg.Algorithm, err = collective.ParseAlgorithm(*algo); err != nil {
			fmt.Fprintln(os.Stderr, "allreduce: -algo:", err)
			os.Exit(2)
		}
	}
	if *seg != "" {
		if cfg.SegmentBytes, err = bench.ParseSize(*seg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	c, err := collective.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer c.Close()
	op, ok := map[string]bench.Op{"allreduce": bench.AllReduceSum, "avg": bench.AvgOfValues(), "broadcast": bench.BroadcastFrom0,
		"reducescatter": bench.ReduceScatterSum, "allgather": bench.AllGatherInto, "alltoall": bench.AllToAllEqual,
		"group": bench.Group(*parts), "separate": bench.Separate(*parts), "splittime": bench.SplitHalves}[*coll]
	if *coll == "split" || *coll == "split-seq" {
		child, err := c.Split(ctx, 2*c.Rank()/c.Size(), c.Rank())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer child.Close()
		op, ok = bench.Siblings(child, 2*c.Rank()/c.Size(), *coll == "split-seq"), true
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown -coll %q\n", *coll)
		os.Exit(2)
	}
	rows, err := bench.SweepOf(ctx, c, list, *target, op)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if c.Rank() == 0 {
		_ = bench.WriteTable(os.Stdout, rows, c.Size())
	}
}
