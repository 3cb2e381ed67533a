// Command scale is the job that bench/scale.sh times at many ranks: join,
// exact all-reduces of 8 B, 32 KiB and 2 MiB (int64 sums, checked against
// the closed form), a broadcast from rank 0 (checked), a barrier, then
// each rank's join time, peak RSS and open sockets, gathered to rank 0,
// which prints
//
//	scale n=<N> join_ms_max=<..> rss_kib_max=<..> sockets_max=<..> sockets_mean=<..>
//
//	scale started_unix_ms=<..> joined_unix_ms=<..> worked_unix_ms=<..>
//
// (the last rank's start, Join done and collectives done, in unix
// milliseconds: on test hosts, which share one clock, bench/scale.sh turns
// them into a job's phases) and, after its Close, "scale exit_ms=<..>"
// (how long Close took). With
// -idle DUR every rank then sits joined and idle for DUR (gossip and
// failure detection running, no collectives) and rank 0 prints the CPU the
// ranks used meanwhile, as a share of one core:
//
//	scale idle_s=<..> idle_cpu_pct_max=<..> idle_cpu_pct_mean=<..>
//
// bench/mpi/scale_mpi.c is the same job for MPI. Run it under gorun:
//
//	go build -o bin/scale ./examples/scale && bin/gorun -np 8 bin/scale
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/collective"
)

// t0 is set before main runs, as close to the process's start as Go allows.
var t0 = time.Now()

// val is rank r's element i; the sum over n ranks is want(n, i).
func val(r, i int) int64 { return int64(r+1)*int64(i+1) + int64(i%13) }

func want(n, i int) int64 { return int64(n*(n+1)/2)*int64(i+1) + int64(n)*int64(i%13) }

// bval is what rank 0 broadcasts.
func bval(i int) int64 { return int64(i)*7 + 3 }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	idle := flag.Duration("idle", 0, "after the job, sit idle this long and report the ranks' CPU meanwhile")
	logLevel := flag.String("log", "", "log the runtime's messages of this level and above to stderr: debug, info, warn or error (default: none)")
	flag.Parse()
	ctx := context.Background()
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		fail("%v", err)
	}
	if *logLevel != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(*logLevel)); err != nil {
			fail("-log %q: %v", *logLevel, err)
		}
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
	}
	c, err := collective.New(ctx, cfg)
	if err != nil {
		fail("join: %v", err)
	}
	joined := time.Now()
	joinUS := joined.Sub(t0).Microseconds()
	rank, n := c.Rank(), c.Size()

	for _, count := range []int{1, 4096, 262144} { // 8 B, 32 KiB, 2 MiB
		buf := make([]int64, count)
		for i := range buf {
			buf[i] = val(rank, i)
		}
		if err := collective.AllReduce(ctx, c, buf, collective.Sum); err != nil {
			fail("rank %d: all-reduce of %d B: %v", rank, 8*count, err)
		}
		for i, v := range buf {
			if w := want(n, i); v != w {
				fail("rank %d: all-reduce of %d B: index %d is %d, want %d", rank, 8*count, i, v, w)
			}
		}
	}

	b := make([]int64, 4096)
	for i := range b {
		b[i] = -1
		if rank == 0 {
			b[i] = bval(i)
		}
	}
	if err := collective.Broadcast(ctx, c, b, 0); err != nil {
		fail("rank %d: broadcast: %v", rank, err)
	}
	for i, v := range b {
		if v != bval(i) {
			fail("rank %d: broadcast: index %d is %d, want %d", rank, i, v, bval(i))
		}
	}
	if err := c.Barrier(ctx); err != nil {
		fail("rank %d: barrier: %v", rank, err)
	}

	worked := time.Now()
	const k = 6
	mine := []int64{joinUS, rssKiB(), sockets(), t0.UnixMicro(), joined.UnixMicro(), worked.UnixMicro()}
	all := make([]int64, k*n)
	if err := collective.AllGather(ctx, c, mine, all); err != nil {
		fail("rank %d: all-gather: %v", rank, err)
	}
	if rank == 0 {
		var joinMax, rssMax, sockMax, sockSum, startMax, joinedMax, workedMax int64
		for r := range n {
			v := all[k*r : k*r+k]
			joinMax = max(joinMax, v[0])
			rssMax = max(rssMax, v[1])
			sockMax = max(sockMax, v[2])
			sockSum += v[2]
			startMax, joinedMax, workedMax = max(startMax, v[3]), max(joinedMax, v[4]), max(workedMax, v[5])
		}
		fmt.Printf("scale n=%d join_ms_max=%.1f rss_kib_max=%d sockets_max=%d sockets_mean=%.1f\n",
			n, float64(joinMax)/1000, rssMax, sockMax, float64(sockSum)/float64(n))
		fmt.Printf("scale started_unix_ms=%.1f joined_unix_ms=%.1f worked_unix_ms=%.1f\n",
			float64(startMax)/1000, float64(joinedMax)/1000, float64(workedMax)/1000)
	}
	if *idle > 0 {
		idleCPU(ctx, c, *idle)
	}
	// Rank 0 also prints how long its Close took ("scale exit_ms=<..>").
	// A failed clean leave is not the job's failure: the rank says so and
	// exits 0.
	t := time.Now()
	err = c.Close()
	closeMS := float64(time.Since(t).Microseconds()) / 1000
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: rank %d: close (%.0f ms): %v\n", rank, closeMS, err)
	}
	if rank == 0 {
		fmt.Printf("scale exit_ms=%.1f\n", closeMS)
	}
}

// idleCPU sleeps for d and has rank 0 print the CPU every rank used
// meanwhile, in percent of one core (max and mean over ranks).
func idleCPU(ctx context.Context, c *collective.Comm, d time.Duration) {
	before, t := cpuTime(), time.Now()
	time.Sleep(d)
	pct := float64(cpuTime()-before) / float64(time.Since(t)) * 100
	all := make([]float64, c.Size())
	if err := collective.AllGather(ctx, c, []float64{pct}, all); err != nil {
		fail("rank %d: all-gather: %v", c.Rank(), err)
	}
	if c.Rank() == 0 {
		var hi, sum float64
		for _, v := range all {
			hi, sum = max(hi, v), sum+v
		}
		fmt.Printf("scale idle_s=%.1f idle_cpu_pct_max=%.2f idle_cpu_pct_mean=%.2f\n", d.Seconds(), hi, sum/float64(len(all)))
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssKiB is this process's peak resident set (VmHWM), or -1.
func rssKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

// sockets counts this process's open sockets (TCP, and any others), or -1.
func sockets() int64 {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	var k int64
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			k++
		}
	}
	return k
}
