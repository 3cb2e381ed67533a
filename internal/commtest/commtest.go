// Package commtest runs collective.Comms of an in-memory job for the
// tests of packages built on the collective package.
package commtest

import (
	"sync"
	"testing"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/transport/mem"
)

// OnAll runs f on every rank of an in-memory job on nw (one goroutine a
// rank, default config), closes every Comm, and returns each rank's
// error, by rank. It fails the test if the job cannot be made.
func OnAll(t testing.TB, nw *mem.Network, f func(c *collective.Comm) error) []error {
	t.Helper()
	comms, err := collective.NewLocalOn(nw, collective.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c.Rank()] = f(c)
		}()
	}
	wg.Wait()
	for _, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
	return errs
}
