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
	"unsafe"

	"github.com/gorun/gorun/internal/tick"
)

// Event is one entry of a rank's timeline: a collective (Cat
// "collective") or a span the program marked (Cat "span"), with its begin
// and end in unix nanoseconds of the rank's host clock. Wait is the part
// of a collective this rank spent blocked for a peer's data, in
// nanoseconds; the rest of it moved data (copying, reducing, sending).
type Event struct {
	Name     string `json:"n"`
	Cat      string `json:"c"`
	Seq      uint64 `json:"s,omitempty"`
	Bytes    uint64 `json:"b,omitempty"`
	DType    string `json:"d,omitempty"`
	Strategy string `json:"st,omitempty"`
	Begin    int64  `json:"t0"`
	End      int64  `json:"t1"`
	Wait     int64  `json:"w,omitempty"`
	Comm     uint32 `json:"cm,omitempty"` // a sub-communicator's id (0: the job's)
}

// MaxEvents is how many events a Recorder keeps of each category
// (collectives, spans); later ones are counted as dropped.
const MaxEvents = 1 << 20

// record is an event as a Recorder keeps it: no pointers (the collector
// never scans the records), raw clock readings, names as codes.
type record struct {
	begin, end int64
	wait       int64 // ticks
	bytes      uint64
	seq        uint32
	comm       uint32
	kind       uint8 // a collective's code, or 0 for a span
	dtype      uint8
	hub        bool
	wall       bool   // begin and end are unix nanoseconds already
	span       uint16 // a span's name, an index into Recorder.names
}

const (
	chunkLen = 4096 // records per chunk: growing never copies
	hotLen   = 64   // records a lane gathers before it stores them
	pageSize = 4096
)

// lane is a log of records with one writer at a time. The writer gathers
// records in a small buffer that stays in its cache and moves them to the
// log 64 at a time, then publishes the count (an atomic store). A record
// written straight to the log would cost a cache miss that the next fence
// (the next collective's first send has one) waits for, and publishing
// each record would be a fence of its own. Readers see what was
// published: a reader beside the writer misses at most the last 64. Chunks
// never move, and the next one is allocated and its pages touched by a
// goroutine of its own while the writer fills the one before.
type lane struct {
	hot     [hotLen]record // the writer's
	h       int            // records in hot
	chunks  [MaxEvents / chunkLen]atomic.Pointer[[chunkLen]record]
	n       int64 // records in the log, the writer's
	dropped int64 // the writer's
	pub     atomic.Int64
	pubDrop atomic.Int64
}

func (l *lane) put(rec record) {
	l.hot[l.h] = rec
	if l.h++; l.h == hotLen {
		l.publish()
	}
}

// publish moves the gathered records to the log and makes every record so
// far visible to readers; only the writer, or a goroutine that
// synchronised with it, may call it.
func (l *lane) publish() {
	for _, rec := range l.hot[:l.h] {
		i := l.n
		if i >= MaxEvents {
			l.dropped++
			continue
		}
		k, j := i/chunkLen, i%chunkLen
		c := l.chunks[k].Load()
		if c == nil {
			c = l.chunk(k) // the goroutine preparing it has not finished
		}
		if j == 0 && k+1 < int64(len(l.chunks)) {
			go l.chunk(k + 1)
		}
		c[j] = rec
		l.n = i + 1
	}
	l.h = 0
	l.pub.Store(l.n)
	l.pubDrop.Store(l.dropped)
}

// chunk returns chunk k, allocating it with its pages touched if nobody
// has yet.
func (l *lane) chunk(k int64) *[chunkLen]record {
	if c := l.chunks[k].Load(); c != nil {
		return c
	}
	c := new([chunkLen]record)
	b := unsafe.Slice((*byte)(unsafe.Pointer(c)), unsafe.Sizeof(*c))
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	if l.chunks[k].CompareAndSwap(nil, c) {
		return c
	}
	return l.chunks[k].Load()
}

func (l *lane) each(f func(record) error) error {
	n := l.pub.Load()
	for i := int64(0); i < n; i++ {
		if err := f(l.chunks[i/chunkLen].Load()[i%chunkLen]); err != nil {
			return err
		}
	}
	return nil
}

// Recorder keeps a rank's timeline in memory, cheaply: a timestamp is a
// reading of package tick's clock (the CPU's time-stamp counter where it
// can), and an event is a 48-byte record in a chunk, written without a
// lock or a fence for collectives. Readings become unix nanoseconds when
// the file is written.
//
// Collective is for one goroutine at a time (the collective package calls
// it inside its one-at-a-time section), and WriteFile shows its records
// up to the last Sync (and most of those after it: all but the last 64);
// Sync belongs to the goroutine that records collectives, or to one that
// synchronised with it. Span, SpanAt and WriteFile are safe for concurrent
// use. A nil *Recorder records nothing.
type Recorder struct {
	colls lane // written by Collective only

	mu    sync.Mutex // for the spans
	spans lane
	names []string
	index map[string]uint16

	base tick.Base
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	r := &Recorder{index: map[string]uint16{}, base: tick.NewBase()}
	r.colls.chunk(0)
	r.spans.chunk(0)
	return r
}

// Now is a timestamp for Collective and Span: tick.Now.
func (r *Recorder) Now() int64 { return tick.Now() }

// Collective records collective seq (kind and dtype as the caller codes
// them; WriteFile names them) between the timestamps begin and end, of
// which it waited for peers' data for wait ticks.
func (r *Recorder) Collective(kind, dtype uint8, hub bool, seq uint32, bytes uint64, begin, end, wait int64) {
	r.CommCollective(0, kind, dtype, hub, seq, bytes, begin, end, wait)
}

// CommCollective is Collective on sub-communicator comm (0: the job's
// own), whose numbers are its own: the timeline names it with comm.
func (r *Recorder) CommCollective(comm uint32, kind, dtype uint8, hub bool, seq uint32, bytes uint64, begin, end, wait int64) {
	if r == nil {
		return
	}
	r.colls.put(record{begin: begin, end: end, wait: wait, bytes: bytes, seq: seq, comm: comm, kind: kind, dtype: dtype, hub: hub})
}

// Sync publishes every collective recorded so far to WriteFile.
func (r *Recorder) Sync() {
	if r != nil {
		r.colls.publish()
	}
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
	r.spans.publish()
}

// WriteFile writes the timeline to path as JSON lines of Events, the last
// one counting dropped events; kind and dtype name the codes.
func (r *Recorder) WriteFile(path string, kind, dtype func(uint8) string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at, dur := r.base.UnixNano()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	write := func(rec record) error {
		e := Event{Begin: at(rec.begin), End: at(rec.end)}
		if rec.wall {
			e.Begin, e.End = rec.begin, rec.end
		}
		if rec.kind == 0 {
			e.Cat, e.Name = "span", r.names[rec.span]
		} else {
			e.Cat, e.Name, e.Seq, e.Bytes, e.DType, e.Strategy = "collective", kind(rec.kind), uint64(rec.seq), rec.bytes, dtype(rec.dtype), "ring"
			e.Comm = rec.comm
			if rec.hub {
				e.Strategy = "hub"
			}
			e.Wait = min(int64(dur(rec.wait)), e.End-e.Begin)
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
	if d := r.colls.pubDrop.Load() + r.spans.pubDrop.Load(); d > 0 {
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
				if e.Comm != 0 {
					x.Name = fmt.Sprintf("%s #%d (comm %d)", e.Name, e.Seq, e.Comm)
				}
				x.Args = map[string]any{"bytes": e.Bytes, "dtype": e.DType, "strategy": e.Strategy, "seq": e.Seq,
					"wait_us": float64(e.Wait) / 1e3, "move_us": float64(e.End-e.Begin-e.Wait) / 1e3}
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
