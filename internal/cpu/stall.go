package cpu

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// schedLatencies is the Go runtime's histogram of how long goroutines
// waited, runnable, before they ran: in a process kept from its CPUs (an
// overloaded host, or many ranks in one process) the waits grow to what
// the process lost.
const schedLatencies = "/sched/latencies:seconds"

// StallMeter reports the longest any goroutine of this process waited for
// a CPU between two of its calls: how much this process itself was kept
// from running. The zero StallMeter is ready; it is safe for concurrent
// use.
type StallMeter struct {
	mu     sync.Mutex
	counts []uint64 // the histogram's counts at the last call
	sample []metrics.Sample
}

// Longest returns the longest wait recorded since the last call (the lower
// bound of the histogram bucket it fell in), 0 at the first call or when
// the runtime does not keep the histogram. A goroutine still waiting is
// counted once it runs. The runtime times a sample of the waits (about
// one in eight of a goroutine's), so a stall is seen once several
// goroutines were kept waiting, as they are in a rank starved of its CPU.
func (s *StallMeter) Longest() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sample == nil {
		s.sample = []metrics.Sample{{Name: schedLatencies}}
	}
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := s.sample[0].Value.Float64Histogram()
	first := len(s.counts) != len(h.Counts)
	longest := 0.0
	if !first {
		for i := len(h.Counts) - 1; i >= 0; i-- {
			if h.Counts[i] > s.counts[i] {
				longest = h.Buckets[i] // bucket i is [Buckets[i], Buckets[i+1])
				break
			}
		}
	}
	s.counts = append(s.counts[:0], h.Counts...)
	if first || longest <= 0 || math.IsInf(longest, 0) {
		return 0
	}
	return time.Duration(longest * float64(time.Second))
}
