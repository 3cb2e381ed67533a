package shmem

import (
	"testing"

	"github.com/gorun/gorun/transport"
)

// FuzzShmRecord feeds the consumer arbitrary ring contents: it returns
// records inside the ring or an error, never panics.
func FuzzShmRecord(f *testing.F) {
	seed := make([]byte, RingSize(4096))
	r, _ := NewRing(seed, 4096)
	r.Put(RecFrame, transport.Header{Type: transport.TypeData, Seq: 3}, []byte("hello"))
	r.Put(RecStart, transport.Header{Type: transport.TypeData, Len: 9000}, make([]byte, 100))
	f.Add(seed[shmCtlSize:shmCtlSize+512], uint16(r.head.Load()))
	f.Add([]byte{16, 0, 0, 0, 2, 0, 0, 0}, uint16(8))
	f.Fuzz(func(t *testing.T, data []byte, head uint16) {
		mem := make([]byte, RingSize(4096))
		r, err := NewRing(mem, 4096)
		if err != nil {
			t.Fatal(err)
		}
		copy(r.data, data)
		r.head.Store(uint64(head))
		for range 50 {
			rec, ok, err := r.Next(1 << 20)
			if err != nil || !ok {
				return
			}
			if rec.End > uint64(head) || len(rec.Payload) > 4096 {
				t.Fatalf("record beyond what was published: %+v", rec)
			}
			r.Hold(rec.End)
			r.Release()
		}
	})
}
