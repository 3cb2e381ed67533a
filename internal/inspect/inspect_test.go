package inspect

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page")
	if err := CreatePage(path); err != nil {
		t.Fatal(err)
	}
	read := func() (State, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return ParsePage(b)
	}
	if _, err := read(); err != ErrNoPage {
		t.Fatalf("undeclared page: %v", err)
	}
	p, err := OpenPage(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := read()
	if err != nil || !s.Declared || s.Pid != os.Getpid() || s.In || s.Seq != 0 {
		t.Fatalf("declared: %+v %v", s, err)
	}
	p.Begin(7, "allreduce-with-a-long-name", "float32", 4096)
	s, _ = read()
	if !s.In || s.Seq != 7 || s.Kind != "allreduce-with-a" || s.DType != "float32" || s.Bytes != 4096 || time.Since(s.Since) > time.Minute {
		t.Fatalf("in: %+v", s)
	}
	p.End(7)
	p.Begin(8, "barrier", "", 0)
	p.End(8)
	s, _ = read()
	if s.In || s.Seq != 8 || s.Total != 4096 || s.Kind != "barrier" || s.DType != "" || s.Busy != 0 || s.Wait != 0 {
		t.Fatalf("after: %+v", s)
	}
	// Timing: ticks add up, and read as time once the tick's length is
	// known (none before).
	p.Time(3000, 1000)
	p.Time(1000, 500)
	if s, _ = read(); s.Busy != 0 || s.Wait != 0 {
		t.Fatalf("times before the tick rate: %+v", s)
	}
	p.SetTickRate(2.5)
	if s, _ = read(); s.Busy != 10*time.Microsecond || s.Wait != 3750*time.Nanosecond {
		t.Fatalf("times: busy %v wait %v, want 10µs and 3.75µs", s.Busy, s.Wait)
	}
	// Hub traffic adds up from many goroutines at once.
	var wg sync.WaitGroup
	var sent, recvd int64
	for g := range 8 {
		for i := range 100 {
			sent, recvd = sent+int64(g*i), recvd+int64(i+1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				p.AddHub(int64(g*i), int64(i+1))
			}
		}()
	}
	wg.Wait()
	if s, _ = read(); s.HubSent != uint64(sent) || s.HubReceived != uint64(recvd) || s.Total != 4096 {
		t.Fatalf("hub traffic: %+v, want %d sent and %d received", s, sent, recvd)
	}
	if err := p.Close(); err != nil || p.Close() != nil {
		t.Fatal("Close is not idempotent")
	}
	var nilPage *Page
	nilPage.AddHub(1, 1)
	nilPage.Begin(1, "x", "y", 1) // does nothing
	nilPage.End(1)
	nilPage.Time(1, 1)
	nilPage.SetTickRate(1)
	if _, err := ParsePage(make([]byte, 10)); err == nil {
		t.Fatal("short page")
	}
	if _, err := OpenPage(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing page")
	}
}

func FuzzParsePage(f *testing.F) {
	f.Add(make([]byte, PageBytes))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParsePage(b)
		if err == nil && (!s.Declared || len(s.Kind) > 16 || len(s.DType) > 8) {
			t.Fatalf("%+v", s)
		}
	})
}

func TestStall(t *testing.T) {
	now := time.Unix(1000, 0)
	in := func(seq uint64, ago time.Duration) State {
		return State{Declared: true, In: true, Seq: seq, Kind: "allreduce", DType: "float32", Bytes: 16 << 20, Since: now.Add(-ago)}
	}
	out := func(seq uint64, ago time.Duration) State {
		return State{Declared: true, Seq: seq, Since: now.Add(-ago)}
	}
	var ranks []RankView
	for r := range 8 {
		s := in(1200, 41*time.Second)
		if r == 3 {
			s = out(1199, 41*time.Second)
		}
		ranks = append(ranks, RankView{Rank: r, Host: "h" + string(rune('1'+r/4)), State: s})
	}
	stalled, stuck, rep := Stall(ranks, now, 30*time.Second)
	want := "no progress for 41s; behind: rank 3 (h1); rank 3: not in a collective for 41s (last: #1199); ranks 0-2,4-7: allreduce #1200 float32 16 MiB for 41s"
	if !stalled || stuck != 41*time.Second || rep != want {
		t.Fatalf("got %v %v\n%s\nwant\n%s", stalled, stuck, rep, want)
	}
	// Under the threshold, off, or nobody waiting in a collective: no stall.
	if s, _, _ := Stall(ranks, now, time.Minute); s {
		t.Fatal("41s < 1m")
	}
	if s, _, _ := Stall(ranks, now, 0); s {
		t.Fatal("warn 0 is off")
	}
	computing := []RankView{{Rank: 0, State: out(5, time.Hour)}, {Rank: 1, State: out(5, time.Hour)}}
	if s, _, _ := Stall(computing, now, time.Second); s {
		t.Fatal("every rank in its own code is not a stall")
	}
	// One rank moved recently: no stall. An exited or undeclared rank does
	// not count as progress.
	ranks[5].State = in(1200, time.Second)
	if s, _, _ := Stall(ranks, now, 30*time.Second); s {
		t.Fatal("rank 5 moved 1s ago")
	}
	ranks[5].Exited = true
	ranks[6].State = State{Since: now}
	if s, _, rep := Stall(ranks, now, 30*time.Second); !s || !strings.Contains(rep, "rank 6: not using gorun's collectives") || strings.Contains(rep, "5") && strings.Contains(rep, "ranks 0-2,4-7") {
		t.Fatalf("exited and undeclared: %v %s", s, rep)
	}
	// Everybody in the same collective: nobody behind.
	same := []RankView{{Rank: 0, State: in(9, time.Minute)}, {Rank: 1, State: in(9, time.Minute)}}
	if _, _, rep := Stall(same, now, time.Second); rep != "no progress for 1m0s; ranks 0-1: allreduce #9 float32 16 MiB for 1m0s" {
		t.Fatalf("same call: %s", rep)
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[string]string{"3": "rank 3", "0 1 2 4 5 6 7": "ranks 0-2,4-7", "5 1 3": "ranks 1,3,5", "": "ranks "} {
		var rs []int
		for _, f := range strings.Fields(in) {
			rs = append(rs, int(f[0]-'0'))
		}
		if got := Ranks(rs); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	for n, want := range map[uint64]string{16 << 20: "16 MiB", 4096: "4 KiB", 12: "12 B", 1536: "1.5 KiB", 3 << 30: "3 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
	if NextReport(1, 30*time.Second) != 30*time.Second || NextReport(3, 30*time.Second) != 2*time.Minute || NextReport(20, 30*time.Second) != 10*time.Minute {
		t.Fatal("NextReport")
	}
}

func stuckInCollective(ch chan<- string) {
	buf := make([]byte, 1<<20)
	ch <- string(buf[:runtime.Stack(buf, true)])
}

func TestTopFrames(t *testing.T) {
	ch := make(chan string)
	go stuckInCollective(ch)
	dump := <-ch
	top := TopFrames(dump, 3)
	// No goroutine is in gorun's collectives: the main one.
	if !strings.HasPrefix(top, "goroutine 1 [") || !strings.Contains(top, "testing.") {
		t.Fatalf("top frames:\n%s\nof\n%s", top, dump)
	}
	if strings.Count(top, "\n") > 6 {
		t.Fatalf("more than 3 frames:\n%s", top)
	}
	fake := "goroutine 1 [sleep]:\ntime.Sleep(0x1)\n\t/x/time.go:1\nmain.main()\n\t/x/main.go:9\n\ngoroutine 7 [select]:\ngithub.com/gorun/gorun/collective.AllReduce[...](...)\n\t/x/c.go:70\n"
	if got := TopFrames(fake, 1); got != "goroutine 7 [select]:\ngithub.com/gorun/gorun/collective.AllReduce[...](...)\n\t/x/c.go:70" {
		t.Fatalf("collective goroutine first: %q", got)
	}
	// The goroutine that wrote the dump (CatchQuit, inlined into the
	// collective package's caller) is never the rank's.
	dumper := "goroutine 21 [running]:\ngithub.com/gorun/gorun/collective.newComm.CatchQuit.func1.1()\n\t/x/quit.go:33\n\n"
	if got := TopFrames(dumper+fake, 1); !strings.HasPrefix(got, "goroutine 7 [select]:") {
		t.Fatalf("the dumper's goroutine picked: %q", got)
	}
	if got := TopFrames(strings.Replace(fake, "collective", "other", 1), 1); !strings.HasPrefix(got, "goroutine 1 [sleep]:\ntime.Sleep") {
		t.Fatalf("else goroutine 1: %q", got)
	}
	deep := "goroutine 1 [select]:\ntransport.wait()\n\t/t.go:1\nring.step()\n\t/r.go:2\ngithub.com/gorun/gorun/collective.allReduce()\n\t/c.go:3\ngithub.com/gorun/gorun/collective.AllReduce()\n\t/c.go:4\nmain.train()\n\t/m.go:5\nmain.main()\n\t/m.go:6\n"
	if got, want := TopFrames(deep, 1), "goroutine 1 [select]:\ntransport.wait()\n\t/t.go:1\n...\ngithub.com/gorun/gorun/collective.AllReduce()\n\t/c.go:4\nmain.train()\n\t/m.go:5"; got != want {
		t.Fatalf("deep call:\n%s\nwant\n%s", got, want)
	}
	if TopFrames("nothing here", 3) != "" {
		t.Fatal("no goroutine")
	}
}

// TestTimeline: a Recorder's file parses back; Trace puts each rank on a
// track of its own, on the launcher's clock (a host 5 ms ahead is moved
// back), from the first event.
func TestTimeline(t *testing.T) {
	r := NewRecorder()
	t0 := time.Now().UnixNano()
	a := r.Now()
	time.Sleep(2 * time.Millisecond)
	b0 := r.Now()
	r.Collective(3, 1, false, 1, 4096, a, b0, (b0-a)/2)
	r.Span("forward", b0, r.Now())
	r.Collective(3, 1, true, 2, 8, r.Now(), r.Now(), 0)
	r.Sync()
	at := time.Now()
	r.SpanAt("hub push", at, at.Add(time.Microsecond))
	t1 := time.Now().UnixNano()
	path := filepath.Join(t.TempDir(), "tl")
	code := func(c uint8) string { return fmt.Sprintf("k%d", c) }
	if err := r.WriteFile(path, code, code); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	evs, err := ParseEvents(b)
	// Collectives and spans are kept apart: order by begin.
	sort.Slice(evs, func(i, j int) bool { return evs[i].Begin < evs[j].Begin })
	if err != nil || len(evs) != 4 || evs[3].Name != "hub push" || evs[3].Begin != at.UnixNano() || evs[3].End != at.UnixNano()+1000 || evs[0].Seq != 1 || evs[0].Name != "k3" || evs[0].DType != "k1" || evs[0].Strategy != "ring" || evs[1].Name != "forward" || evs[1].Cat != "span" || evs[2].Strategy != "hub" {
		t.Fatalf("%+v %v", evs, err)
	}
	// Readings become unix nanoseconds, in order, within the test's time,
	// the first event about 2 ms long.
	for i, e := range evs {
		if e.Begin < t0-int64(time.Millisecond) || e.End > t1+int64(time.Millisecond) || e.End < e.Begin || i > 0 && e.Begin < evs[i-1].End-int64(100*time.Microsecond) {
			t.Fatalf("event %d: %d..%d outside %d..%d or out of order", i, e.Begin, e.End, t0, t1)
		}
	}
	if d := time.Duration(evs[0].End - evs[0].Begin); d < 1900*time.Microsecond || d > 50*time.Millisecond {
		t.Fatalf("a 2 ms sleep measured %v", d)
	}
	if w, d := evs[0].Wait, evs[0].End-evs[0].Begin; w < d/2-d/50 || w > d/2+d/50 {
		t.Fatalf("waited half of %d ns, recorded %d", d, w)
	}
	evs = evs[:2]
	if _, err := ParseEvents([]byte("{\"n\":\"x\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("garbage: %v", err)
	}
	evs[0] = Event{Name: "allreduce", Cat: "collective", Seq: 1, Begin: 1_000_000, End: 3_000_000, Wait: 500_000}
	evs[1] = Event{Name: "forward", Cat: "span", Begin: 500_000, End: 900_000}
	ahead := []Event{{Name: "allreduce", Cat: "collective", Seq: 1, Begin: 6_000_000, End: 8_000_000}}
	out, err := Trace([]Track{{Rank: 1, Host: "h2", Offset: 5 * time.Millisecond, Events: ahead}, {Rank: 0, Host: "h1", Events: evs}})
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph string
			Ts, Dur  float64
			Pid      int
			Args     map[string]any
		}
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	starts := map[string]float64{}
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "process_name" {
				names[e.Pid] = e.Args["name"].(string)
			}
		case "X":
			starts[fmt.Sprintf("%d %s", e.Pid, e.Name)] = e.Ts
			if e.Pid == 0 && e.Name == "allreduce #1" && (e.Args["wait_us"] != 500.0 || e.Args["move_us"] != 1500.0) {
				t.Fatalf("wait and move of a 2 ms all-reduce that waited 0.5 ms: %v", e.Args)
			}
		}
	}
	if names[0] != "rank 0 (h1)" || names[1] != "rank 1 (h2)" {
		t.Fatalf("tracks %v", names)
	}
	// The first event (rank 0's span at 0.5 ms) is 0; rank 1's all-reduce
	// began at 6 ms on a clock 5 ms ahead: 1 ms, as rank 0's did.
	if starts["0 forward"] != 0 || starts["0 allreduce #1"] != 500 || starts["1 allreduce #1"] != 500 {
		t.Fatalf("starts %v", starts)
	}
}

// TestRecorderPublishes: collectives recorded without a Sync show up in
// the file 64 at a time; after Sync all of them do, in order, across
// chunks (which goroutines of the lane prepare ahead of the writer); past
// MaxEvents they are counted as dropped.
func TestRecorderPublishes(t *testing.T) {
	r := NewRecorder()
	path := filepath.Join(t.TempDir(), "tl")
	code := func(c uint8) string { return fmt.Sprint(c) }
	read := func() []Event {
		t.Helper()
		if err := r.WriteFile(path, code, code); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		evs, err := ParseEvents(b)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	var seq uint32
	rec := func(n int) {
		for i := 0; i < n; i++ {
			seq++
			s := seq
			r.Collective(3, 1, false, s, uint64(s), int64(s), int64(s)+1, 0)
		}
	}
	rec(300)
	if got := len(read()); got != 256 {
		t.Fatalf("300 unsynced collectives: %d in the file, want 256", got)
	}
	r.Span("between", 1, 2) // spans do not publish collectives
	if got := len(read()); got != 257 {
		t.Fatalf("and a span: %d in the file, want 257", got)
	}
	r.Sync()
	if got := len(read()); got != 301 {
		t.Fatalf("after Sync: %d in the file, want 300 and the span", got)
	}
	rec(3*chunkLen + 7)
	r.Sync()
	evs := read()
	if len(evs) != 301+3*chunkLen+7 || evs[len(evs)-1].Name != "between" {
		t.Fatalf("%d events, want %d and the span last", len(evs), 301+3*chunkLen+7)
	}
	evs = evs[:len(evs)-1]
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Bytes != uint64(i+1) {
			t.Fatalf("event %d: seq %d bytes %d", i, e.Seq, e.Bytes)
		}
	}
	if !testing.Short() {
		rec(MaxEvents - len(evs) + 5)
		r.Sync()
		evs = read()
		if last := evs[len(evs)-1]; len(evs) != MaxEvents+2 || last.Cat != "dropped" || last.Name != "5" {
			t.Fatalf("past MaxEvents: %d events, last %+v", len(evs), last)
		}
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add([]byte("{\"n\":\"allreduce\",\"c\":\"collective\",\"s\":1,\"t0\":1,\"t1\":2}\n"))
	f.Add([]byte("garbage\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := ParseEvents(b)
		if err == nil {
			if _, err := Trace([]Track{{Rank: 0, Host: "h", Events: evs}}); err != nil {
				t.Fatalf("parsed events do not make a trace: %v", err)
			}
		}
	})
}
