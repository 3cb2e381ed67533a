package collective_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorun/gorun/collective"
)

// Four ranks in one process, connected in memory, average their gradients.
func Example() {
	comms, err := collective.NewLocal(4, collective.DefaultConfig())
	if err != nil {
		panic(err)
	}
	results := make([][]float64, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			grads := []float64{float64(c.Rank()), 10 * float64(c.Rank())}
			if err := collective.AllReduce(context.Background(), c, grads, collective.Avg); err != nil {
				panic(err)
			}
			results[c.Rank()] = grads
		}()
	}
	wg.Wait()
	fmt.Println(results[0], results[3])
	// Output: [1.5 15] [1.5 15]
}
