package cpu

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestStallMeter: goroutines kept waiting for the only P behind a
// goroutine that spins show up as a long wait. (Nothing is asserted of a
// quiet interval: on a loaded host none is quiet.)
func TestStallMeter(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var m StallMeter
	if d := m.Longest(); d != 0 {
		t.Fatalf("first call: %v, want 0", d)
	}
	// One goroutine spins without yielding for 50 ms while others become
	// runnable: they wait until the scheduler preempts it (about 10 ms)
	// or it ends. The runtime times only a sample of its goroutines'
	// waits (about one in eight), so many wait: with 20, all of them went
	// untimed in about one run in three hundred.
	var wg sync.WaitGroup
	stop := time.Now().Add(50 * time.Millisecond)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
		}
	}()
	for range 400 {
		wg.Add(1)
		go func() { defer wg.Done(); time.Sleep(time.Millisecond) }()
	}
	wg.Wait()
	if d := m.Longest(); d < time.Millisecond {
		t.Fatalf("after goroutines waited behind a spinning one: longest wait %v, want at least 1ms", d)
	}
}
