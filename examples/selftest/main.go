// Command selftest checks gorun's collectives end to end: run it under
// gorun, and every rank issues the same random collectives and checks each
// result against a reference it computes itself.
//
//	gorun -np 4 ./selftest -rounds 200
//
// With -drill kill or -drill stop, the last rank kills or freezes itself in
// the middle of a large all-reduce, and the others report what they saw;
// under gorun --elastic they go on without it and check every result on
// the new view (gorun --elastic -np 4 ./selftest -drill kill exits 0);
// -drill outside -pause 100ms strikes nobody and leaves the strike (a
// host's loss, say) to the test; with -until it is a soak that goes on
// until a given time and until every rank is back (bench/soak strikes it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/conformance"
)

func main() {
	rounds := flag.Int("rounds", 100, "random collectives to check")
	seed := flag.Uint64("seed", 1, "seed shared by all ranks")
	drill := flag.String("drill", "", "kill or stop (or outside, under gorun --elastic: the test strikes): fault drill instead of the check")
	mib := flag.Int("mib", 64, "all-reduce size of the drill, MiB")
	pause := flag.Duration("pause", 0, "under gorun --elastic, the drill's pause before each step")
	rejoin := flag.Bool("rejoin", false, "under gorun --elastic --max-restarts, the drill goes on until the victim is back")
	steps := flag.Int("steps", 30, "the drill's steps (with -pause, a soak for faults from outside)")
	until := flag.Int64("until", 0, "under gorun --elastic -drill outside, a soak: step until this time (Unix nanoseconds) and until the view holds every rank, instead of -steps")
	late := flag.Duration("late", 0, "after the check, one more all-reduce that the last rank enters this late (gorun --timeline shows the others waiting)")
	flag.Parse()
	ctx := context.Background()
	c, err := collective.Join(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer c.Close()
	if *drill != "" {
		// Survivors report before they go, even when gorun has started
		// ending the job because the victim died first.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		sig, ok := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP, "outside": 0}[*drill]
		if !ok || sig == 0 && os.Getenv("GORUN_ELASTIC") != "1" {
			fmt.Fprintln(os.Stderr, "-drill: want kill or stop (or outside, under gorun --elastic)")
			os.Exit(2)
		}
		if os.Getenv("GORUN_ELASTIC") == "1" {
			// gorun --elastic: the survivors go on without the victim
			// (with -drill outside, whatever the test strikes).
			if err := conformance.ElasticDrill(ctx, c, conformance.ElasticOptions{How: sig, Pause: *pause, Rejoin: *rejoin, Steps: *steps, Until: unixNano(*until)}, func(s string) { fmt.Println(s) }); err != nil {
				fmt.Fprintf(os.Stderr, "rank %d: FAIL: %v\n", c.Rank(), err)
				os.Exit(1)
			}
			return
		}
		at, err := conformance.Drill(ctx, c, sig, *mib, func(s string) { fmt.Println(s) })
		fmt.Printf("LOST %d peerlost=%v err=%v\n", at.UnixNano(), errors.Is(err, collective.ErrPeerLost), err)
		os.Exit(3)
	}
	start := time.Now()
	end := c.Span("selftest") // its own track entry under gorun --timeline
	err = conformance.Run(ctx, c, *seed, *rounds)
	end()
	if err == nil && *late > 0 {
		if c.Rank() == c.Size()-1 {
			time.Sleep(*late)
		}
		buf := []float32{float32(c.Rank())}
		err = collective.AllReduce(ctx, c, buf, collective.Sum)
		if want := float32(c.Size() * (c.Size() - 1) / 2); err == nil && buf[0] != want {
			err = fmt.Errorf("late all-reduce: %v, want %v", buf[0], want)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: FAIL: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	fmt.Printf("rank %d of %d: %d rounds OK in %v (hosts %v)\n", c.Rank(), c.Size(), *rounds, time.Since(start).Round(time.Millisecond), c.Hosts())
}

// unixNano is the time t Unix nanoseconds, or the zero time for 0.
func unixNano(t int64) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, t)
}
