package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Event is one entry of a rank's timeline: a collective (Cat
// "collective") or a span the program marked (Cat "span"), with its begin
// and end in unix nanoseconds of the rank's host clock.
type Event struct {
	Name     string `json:"n"`
	Cat      string `json:"c"`
	Seq      uint64 `json:"s,omitempty"`
	Bytes    uint64 `json:"b,omitempty"`
	DType    string `json:"d,omitempty"`
	Strategy string `json:"st,omitempty"`
	Begin    int64  `json:"t0"`
	End      int64  `json:"t1"`
}

// MaxEvents is how many events a Recorder keeps; later ones are counted
// as dropped.
const MaxEvents = 1 << 20

// record is an event as a Recorder keeps it: no pointers (the collector
// never scans the records), raw clock readings, names as codes.
type record struct {
	begin, end int64
	bytes      uint64
	seq        uint32
	kind       uint8 // a collective's code, or 0 for a span
	dtype      uint8
	hub        bool
	wall       bool   // begin and end are unix nanoseconds already
	span       uint16 // a span's name, an index into Recorder.names
}

const chunkLen = 4096 // records per chunk: growing never copies

// lane is a log of records with one writer at a time and readers that may
// run beside it: a record is published by storing the count after it, so
// a writer takes no lock, and chunks never move.
type lane struct {
	chunks  [MaxEvents / chunkLen]atomic.Pointer[[chunkLen]record]
	n       atomic.Int64
	dropped atomic.Int64
}

func (l *lane) put(rec record) {
	i := l.n.Load()
	if i >= MaxEvents {
		l.dropped.Add(1)
		return
	}
	c := l.chunks[i/chunkLen].Load()
	if c == nil {
		c = new([chunkLen]record)
		l.chunks[i/chunkLen].Store(c)
	}
	c[i%chunkLen] = rec
	l.n.Store(i + 1)
}

func (l *lane) each(f func(record) error) error {
	n := l.n.Load()
	for i := int64(0); i < n; i++ {
		if err := f(l.chunks[i/chunkLen].Load()[i%chunkLen]); err != nil {
			return err
		}
	}
	return nil
}

// Recorder keeps a rank's timeline in memory, cheaply: a timestamp is one
// read of the CPU's time-stamp counter where it runs at a constant rate
// (amd64 with constant_tsc and nonstop_tsc), else of the monotonic clock,
// and an event is a 40-byte record in a chunk, written without a lock for
// collectives. Readings become unix nanoseconds when the file is written.
// Collective is for one goroutine at a time (the collective package calls
// it inside its one-at-a-time section); Span, SpanAt and WriteFile are
// safe for concurrent use. A nil *Recorder records nothing.
type Recorder struct {
	colls lane // written by Collective only

	mu    sync.Mutex // for the spans
	spans lane
	names []string
	index map[string]uint16

	tsc   bool
	t0    time.Time // when it started, with ...
	tick0 int64     // ... the counter's reading then
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	r := &Recorder{index: map[string]uint16{}, tsc: tscUsable()}
	r.t0, r.tick0 = time.Now(), ticks()
	return r
}

// Now is a timestamp for Collective and Span.
func (r *Recorder) Now() int64 {
	if r.tsc {
		return ticks()
	}
	return int64(time.Since(r.t0))
}

// Collective records collective seq (kind and dtype as the caller codes
// them; WriteFile names them) between the timestamps begin and end.
func (r *Recorder) Collective(kind, dtype uint8, hub bool, seq uint32, bytes uint64, begin, end int64) {
	if r == nil {
		return
	}
	r.colls.put(record{begin: begin, end: end, bytes: bytes, seq: seq, kind: kind, dtype: dtype, hub: hub})
}

// Span records the program's own span name between begin and end.
func (r *Recorder) Span(name string, begin, end int64) {
	r.span(name, begin, end, false)
}

// SpanAt records span name between two times of the clock (ParamHub's
// requests, which the ps package times itself).
func (r *Recorder) SpanAt(name string, begin, end time.Time) {
	r.span(name, begin.UnixNano(), end.UnixNano(), true)
}

func (r *Recorder) span(name string, begin, end int64, wall bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.index[name]
	if !ok && len(r.names) < 1<<16-1 {
		i = uint16(len(r.names))
		r.names = append(r.names, name)
		r.index[name] = i
	}
	r.spans.put(record{begin: begin, end: end, span: i, wall: wall})
}

// unixNano turns the readings into unix nanoseconds: the counter's rate is
// measured from the start to now (over at least 20 ms).
func (r *Recorder) unixNano() func(int64) int64 {
	base := r.t0.UnixNano()
	if !r.tsc {
		return func(v int64) int64 { return base + v }
	}
	if d := time.Since(r.t0); d < 20*time.Millisecond {
		time.Sleep(20*time.Millisecond - d)
	}
	el, dt := time.Since(r.t0), ticks()-r.tick0
	perTick := float64(el) / float64(max(dt, 1))
	return func(v int64) int64 { return base + int64(float64(v-r.tick0)*perTick) }
}

// WriteFile writes the timeline to path as JSON lines of Events, the last
// one counting dropped events; kind and dtype name the codes.
func (r *Recorder) WriteFile(path string, kind, dtype func(uint8) string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.unixNano()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	write := func(rec record) error {
		e := Event{Begin: ns(rec.begin), End: ns(rec.end)}
		if rec.wall {
			e.Begin, e.End = rec.begin, rec.end
		}
		if rec.kind == 0 {
			e.Cat, e.Name = "span", r.names[rec.span]
		} else {
			e.Cat, e.Name, e.Seq, e.Bytes, e.DType, e.Strategy = "collective", kind(rec.kind), uint64(rec.seq), rec.bytes, dtype(rec.dtype), "ring"
			if rec.hub {
				e.Strategy = "hub"
			}
		}
		return enc.Encode(e)
	}
	err = r.colls.each(write)
	if err == nil {
		err = r.spans.each(write)
	}
	if err != nil {
		f.Close()
		return err
	}
	if d := r.colls.dropped.Load() + r.spans.dropped.Load(); d > 0 {
		_ = enc.Encode(Event{Name: fmt.Sprint(d), Cat: "dropped"})
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ParseEvents reads a timeline file's bytes; a line that is not an event
// is an error naming it.
func ParseEvents(b []byte) ([]Event, error) {
	var out []Event
	for i, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(l, &e); err != nil {
			return out, fmt.Errorf("inspect: timeline line %d: %w", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Track is one rank's timeline with its host's clock: Offset is the host
// clock minus the launcher's, known to within ±Error.
type Track struct {
	Rank   int
	Host   string
	Offset time.Duration
	Error  time.Duration
	Events []Event
}

// Trace writes tracks as a Chrome trace (Perfetto and chrome://tracing
// read it): one process per rank, named "rank N (host)", its collectives
// and spans as complete events on the launcher's clock, in microseconds
// from the first event; metadata says each host's clock offset and its
// error bound.
func Trace(tracks []Track) ([]byte, error) {
	type ev struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	var start int64 = -1
	for _, t := range tracks {
		for _, e := range t.Events {
			if e.Cat == "dropped" {
				continue
			}
			if b := e.Begin - int64(t.Offset); start < 0 || b < start {
				start = b
			}
		}
	}
	var evs []ev
	clocks := map[string]any{}
	sort.Slice(tracks, func(i, j int) bool { return tracks[i].Rank < tracks[j].Rank })
	for _, t := range tracks {
		evs = append(evs,
			ev{Name: "process_name", Ph: "M", Pid: t.Rank, Args: map[string]any{"name": fmt.Sprintf("rank %d (%s)", t.Rank, t.Host)}},
			ev{Name: "process_sort_index", Ph: "M", Pid: t.Rank, Args: map[string]any{"sort_index": t.Rank}})
		clocks[t.Host] = map[string]any{"offset_us": float64(t.Offset) / 1e3, "error_us": float64(t.Error) / 1e3}
		for _, e := range t.Events {
			if e.Cat == "dropped" {
				evs = append(evs, ev{Name: "events dropped: " + e.Name, Ph: "i", Pid: t.Rank, Ts: 0})
				continue
			}
			x := ev{Name: e.Name, Cat: e.Cat, Ph: "X", Pid: t.Rank,
				Ts: float64(e.Begin-int64(t.Offset)-start) / 1e3, Dur: float64(e.End-e.Begin) / 1e3}
			if e.Cat == "collective" {
				x.Name = fmt.Sprintf("%s #%d", e.Name, e.Seq)
				x.Args = map[string]any{"bytes": e.Bytes, "dtype": e.DType, "strategy": e.Strategy, "seq": e.Seq}
			}
			evs = append(evs, x)
		}
	}
	return json.Marshal(map[string]any{
		"traceEvents":     evs,
		"displayTimeUnit": "ms",
		"metadata": map[string]any{
			"clock": "the launcher's; each host's offset was measured at start, by the fastest of a few round trips over its agent's channel (error: half that round trip)",
			"hosts": clocks,
		},
	})
}
