package shmem

import (
	"bytes"
	"math/rand/v2"
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

// TestRingWindow: a producer keeps its records within the window while the
// consumer keeps up, goes past it only when the start of the area has no
// room (while Wide says so, only when the ring is not empty), and whatever
// the interleaving of puts, reads and releases the consumer gets every
// record whole and in order (a randomized run against a queue of what was
// put).
func TestRingWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	const capacity, window = 64 << 10, 16 << 10
	for _, wide := range []bool{false, true} {
		for _, lag := range []float64{0, 0.3, 0.7, 0.95} {
			mem := make([]byte, RingSize(capacity))
			r, err := NewRing(mem, capacity)
			if err != nil {
				t.Fatal(err)
			}
			r.window = window
			r.Wide = func() bool { return wide }
			if r.MaxPiece() != window/2-recHdrSize {
				t.Fatalf("MaxPiece %d, want half the window less a header", r.MaxPiece())
			}
			var sent [][]byte // put, not yet read
			held := 0         // read, not yet released
			seq := uint32(0)
			past, pastWithRoom := 0, 0
			for step := 0; step < 20000; step++ {
				switch {
				case rng.Float64() >= lag && len(sent) > 0: // the consumer reads (and soon releases)
					rec, ok, err := r.Next(1 << 20)
					if err != nil || !ok {
						t.Fatalf("wide %v lag %v step %d: %d records put, read ok=%v err=%v", wide, lag, step, len(sent), ok, err)
					}
					if !bytes.Equal(rec.Payload, sent[0]) || rec.H.Seq != seq-uint32(len(sent)) {
						t.Fatalf("wide %v lag %v step %d: record #%d of %d bytes, want #%d of %d", wide, lag, step, rec.H.Seq, len(rec.Payload), seq-uint32(len(sent)), len(sent[0]))
					}
					sent = sent[1:]
					r.Hold(rec.End)
					held++
				case held > 0 && rng.Float64() >= lag:
					r.Release()
					held--
				default: // the producer puts, if it fits
					n := rng.IntN(r.MaxPiece() + 1)
					if !r.Fits(n) {
						continue
					}
					head, tail := r.head.Load(), r.tail.Load()
					off, need := head&(r.cap-1), recordSize(n)
					p := make([]byte, n)
					for i := range p {
						p[i] = byte(rng.Uint32())
					}
					r.Put(RecFrame, transport.Header{Type: transport.TypeData, Seq: seq, Len: uint32(n)}, p)
					seq++
					sent = append(sent, p)
					at := (r.head.Load() - need) & (r.cap - 1)
					crossing := off != 0 && off+need > window
					room := crossing && (r.cap-off)+need <= r.cap-(head-tail)
					switch {
					case at+need > window: // past the window
						past++
						if room {
							pastWithRoom++
						}
						if room && (!wide || head == tail) {
							t.Fatalf("wide %v lag %v step %d: a record at %d..%d past the window %d though the start had room (%d bytes in flight)", wide, lag, step, at, at+need, window, head-tail)
						}
					case at == 0 && crossing && off+need <= r.cap && wide && head != tail:
						t.Fatalf("wide %v lag %v step %d: back to the start at %d with %d bytes in flight", wide, lag, step, off, head-tail)
					}
				}
			}
			if lag == 0 && past > 0 {
				t.Fatalf("wide %v: a consumer that keeps up saw %d records past the window", wide, past)
			}
			if lag >= 0.7 && past == 0 {
				t.Fatalf("wide %v lag %v: no record went past the window", wide, lag)
			}
			if wide && lag >= 0.7 && pastWithRoom == 0 {
				t.Fatalf("lag %v: Wide never kept the whole area ahead", lag)
			}
		}
	}
}
