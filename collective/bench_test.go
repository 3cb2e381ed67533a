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
			comms, errs := newAll(cfgs)
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			for _, bytes := range r.sizes {
				b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) {
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
				})
			}
		})
	}
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
			comms, errs := newAll(cfgs)
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			b.SetBytes(4 << 10)
			var wg sync.WaitGroup
			for _, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]float32, 1<<10)
					for i := 0; i < b.N; i++ {
						if err := AllReduce(context.Background(), c, buf, Sum); err != nil {
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
