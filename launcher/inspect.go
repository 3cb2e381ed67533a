package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/launcher/proto"
)

// The launcher's view of its ranks beyond their output: the stall
// inspector, the goroutine dumps before a kill, and the merged timeline.

// inspector is the ranks' states (from their agents' status pages), the
// stall reports and the goroutine dumps.
type inspector struct {
	cfg     Config
	views   []inspect.RankView
	ticker  *time.Ticker
	tick    <-chan time.Time // nil when --stall-warn and --stall-abort are off
	reports int              // stall reports since the job last moved
	next    time.Time        // when the next report is due
	dumps   map[int]*strings.Builder
	hosts   []string
	// carried is, per rank, what its earlier processes (or an earlier
	// page of its process) completed, so that its counts never go back
	// (--metrics); restarts counts its restarts.
	carried  []progress
	restarts []int
}

// progress is what a rank completed: collectives and their payload bytes.
type progress struct {
	collectives, bytes uint64
	busy, wait         time.Duration // inside collectives, and waiting in them (timed ranks)
	hubSent, hubRecv   uint64        // payload bytes to and from ParamHub hubs
}

func newInspector(j *job, cfg Config) *inspector {
	ins := &inspector{cfg: cfg, dumps: map[int]*strings.Builder{}}
	for r := range j.np {
		ins.views = append(ins.views, inspect.RankView{Rank: r, Host: j.ranks[r].host})
		ins.hosts = append(ins.hosts, j.ranks[r].host)
	}
	ins.carried, ins.restarts = make([]progress, j.np), make([]int, j.np)
	if d := ins.threshold(); d > 0 {
		ins.ticker = time.NewTicker(min(time.Second, max(100*time.Millisecond, d/4)))
		ins.tick = ins.ticker.C
	}
	return ins
}

// threshold is how long without progress counts as a stall: the smaller
// of --stall-warn and --stall-abort that is on, 0 if neither is.
func (ins *inspector) threshold() time.Duration {
	w, a := ins.cfg.StallWarn, ins.cfg.StallAbort
	switch {
	case w > 0 && a > 0:
		return min(w, a)
	case w > 0:
		return w
	}
	return a
}

func (ins *inspector) stop() {
	if ins.ticker != nil {
		ins.ticker.Stop()
	}
}

// update takes a rank's new state, received at now.
func (ins *inspector) update(rank int, st *proto.Status, now time.Time) {
	if rank < 0 || rank >= len(ins.views) {
		return
	}
	s := st.State
	s.Since = now.Add(-st.Age)
	if old := ins.views[rank].State; old.Declared && (s.Pid != old.Pid || completed(s) < completed(old)) {
		// A new page: its counts start again.
		ins.carry(rank)
	}
	ins.views[rank].State = s
}

// carry adds what rank's current state says it completed to what it
// completed before.
func (ins *inspector) carry(rank int) {
	s := ins.views[rank].State
	ins.carried[rank].collectives += completed(s)
	ins.carried[rank].bytes += s.Total
	ins.carried[rank].busy += s.Busy
	ins.carried[rank].wait += s.Wait
	ins.carried[rank].hubSent += s.HubSent
	ins.carried[rank].hubRecv += s.HubReceived
}

func (ins *inspector) exited(rank int) {
	if rank >= 0 && rank < len(ins.views) {
		ins.views[rank].Exited = true
	}
}

// restarted: rank runs again (--max-restarts), from a blank state, until
// its own status page says otherwise.
func (ins *inspector) restarted(rank int) {
	if rank >= 0 && rank < len(ins.views) {
		ins.carry(rank)
		ins.restarts[rank]++
		ins.views[rank] = inspect.RankView{Rank: rank, Host: ins.views[rank].Host}
	}
}

// check returns a stall report when one is due (warn), and the summary's
// text when the job has been stalled for --stall-abort (abort); "" for
// neither.
func (ins *inspector) check(now time.Time) (warn, abort string) {
	stalled, stuck, report := inspect.Stall(ins.views, now, ins.threshold())
	if !stalled {
		ins.reports, ins.next = 0, time.Time{}
		return "", ""
	}
	if w := ins.cfg.StallWarn; w > 0 && stuck >= w && !now.Before(ins.next) {
		ins.reports++
		ins.next = now.Add(inspect.NextReport(ins.reports, w))
		warn = report
	}
	if a := ins.cfg.StallAbort; a > 0 && stuck >= a {
		abort = fmt.Sprintf("stalled for %s (--stall-abort %s); terminated every rank: %s", inspect.Round(stuck), a, report)
	}
	return warn, abort
}

// dumpLine keeps a line of rank's goroutine dump.
func (ins *inspector) dumpLine(rank int, line []byte) {
	b := ins.dumps[rank]
	if b == nil {
		b = &strings.Builder{}
		ins.dumps[rank] = b
	}
	if b.Len() < 16<<20 {
		b.Write(line)
		b.WriteByte('\n')
	}
}

// writeDumps saves the goroutine dumps (in --output-filename's rank
// directories, else in a new temporary directory) and returns the
// summary: where they are and each rank's top frames.
func (ins *inspector) writeDumps(jobID string) string {
	if len(ins.dumps) == 0 {
		return ""
	}
	var ranks []int
	for r := range ins.dumps {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	dir := ins.cfg.OutputDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gorun-"+jobID+"-dumps-"); err != nil {
			return "goroutine dumps lost: " + err.Error()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "goroutine dumps (SIGQUIT before the stop) of %s in %s:", inspect.Ranks(ranks), dir)
	for i, r := range ranks {
		text := ins.dumps[r].String()
		path := filepath.Join(dir, fmt.Sprintf("rank.%d.goroutines", r))
		if ins.cfg.OutputDir != "" {
			path = filepath.Join(dir, fmt.Sprintf("rank.%d", r), "goroutines")
			_ = os.MkdirAll(filepath.Dir(path), 0o755)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			fmt.Fprintf(&b, "\n  rank %d: %v", r, err)
		}
		if i >= 8 {
			continue
		}
		host := ""
		if r < len(ins.hosts) {
			host = " on " + ins.hosts[r]
		}
		fmt.Fprintf(&b, "\n  rank %d%s (%s):", r, host, filepath.Base(path))
		top := inspect.TopFrames(text, 3)
		if top == "" {
			top = "(no goroutine in its dump)"
		}
		for _, l := range strings.Split(top, "\n") {
			fmt.Fprintf(&b, "\n    %s", l)
		}
	}
	return b.String()
}

// writeTimeline merges the ranks' timelines into one trace at path;
// probes[i] is agent i's clock against the launcher's.
func (j *job) writeTimeline(path string, timelines map[int][]byte, probes []clockProbe) (string, error) {
	var tracks []inspect.Track
	worst := time.Duration(0)
	for i, a := range j.agents {
		cp := probes[i]
		for _, rs := range a.ranks {
			b, ok := timelines[rs.Rank]
			if !ok || rs.Hub != 0 {
				continue
			}
			evs, err := inspect.ParseEvents(b)
			if err != nil {
				return "", fmt.Errorf("rank %d: %w", rs.Rank, err)
			}
			t := inspect.Track{Rank: rs.Rank, Host: a.name, Events: evs}
			if cp.ok {
				t.Offset, t.Error = cp.offset, cp.err
				worst = max(worst, cp.err)
			}
			tracks = append(tracks, t)
		}
	}
	b, err := inspect.Trace(tracks)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("timeline of %d rank(s) in %s (clocks aligned to within %s)", len(tracks), path, inspect.Round(worst)), nil
}
