package collective

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestManyRanks joins 64 ranks by gossip over loopback in one process,
// placed 8 to a host (host keys), and runs exact collectives of several
// sizes. Each rank connects only to the peers its algorithms use: far
// fewer than 63, and shared memory only within its host.
func TestManyRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("64 ranks in one process: not in -short")
	}
	const n, perHost = 64, 8
	cfgs := tcpConfigs(t, n, "a-secret-of-the-right-length")
	// Each rank's connections, and those over shared memory, as its mesh
	// makes them.
	var connMu sync.Mutex
	conns := make([][]int, n)
	shared := make([][]int, n)
	for r := range cfgs {
		cfgs[r].onConnect = func(peer int, sharedMemory bool) {
			connMu.Lock()
			defer connMu.Unlock()
			conns[r] = append(conns[r], peer)
			if sharedMemory {
				shared[r] = append(shared[r], peer)
			}
		}
		cfgs[r].HostKey = fmt.Sprintf("host%d", r/perHost)
		cfgs[r].JoinTimeout = 60 * time.Second
		cfgs[r].ProbeInterval, cfgs[r].ProbeTimeout, cfgs[r].SuspicionMult = time.Second, time.Second, 10
	}
	start := time.Now()
	comms, errs := newAll(cfgs)
	t.Logf("joined in %v", time.Since(start))
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, c := range comms {
			if c != nil {
				wg.Add(1)
				go func() { defer wg.Done(); c.Close() }()
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(64, 1))
	sizes := []int{0, 1, 7, n - 1, 4099, 100_003}
	in := make([][][]int64, len(sizes))
	for i, sz := range sizes {
		in[i] = make([][]int64, n)
		for r := range n {
			in[i][r] = make([]int64, sz)
			for j := range sz {
				in[i][r][j] = rng.Int64N(1 << 40)
			}
		}
	}
	root := rng.IntN(n)
	// A budget against a hang, not a speed check: 64 ranks in one process
	// under the race detector, beside other work, take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	out := make([][][]int64, n)
	bcast := make([][]int64, n)
	runErrs := make([]error, n)
	var wg sync.WaitGroup
	var dump sync.Once
	for r, c := range comms {
		wg.Add(1)
		go pprof.Do(ctx, rankLabel(r), func(ctx context.Context) {
			defer wg.Done()
			defer func() {
				if runErrs[r] != nil {
					dump.Do(func() { dumpGoroutines(t) })
				}
			}()
			for i := range sizes {
				buf := slices.Clone(in[i][r])
				if err := AllReduce(ctx, c, buf, Sum); err != nil {
					runErrs[r] = err
					return
				}
				out[r] = append(out[r], buf)
			}
			b := make([]int64, 1000)
			if r == root {
				copy(b, in[4][root])
			}
			if err := Broadcast(ctx, c, b, root); err != nil {
				runErrs[r] = err
				return
			}
			bcast[r] = b
			runErrs[r] = c.Barrier(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(runErrs...); err != nil {
		t.Fatal(err)
	}
	for i, sz := range sizes {
		want := make([]int64, sz)
		for r := range n {
			for j := range sz {
				want[j] += in[i][r][j]
			}
		}
		for r := range n {
			if !slices.Equal(out[r][i], want) {
				t.Fatalf("all-reduce of %d elements: rank %d differs from the reference", sz, r)
			}
		}
	}
	for r := range n {
		if !slices.Equal(bcast[r], in[4][root][:1000]) {
			t.Fatalf("broadcast from %d: rank %d differs", root, r)
		}
	}
	// Partners: ring neighbours on the host and across hosts, log2 N for
	// doubling, the barrier's 2·log2 N, the tree's log2 N + 1.
	bound := 4*bits.Len(uint(n-1)) + 6
	most := 0
	connMu.Lock()
	defer connMu.Unlock()
	for r := range comms {
		conns := conns[r]
		most = max(most, len(conns))
		if len(conns) == 0 || len(conns) > bound {
			// None: the collectives ran without connections.
			t.Errorf("rank %d holds %d connections (%v), want 1 to %d", r, len(conns), conns, bound)
		}
		for _, p := range shared[r] {
			if p/perHost != r/perHost {
				t.Errorf("rank %d shares memory with rank %d on another host", r, p)
			}
		}
	}
	t.Logf("%d ranks: at most %d connections per rank", n, most)
}
