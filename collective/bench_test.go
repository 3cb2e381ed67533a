package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/transport"
)

// BenchmarkAllReduceTCP runs n ranks in this process over loopback TCP,
// with Auto's choice and, for 4 KiB on 4 ranks, each small-buffer
// algorithm. (gorun -np N examples/allreduce measures separate processes.)
func BenchmarkAllReduceTCP(b *testing.B) {
	type run struct {
		n     int
		algo  Algorithm
		name  string
		sizes []int
	}
	for _, r := range []run{
		{2, Auto, "auto", []int{4 << 10, 1 << 20, 16 << 20}},
		{4, Auto, "auto", []int{4 << 10, 1 << 20, 16 << 20}},
		{4, Direct, "direct", []int{4 << 10}},
		{4, Doubling, "doubling", []int{4 << 10}},
	} {
		b.Run(fmt.Sprintf("n%d/%s", r.n, r.name), func(b *testing.B) {
			cfgs := tcpConfigs(b, r.n, "a-secret-of-the-right-length")
			for i := range cfgs {
				cfgs[i].Algorithm = r.algo
			}
			comms := startAll(b, cfgs)
			for _, bytes := range r.sizes {
				b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) { allReduceAll(b, comms, bytes) })
			}
		})
	}
}

// BenchmarkExact is the cost of exact sums (Config.Exact) against plain
// ones: float32 Avg all-reduces of 4 KiB, 1 MiB and 16 MiB between 2
// ranks of this process on one host (shared memory), plain and exact one
// after the other at each size, so that the two see the same machine.
func BenchmarkExact(b *testing.B) {
	var comms [2][]*Comm
	for k, exact := range []bool{false, true} {
		cfgs := tcpConfigs(b, 2, "a-secret-of-the-right-length")
		for i := range cfgs {
			cfgs[i].Exact = exact
		}
		comms[k] = startAll(b, cfgs)
	}
	for _, bytes := range []int{4 << 10, 1 << 20, 16 << 20} {
		for k, name := range []string{"plain", "exact"} {
			b.Run(fmt.Sprintf("%dB/%s", bytes, name), func(b *testing.B) {
				b.SetBytes(int64(bytes))
				var wg sync.WaitGroup
				for _, c := range comms[k] {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]float32, bytes/4)
						for i := range buf {
							buf[i] = float32(i%1000) * 0.37
						}
						for range b.N { // Avg: the values stay as they are
							if err := AllReduce(context.Background(), c, buf, Avg); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// allReduceAll runs b.N all-reduces of bytes on every Comm at once.
func allReduceAll(b *testing.B, comms []*Comm, bytes int) {
	b.SetBytes(int64(bytes))
	allReduceN(b, comms, bytes, b.N, false)
}

// startAll joins cfgs' Comms and closes them when b ends.
func startAll(b *testing.B, cfgs []Config) []*Comm {
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// BenchmarkInspect is the cost of gorun's job inspection on a 4 KiB
// all-reduce between 2 ranks: none, the status page (always kept under
// gorun), and the page with the --timeline recorder.
func BenchmarkInspect(b *testing.B) {
	for _, mode := range []string{"none", "page", "timeline"} {
		b.Run(mode, func(b *testing.B) {
			cfgs := tcpConfigs(b, 2, "a-secret-of-the-right-length")
			for i := range cfgs {
				if mode != "none" {
					cfgs[i].StatusFile = filepath.Join(b.TempDir(), "page")
					if err := inspect.CreatePage(cfgs[i].StatusFile); err != nil {
						b.Fatal(err)
					}
				}
				if mode == "timeline" {
					cfgs[i].TimelineFile = filepath.Join(b.TempDir(), "timeline")
				}
			}
			allReduceAll(b, startAll(b, cfgs), 4<<10)
		})
	}
}

// BenchmarkTimelineOverhead is what --timeline adds to a 4 KiB all-reduce
// between 2 ranks in this process, over shared memory and over TCP,
// measured in turn with the recorder on and off in the same Comms, batch
// by batch: it reports the median time per all-reduce each way and the
// median ratio of neighbouring batches (on/off).
func BenchmarkTimelineOverhead(b *testing.B) {
	for _, shm := range []bool{true, false} {
		b.Run(map[bool]string{true: "shm", false: "tcp"}[shm], func(b *testing.B) { timelineOverhead(b, shm) })
	}
}

func timelineOverhead(b *testing.B, shm bool) {
	cfgs := tcpConfigs(b, 2, "a-secret-of-the-right-length")
	for i := range cfgs {
		cfgs[i].Shm = shm
		cfgs[i].StatusFile = filepath.Join(b.TempDir(), "page")
		if err := inspect.CreatePage(cfgs[i].StatusFile); err != nil {
			b.Fatal(err)
		}
		cfgs[i].TimelineFile = filepath.Join(b.TempDir(), "timeline")
	}
	comms := startAll(b, cfgs)
	recs := make([]*inspect.Recorder, len(comms))
	for i, c := range comms {
		recs[i] = c.rec
	}
	set := func(on bool) {
		for i, c := range comms {
			m, ok := c.tr.(interface{ SetWaitMeter(*transport.WaitMeter) })
			if !ok {
				b.Fatalf("transport %T has no wait meter", c.tr)
			}
			if on {
				c.rec = recs[i]
				m.SetWaitMeter(c.waited)
			} else {
				c.rec = nil
				m.SetWaitMeter(nil)
			}
		}
	}
	const batch = 2000
	var off, on, ratio []float64
	b.ResetTimer()
	for done := 0; done < b.N; done += 2 * batch {
		var t [2]float64
		for k, mode := range []bool{false, true} {
			set(mode)
			t0 := time.Now()
			allReduceN(b, comms, 4<<10, batch, false)
			t[k] = float64(time.Since(t0).Nanoseconds()) / batch
		}
		off, on, ratio = append(off, t[0]), append(on, t[1]), append(ratio, t[1]/t[0])
	}
	b.StopTimer()
	set(true)
	b.ReportMetric(median(off), "ns/off")
	b.ReportMetric(median(on), "ns/on")
	b.ReportMetric(median(ratio), "on/off")
}

// allReduceN runs n all-reduces of bytes on every Comm at once, each
// caller locked to its OS thread if locked is set. The first error fails
// the benchmark and closes every Comm, which ends the other ranks' calls.
// (A cancellable context would change what is measured: a call whose
// context can end does more.)
func allReduceN(b *testing.B, comms []*Comm, bytes, n int, locked bool) {
	var once sync.Once
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				ctx = cpu.WithLockedThread(ctx) // as libgorun's calls from C are
			}
			buf := make([]float32, bytes/4)
			for range n {
				if err := AllReduce(ctx, c, buf, Sum); err != nil {
					once.Do(func() {
						b.Error(err)
						for _, c := range comms {
							c.Close()
						}
					})
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkAllReduceLocked is BenchmarkAllReduceTCP's 2 ranks with each
// caller locked to its OS thread, as a C or Python thread calling gorun
// is: every hand-off to another goroutine then costs a switch between OS
// threads. 2 ranks of this process on one host (shared memory); compare
// with BenchmarkAllReduceTCP/n2 run in the same sitting.
func BenchmarkAllReduceLocked(b *testing.B) {
	comms := startAll(b, tcpConfigs(b, 2, "a-secret-of-the-right-length"))
	for _, bytes := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) {
			b.SetBytes(int64(bytes))
			allReduceN(b, comms, bytes, b.N, true)
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkElastic is the cost of Config.Elastic when nothing fails: 2
// ranks over shared memory (and loopback TCP), 4 KiB and 16 MiB
// all-reduces, plain and elastic Comms side by side in one process (run
// with -count for pairs).
func BenchmarkElastic(b *testing.B) {
	for _, shm := range []bool{true, false} {
		for _, bytes := range []int{4 << 10, 16 << 20} {
			for _, mode := range []string{"plain", "elastic"} {
				b.Run(fmt.Sprintf("shm=%v/%dB/%s", shm, bytes, mode), func(b *testing.B) {
					cfgs := tcpConfigs(b, 2, "a-secret-of-the-right-length")
					for i := range cfgs {
						cfgs[i].Shm = shm
						if mode == "elastic" {
							a, other := net.Pipe()
							go io.Copy(io.Discard, other)
							b.Cleanup(func() { other.Close() })
							cfgs[i].Elastic, cfgs[i].Control = true, a
						}
					}
					comms := startAll(b, cfgs)
					allReduceAll(b, comms, bytes)
				})
			}
		}
	}
}
