// Command hello is the smallest gorun program: every rank joins the job,
// the ranks sum their rank numbers with an all-reduce, and each prints
// what it got.
//
//	make build && go build -o bin/hello ./examples/hello
//	bin/gorun -np 4 bin/hello
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gorun/gorun/collective"
)

func main() {
	ctx := context.Background()
	c, err := collective.Join(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	v := []int64{int64(c.Rank())}
	if err := collective.AllReduce(ctx, c, v, collective.Sum); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("rank %d of %d: sum of all ranks = %d (expected %d)\n", c.Rank(), c.Size(), v[0], c.Size()*(c.Size()-1)/2)
}
