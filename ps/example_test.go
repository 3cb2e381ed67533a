package ps_test

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/ps"
)

// A hub and two workers in one process: each pushes a gradient computed
// from its own samples, and both pull the hub's SGD step, which uses the
// sample-weighted mean gradient.
func Example() {
	secret := []byte("an-example-job-secret")
	hc := ps.DefaultHubConfig()
	hc.Workers, hc.JobID, hc.Secret, hc.ListenAddr = 2, "example", secret, "127.0.0.1:0"
	hub, err := ps.NewHub(hc)
	if err != nil {
		panic(err)
	}
	defer hub.Close()

	ctx := context.Background()
	workers := make([]*ps.Client, 2)
	for w := range workers {
		cc := ps.DefaultClientConfig()
		cc.Worker, cc.Workers, cc.JobID, cc.Secret = w, 2, "example", secret
		cc.Hubs = []string{hub.Addr().String()}
		if workers[w], err = ps.Dial(ctx, cc); err != nil {
			panic(err)
		}
		defer workers[w].Close()
		if err := workers[w].Declare(ctx, "w", ps.KeyConfig{Len: 2, Update: ps.SGD, LR: 0.5, Init: []float64{1, 1}}); err != nil {
			panic(err)
		}
	}
	// Worker 0 saw 1 sample, worker 1 saw 3: the mean gradient is
	// (1*[4 0] + 3*[0 4]) / 4 = [1 3], and w = [1 1] - 0.5*[1 3].
	h0 := ps.PushPull(workers[0], "w", []float64{4, 0}, 1, make([]float64, 2))
	w1 := make([]float64, 2)
	h1 := ps.PushPull(workers[1], "w", []float64{0, 4}, 3, w1)
	if err := h0.Wait(ctx); err != nil {
		panic(err)
	}
	if err := h1.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(w1)
	// Output: [0.5 -0.5]
}
