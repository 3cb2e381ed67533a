package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/pipeline"
	"github.com/gorun/gorun/transport/mem"
)

// Two ranks in memory read the same CSV, standardize it with statistics
// over both, drop the samples near the mean, and take their shares of
// epoch 0 (samples 0 and 3 lie within 0.1 standard deviations of the
// mean in both features). Had rank 0 died after the first step, Resume
// would hand the rest of the epoch, its second sample and rank 1's, to
// rank 1 alone.
func Example() {
	const data = "x,y,label\n0,0,0\n10,10,1\n-10,-10,2\n0.1,0,3\n10,-10,4\n-10,10,5\n"
	comms, err := collective.NewLocalOn(mem.NewNetwork(2), collective.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([]string, 2)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var b strings.Builder
			err := func() error {
				rc := pipeline.DefaultReadConfig()
				rc.Header, rc.Label = true, "label"
				d, err := pipeline.ReadCSV(strings.NewReader(data), rc)
				if err != nil {
					return err
				}
				cfg := pipeline.DefaultConfig()
				cfg.Seed, cfg.FilterTol = 7, 0.1
				p, err := pipeline.New(d, cfg)
				if err != nil {
					return err
				}
				rep, err := p.Prepare(context.Background(), pipeline.FromComm(c))
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "rank %d: %d samples, %d dropped\n", c.Rank(), rep.N, rep.Dropped)
				part, err := p.Part(0, c.View().Ranks)
				if err != nil {
					return err
				}
				batches, err := p.Batches(part, c.Rank(), 1)
				if err != nil {
					return err
				}
				for _, y := range batches {
					fmt.Fprintf(&b, "  epoch 0 batch %v\n", y)
				}
				rest, err := part.Resume(part.Consumed(1, 1), []int{1})
				if err != nil {
					return err
				}
				if c.Rank() == 1 {
					batches, err = p.Batches(rest, 1, 2)
					if err != nil {
						return err
					}
					for _, y := range batches {
						fmt.Fprintf(&b, "  after the change: batch %v\n", y)
					}
				}
				return nil
			}()
			out[c.Rank()] = b.String()
			if err != nil {
				out[c.Rank()] = err.Error()
			}
		}()
	}
	wg.Wait()
	fmt.Print(out[0], out[1])
	// Output:
	// rank 0: 4 samples, 2 dropped
	//   epoch 0 batch [5]
	//   epoch 0 batch [1]
	// rank 1: 4 samples, 2 dropped
	//   epoch 0 batch [2]
	//   epoch 0 batch [4]
	//   after the change: batch [1 4]
}
