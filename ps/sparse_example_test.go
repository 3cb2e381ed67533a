package ps_test

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/ps"
)

// Two workers push the top half of their gradients (top-k, ratio 0.5)
// with error feedback: what a push leaves out stays in the worker's
// residual and goes out with the next push, here a push of zeros.
func Example_sparse() {
	secret := []byte("an-example-job-secret")
	hc := ps.DefaultHubConfig()
	hc.Workers, hc.JobID, hc.Secret, hc.ListenAddr = 2, "example", secret, "127.0.0.1:0"
	hub, err := ps.NewHub(hc)
	if err != nil {
		panic(err)
	}
	defer hub.Close()

	ctx := context.Background()
	sparse, err := ps.ParseSparse("topk:0.5") // as a trainer's -compress flag gives it
	if err != nil {
		panic(err)
	}
	workers := make([]*ps.Client, 2)
	for w := range workers {
		cc := ps.DefaultClientConfig()
		cc.Worker, cc.Workers, cc.JobID, cc.Secret = w, 2, "example", secret
		cc.Hubs = []string{hub.Addr().String()}
		if workers[w], err = ps.Dial(ctx, cc); err != nil {
			panic(err)
		}
		defer workers[w].Close()
		if err := workers[w].Declare(ctx, "w", ps.KeyConfig{Len: 4, Sparse: sparse}); err != nil {
			panic(err)
		}
	}
	round := func(g0, g1 []float64) {
		v := make([]float64, 4)
		h0 := ps.PushPull(workers[0], "w", g0, 1, make([]float64, 4))
		h1 := ps.PushPull(workers[1], "w", g1, 1, v)
		if err := h0.Wait(ctx); err != nil {
			panic(err)
		}
		if err := h1.Wait(ctx); err != nil {
			panic(err)
		}
		r := make([]float64, 4)
		if err := workers[0].Residual("w", r); err != nil {
			panic(err)
		}
		fmt.Println("sum", v, "worker 0 kept", r)
	}
	// Worker 0 sends -5 and 3, worker 1 the first two of its equal 2s.
	round([]float64{1, -5, 3, 0.5}, []float64{2, 2, -2, 0})
	// Then what they kept.
	round(make([]float64, 4), make([]float64, 4))
	// Output:
	// sum [2 -3 3 0] worker 0 kept [1 0 0 0.5]
	// sum [3 -3 1 0.5] worker 0 kept [0 0 0 0]
}
