package inspect

import "testing"

// BenchmarkCollectiveRecord is what --timeline adds to each collective:
// two timestamps and a record.
func BenchmarkCollectiveRecord(b *testing.B) {
	r := NewRecorder()
	for i := 0; i < b.N; i++ {
		if i%MaxEvents == MaxEvents-1 { // record, never drop
			b.StopTimer()
			r = NewRecorder()
			b.StartTimer()
		}
		t0 := r.Now()
		r.Collective(3, 1, false, uint32(i), 4096, t0, r.Now(), 0)
	}
}

// BenchmarkPage is what the status page adds to each collective.
func BenchmarkPage(b *testing.B) {
	path := b.TempDir() + "/page"
	if err := CreatePage(path); err != nil {
		b.Fatal(err)
	}
	p, err := OpenPage(path)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < b.N; i++ {
		p.Begin(uint64(i), "allreduce", "float32", 4096)
		p.End(uint64(i))
	}
}

// BenchmarkNow is the clock alone: two readings.
func BenchmarkNow(b *testing.B) {
	r := NewRecorder()
	var s int64
	for i := 0; i < b.N; i++ {
		s += r.Now() + r.Now()
	}
	_ = s
}
