package ps

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkHubAllReduce: 4 workers all-reduce 16 MiB of float32 through 1
// or 4 hubs in this process, over loopback TCP. It reports the payload
// through the busiest hub per all-reduce (the cost model: 2·N·S/K).
func BenchmarkHubAllReduce(b *testing.B) {
	const n, count = 4, 4 << 20
	for _, k := range []int{1, 4} {
		for _, part := range []int{256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("hubs%d/part%dKiB", k, part>>10), func(b *testing.B) {
				hubs, addrs := startHubs(b, k, n, false)
				cs := dialAll(b, n, addrs, part)
				bufs := make([][]byte, n)
				for w := range bufs {
					bufs[w] = make([]byte, 4*count)
				}
				b.SetBytes(4 * count)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := each(n, func(w int) error {
						return cs[w].Collective(context.Background(), Collective{Seq: uint32(i), Kind: RoundReduce, Op: 1, DType: 1, Count: count, Send: bufs[w], Recv: bufs[w], WantLen: count})
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				var busiest int64
				for _, h := range hubs {
					st := h.Stats()
					busiest = max(busiest, st.BytesIn+st.BytesOut)
				}
				b.ReportMetric(float64(busiest)/float64(b.N), "busiest-hub-B/op")
			})
		}
	}
}
