package collective

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gorun/gorun/internal/inspect"
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

// allReduceAll runs b.N all-reduces of bytes on every Comm at once.
func allReduceAll(b *testing.B, comms []*Comm, bytes int) {
	b.SetBytes(int64(bytes))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, bytes/4)
			for i := 0; i < b.N; i++ {
				if err := AllReduce(context.Background(), c, buf, Sum); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
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
