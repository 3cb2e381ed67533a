package launcher

import (
	"testing"

	"github.com/gorun/gorun/internal/inspect"
)

// TestAppendTimeline: a restarted rank's timeline follows its first
// process's on one track, whether or not the first ended its last line.
func TestAppendTimeline(t *testing.T) {
	first := `{"n":"allreduce","c":"collective","s":1,"t0":10,"t1":20}`
	second := `{"n":"allreduce","c":"collective","s":1,"t0":30,"t1":40}` + "\n"
	for _, old := range []string{first, first + "\n"} {
		var tl []byte
		tl = appendTimeline(tl, []byte(old))
		tl = appendTimeline(tl, []byte(second))
		evs, err := inspect.ParseEvents(tl)
		if err != nil || len(evs) != 2 || evs[0].Begin != 10 || evs[1].Begin != 30 {
			t.Fatalf("%q: %+v, %v", tl, evs, err)
		}
	}
}
