package tcp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
)

// TestCancelMidFrame: sends and receives whose contexts end part way
// through a long frame leave the stream whole, over shared memory and
// over TCP. A sender gives up on frames at random (short deadlines while
// the receiver dawdles) and the receiver's own receives time out at
// random in the middle of frames; every frame whose Send succeeded
// arrives intact and in order, a cancelled one arrives whole or not at
// all, and nothing is reported corrupt.
func TestCancelMidFrame(t *testing.T) {
	for _, c := range []struct {
		name  string
		tweak func(r int, c *Config)
		max   int
	}{
		{"shm", func(r int, c *Config) { c.ShmRingBytes = 4096 }, 3 * 4096},
		{"tcp", func(r int, c *Config) { c.HostKey = []string{"a", "b"}[r] }, 4 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "shm" {
				shmDir(t)
			}
			ts := mesh(t, 2, c.tweak)
			defer ts[0].Close()
			defer ts[1].Close()
			rng := rand.New(rand.NewPCG(7, uint64(c.max)))
			const n = 120
			sizes := make([]int, n)
			for i := range sizes {
				sizes[i] = rng.IntN(c.max)
			}
			sizes[0], sizes[1] = 0, c.max
			msgs := randomMsgs(uint64(c.max), sizes...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			sent := make(chan []bool, 1)
			go func() {
				ok := make([]bool, n)
				for i, m := range msgs {
					d := time.Duration(rng.IntN(3000)) * time.Microsecond
					if i == n-1 {
						d = time.Minute // the last one always goes
					}
					sctx, scancel := context.WithTimeout(ctx, d)
					err := ts[0].Send(sctx, 1, transport.Header{Seq: uint32(i)}, m)
					scancel()
					switch {
					case err == nil:
						ok[i] = true
					case !transport.IsCanceled(err):
						t.Errorf("send %d: %v", i, err)
					}
				}
				sent <- ok
			}()

			rrng := rand.New(rand.NewPCG(8, 0))
			var got []int
			for len(got) == 0 || got[len(got)-1] != n-1 {
				if rrng.IntN(4) == 0 {
					time.Sleep(time.Duration(rrng.IntN(2000)) * time.Microsecond)
				}
				rctx, rcancel := context.WithTimeout(ctx, time.Duration(rrng.IntN(1500))*time.Microsecond)
				f, err := ts[1].Recv(rctx, 0)
				rcancel()
				if err != nil {
					if ctx.Err() != nil || !transport.IsCanceled(err) {
						t.Fatalf("after %d frames: %v", len(got), err)
					}
					continue
				}
				i := int(f.Seq)
				if i >= n || (len(got) > 0 && i <= got[len(got)-1]) || !bytes.Equal(f.Payload, msgs[i]) {
					t.Fatalf("frame %d (%d bytes) after %v: out of order or not what was sent", i, len(f.Payload), got)
				}
				f.Release()
				got = append(got, i)
			}
			ok := <-sent
			have := map[int]bool{}
			for _, i := range got {
				have[i] = true
			}
			cancelled := 0
			for i := range n {
				if !ok[i] {
					cancelled++
				}
				if ok[i] && !have[i] {
					t.Fatalf("frame %d was sent but never arrived", i)
				}
			}
			t.Logf("%d frames arrived; %d sends were cancelled", len(got), cancelled)
			if err := ts[1].Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
