package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
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

// Recorder keeps a rank's timeline in memory. It is safe for concurrent
// use; a nil *Recorder records nothing.
type Recorder struct {
	mu      sync.Mutex
	events  []Event
	dropped int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Add records e.
func (r *Recorder) Add(e Event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) >= MaxEvents {
		r.dropped++
		return
	}
	r.events = append(r.events, e)
}

// WriteFile writes the timeline to path as JSON lines, the last one
// counting dropped events.
func (r *Recorder) WriteFile(path string) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range r.events {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	if r.dropped > 0 {
		_ = enc.Encode(Event{Name: fmt.Sprint(r.dropped), Cat: "dropped"})
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
