package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher/proto"
)

// What the agent tells the launcher about its ranks beyond their output:
// their status pages (for the stall inspector and the status line), their
// goroutine dumps before a kill, their timelines, and OOM kills.

// statusEvery is how often the agent reads its ranks' status pages.
const statusEvery = 500 * time.Millisecond

// maxTimeline caps a rank's timeline file.
const maxTimeline = 64 << 20

// pagePath is where rank's status page lives on its host: in /dev/shm,
// named like the job's segments so that the agent's sweep removes it too.
// A restarted rank (restart k > 0) has a page of its own.
func pagePath(jobID string, rank, restart int) string {
	dir := jobenv.ShmDir
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	name := "status-" + strconv.Itoa(rank)
	if restart > 0 {
		name += "-restart-" + strconv.Itoa(restart)
	}
	return filepath.Join(dir, jobenv.ShmName(jobID, name))
}

// timelinePath is where rank writes its timeline on its host; a
// restarted rank (restart k > 0) writes a file of its own.
func timelinePath(jobID string, rank, restart int) string {
	if restart > 0 {
		return filepath.Join(os.TempDir(), fmt.Sprintf("gorun-%s-timeline-%d-restart-%d.jsonl", jobID, rank, restart))
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("gorun-%s-timeline-%d.jsonl", jobID, rank))
}

// watchPages sends every rank's status page to the launcher when it
// changes, until stop is closed.
func (a *agent) watchPages(stop <-chan struct{}) {
	last := map[string]inspect.State{} // by page: a restarted rank has its own
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
			a.sendPage(p, last)
		}
	}
}

// sendPage sends p's status page if it changed since last.
func (a *agent) sendPage(p *rankProc, last map[string]inspect.State) {
	if p.page == "" {
		return
	}
	b, err := os.ReadFile(p.page)
	if err != nil {
		return
	}
	s, err := inspect.ParsePage(b)
	if err != nil {
		return
	}
	// The page reads no clock: a state is as old as the first reading
	// that showed it.
	s.Since = time.Time{}
	if old, ok := last[p.page]; ok && old == s {
		return
	}
	last[p.page] = s
	a.mu.Lock()
	p.declared = s.Pid
	a.mu.Unlock()
	_ = a.conn.Send(&proto.Message{Kind: proto.MsgStatus, Rank: p.spec.Rank, Status: &proto.Status{State: s}})
}

// dumpRanks asks every running rank that declared a status page (a Go
// program using gorun's collectives) for a goroutine dump: SIGQUIT, after
// which its stderr goes to the launcher as proto.StreamDump.
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
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgTimeline, Rank: p.spec.Rank, Data: b})
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
