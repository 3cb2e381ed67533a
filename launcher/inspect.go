package launcher

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/transport"
)

// What the agents tell the launcher about their ranks, for the stall
// inspector, the goroutine dumps before a kill and the exit summary.

// statusEvery is how often an agent reads its ranks' status pages.
const statusEvery = 500 * time.Millisecond

// streamDump is msgOutput's Stream for a rank's goroutine dump (its stderr
// after gorun sent it SIGQUIT).
const streamDump = 3

// statusInfo is one rank's page as its agent read it: Age is how long
// before the agent sent it the rank's state last changed (the launcher
// turns it into a time of its own clock; 0 as agents send each change at
// the reading that shows it).
type statusInfo struct {
	State inspect.State
	Age   time.Duration
}

// pagePath is where rank's status page lives on its host: in /dev/shm,
// named like the job's segments so that the agent's sweep removes it too.
func pagePath(jobID string, rank int) string {
	dir := transport.DefaultShmDir
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	return strings.Replace(transport.ShmSegmentPattern(dir, jobID), "*", "status-"+strconv.Itoa(rank), 1)
}

// watchPages sends every rank's status page to the launcher when it
// changes, until stop is closed.
func (a *agent) watchPages(stop <-chan struct{}) {
	last := map[int]inspect.State{}
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		a.mu.Lock()
		procs := append([]*rankProc(nil), a.procs...)
		a.mu.Unlock()
		for _, p := range procs {
			if p.page == "" {
				continue
			}
			b, err := os.ReadFile(p.page)
			if err != nil {
				continue
			}
			s, err := inspect.ParsePage(b)
			if err != nil {
				continue
			}
			// The page reads no clock: a state is as old as the first
			// reading that showed it.
			s.Since = time.Time{}
			if old, ok := last[p.spec.Rank]; ok && old == s {
				continue
			}
			last[p.spec.Rank] = s
			a.mu.Lock()
			p.declared = s.Pid
			a.mu.Unlock()
			_ = a.conn.Send(&msg{Kind: msgStatus, Rank: p.spec.Rank, Status: &statusInfo{State: s}})
		}
	}
}

// dumpRanks asks every running rank that declared a status page (a Go
// program using gorun's collectives) for a goroutine dump: SIGQUIT, after
// which its stderr goes to the launcher as streamDump.
func (a *agent) dumpRanks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		if p.alive && p.declared == p.cmd.Process.Pid {
			p.dumping.Store(true)
			_ = syscall.Kill(p.declared, syscall.SIGQUIT)
		}
	}
}

// oomKills is how many times the kernel's OOM killer acted in this
// process's memory cgroup (memory.events under cgroup v2, memory.oom_control
// under v1), and whether that could be read.
func oomKills() (int, bool) {
	for _, f := range cgroupFiles() {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				fh.Close()
				return n, err == nil
			}
		}
		fh.Close()
	}
	return 0, false
}

// cgroupFiles are the files that may count this process's OOM kills.
func cgroupFiles() []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			out = append(out, filepath.Join("/sys/fs/cgroup", f[2], "memory.events"))
		case strings.Contains(","+f[1]+",", ",memory,"):
			out = append(out, filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.oom_control"), "/sys/fs/cgroup/memory/memory.oom_control")
		}
	}
	return out
}

// inspector is the launcher's side: the ranks' states, the stall reports
// and the goroutine dumps.
type inspector struct {
	cfg     Config
	views   []inspect.RankView
	ticker  *time.Ticker
	tick    <-chan time.Time // nil when --stall-warn and --stall-abort are off
	reports int              // stall reports since the job last moved
	next    time.Time        // when the next report is due
	dumped  bool
	dumps   map[int]*strings.Builder
	hosts   []string
}

func newInspector(j *job, cfg Config) *inspector {
	ins := &inspector{cfg: cfg, dumps: map[int]*strings.Builder{}}
	for r := range j.np {
		ins.views = append(ins.views, inspect.RankView{Rank: r, Host: j.ranks[r].host})
		ins.hosts = append(ins.hosts, j.ranks[r].host)
	}
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
func (ins *inspector) update(rank int, st *statusInfo, now time.Time) {
	if rank < 0 || rank >= len(ins.views) {
		return
	}
	s := st.State
	s.Since = now.Add(-st.Age)
	ins.views[rank].State = s
}

func (ins *inspector) exited(rank int) {
	if rank >= 0 && rank < len(ins.views) {
		ins.views[rank].Exited = true
	}
}

// dumpable: some running rank is a Go program using gorun's collectives.
func (ins *inspector) dumpable() bool {
	for _, v := range ins.views {
		if v.State.Declared && !v.Exited {
			return true
		}
	}
	return false
}

// check prints a stall report when one is due, and says whether the job
// has been stalled for --stall-abort (with the summary's text).
func (ins *inspector) check(now time.Time) (text string, abort bool) {
	stalled, stuck, report := inspect.Stall(ins.views, now, ins.threshold())
	if !stalled {
		ins.reports, ins.next = 0, time.Time{}
		return "", false
	}
	if w := ins.cfg.StallWarn; w > 0 && stuck >= w && !now.Before(ins.next) {
		ins.reports++
		ins.next = now.Add(inspect.NextReport(ins.reports, w))
		fmt.Fprintf(ins.cfg.Stderr, "gorun: stall: %s\n", report)
	}
	if a := ins.cfg.StallAbort; a > 0 && stuck >= a {
		return fmt.Sprintf("stalled for %s (--stall-abort %s); terminated every rank: %s", inspect.Round(stuck), a, report), true
	}
	return "", false
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

// maxTimeline caps a rank's timeline file.
const maxTimeline = 64 << 20

// timelinePath is where rank writes its timeline on its host.
func timelinePath(jobID string, rank int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("gorun-%s-timeline-%d.jsonl", jobID, rank))
}

// sendTimeline sends the timeline p wrote, if any, to the launcher and
// removes the file.
func (a *agent) sendTimeline(p *rankProc) {
	if p.timeline == "" {
		return
	}
	defer os.Remove(p.timeline)
	f, err := os.Open(p.timeline)
	if err != nil {
		return // the rank did not close its Comm, or is not a Go rank
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTimeline))
	if err == nil && len(b) > 0 {
		_ = a.conn.Send(&msg{Kind: msgTimeline, Rank: p.spec.Rank, Data: b})
	}
}

// clockProbe measures an agent's clock against the launcher's: the
// fastest of clockProbes round trips wins.
type clockProbe struct {
	sent   time.Time
	n      int
	offset time.Duration // agent minus launcher
	err    time.Duration // half the round trip
	ok     bool
}

const clockProbes = 5

// reply takes the agent's time, received at now, and says whether to
// probe again.
func (c *clockProbe) reply(agentNs int64, now time.Time) (again bool) {
	rtt := now.Sub(c.sent)
	mid := c.sent.Add(rtt / 2)
	if !c.ok || rtt/2 < c.err {
		c.offset, c.err, c.ok = time.Unix(0, agentNs).Sub(mid), rtt/2, true
	}
	c.n++
	return c.n < clockProbes
}

// writeTimeline merges the ranks' timelines into one trace at path.
func (j *job) writeTimeline(path string, timelines map[int][]byte, clocks map[*agentProc]*clockProbe) (string, error) {
	var tracks []inspect.Track
	worst := time.Duration(0)
	for _, a := range j.agents {
		cp := clocks[a]
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
			if cp != nil && cp.ok {
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
