package ring

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// BenchmarkAllReduceWire is a 16 MiB float32 ring all-reduce on 4
// in-memory ranks, per wire format. The in-memory transport copies bytes
// at memory speed, so this measures what the codec costs (encoding every
// sent segment, decoding every received one), not what halving the bytes
// saves on a real link. bytes/op (SetBytes) is one rank's buffer; wire-B/op
// is the payload bytes one rank sends per call.
func BenchmarkAllReduceWire(b *testing.B) {
	const size, n = 4, 4 << 20 // 16 MiB of float32
	for _, w := range []reduce.Wire{reduce.WireFull, reduce.WireFP16, reduce.WireBF16} {
		b.Run(w.String(), func(b *testing.B) {
			nw := mem.NewNetwork(size)
			b.SetBytes(4 * n)
			errs := make([]error, size)
			bufs := make([][]float32, size)
			for r := range bufs {
				bufs[r] = make([]float32, n)
				for i := range bufs[r] {
					bufs[r][i] = float32(i%1000) / 1000
				}
			}
			fold := reduce.Func[float32](reduce.Sum)
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := range size {
				wg.Go(func() {
					tr := nw.Transport(r)
					o := Options{Header: transport.Header{Kind: 1, DType: reduce.Float32, Op: uint8(reduce.Sum), Count: n}, SegmentBytes: 512 << 10, Wire: w}
					for i := 0; i < b.N && errs[r] == nil; i++ {
						if errs[r] = AllReduce(context.Background(), tr, bufs[r], fold, o); errs[r] != nil {
							tr.Abort(errs[r])
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			sent := 2 * (size - 1) * (n / size) * w.Size()
			b.ReportMetric(float64(sent), "wire-B/op")
		})
	}
}
