package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAllReduceTCP runs 2 ranks in this process over loopback TCP.
// (gorun -np N examples/allreduce measures separate processes.)
func BenchmarkAllReduceTCP(b *testing.B) {
	cfgs := tcpConfigs(b, 2, "a-secret-of-the-right-length")
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, bytes := range []int{4 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) {
			b.SetBytes(int64(bytes))
			var wg sync.WaitGroup
			for _, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]float32, bytes/4)
					for i := 0; i < b.N; i++ {
						if err := AllReduce(context.Background(), c, buf, Sum); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
