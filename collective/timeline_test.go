package collective

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/inspect"
)

// TestTimelineWaitSplit: with a timeline, each collective says how long
// the rank waited for its peers' data. Three ranks over shared memory and
// over TCP; the last rank enters the second all-reduce late: the others'
// records of it show that wait, the late rank's does not, and on every
// record the wait lies within the collective. The sums are checked too,
// and every collective of every rank is in its file. A machine busier
// than the test can take the CPU from the early ranks for longer than the
// late one sleeps, so the waits are compared again with a longer sleep
// (150 ms, then 0.5 s, then 1.5 s) before the test fails; a wrong split
// fails at every length.
func TestTimelineWaitSplit(t *testing.T) {
	for _, shm := range []bool{true, false} {
		for _, n := range []int{1021, 1 << 18} {
			t.Run(fmt.Sprintf("shm=%v/%d", shm, n), func(t *testing.T) {
				var seen []string
				for _, late := range []time.Duration{150 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond} {
					msg := timelineWaitSplit(t, shm, n, late)
					if msg == "" {
						return
					}
					seen = append(seen, msg)
				}
				t.Fatalf("the late rank's wait was not the least, at every sleep:\n%s", strings.Join(seen, "\n"))
			})
		}
	}
}

// timelineWaitSplit runs TestTimelineWaitSplit's three all-reduces with
// rank 2 sleeping late before the second; it fails t on a wrong sum or
// record, and returns what it saw if the waits do not show the late rank
// ("" if they do).
func timelineWaitSplit(t *testing.T, shm bool, n int, late time.Duration) string {
	cfgs := tcpConfigs(t, 3, "a-secret-of-the-right-length")
	dir := t.TempDir()
	for i := range cfgs {
		cfgs[i].Shm = shm
		cfgs[i].TimelineFile = filepath.Join(dir, fmt.Sprint(i))
	}
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				buf := make([]float64, n)
				for i := range buf {
					buf[i] = float64(i%7 + c.Rank())
				}
				if round == 1 && c.Rank() == 2 {
					time.Sleep(late)
				}
				if err := AllReduce(context.Background(), c, buf, Sum); err != nil {
					t.Error(err)
					return
				}
				for i, v := range buf {
					if want := float64(3*(i%7) + 3); v != want {
						t.Errorf("rank %d [%d] = %v, want %v", c.Rank(), i, v, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	if t.Failed() {
		t.FailNow()
	}
	var waits, entered [3]time.Duration
	for r := range comms {
		b, err := os.ReadFile(cfgs[r].TimelineFile)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := inspect.ParseEvents(b)
		if err != nil {
			t.Fatal(err)
		}
		var mine []inspect.Event
		for _, e := range evs {
			if e.Cat == "collective" && e.Name == "allreduce" {
				mine = append(mine, e)
			}
			if e.Wait < 0 || e.Wait > e.End-e.Begin {
				t.Fatalf("rank %d: %s #%d waited %d ns of %d", r, e.Name, e.Seq, e.Wait, e.End-e.Begin)
			}
		}
		if len(mine) != 3 {
			t.Fatalf("rank %d: %d all-reduces on the timeline, want 3: %+v", r, len(mine), evs)
		}
		waits[r] = time.Duration(mine[1].Wait)
		entered[r] = time.Duration(mine[1].Begin) // unix ns: one clock, one process
	}
	// The late rank waits least, and a rank that entered before it waited
	// at least half its head start (under a loaded suite a rank may itself
	// enter late, after losing the CPU: its head start, measured on the
	// timeline, is what it could wait for; and its peers lose the CPU
	// while the late rank runs, so the late rank's own wait may reach half
	// the others').
	waited := true
	for r := range 2 {
		if head := entered[2] - entered[r]; waits[r] < head/2 {
			waited = false
		}
	}
	if !waited || waits[2] >= min(waits[0], waits[1])*3/4 {
		return fmt.Sprintf("rank 2 slept %v; entered at %v; waits on ranks 0, 1, 2: %v", late, []time.Duration{0, entered[1] - entered[0], entered[2] - entered[0]}, waits)
	}
	return ""
}
