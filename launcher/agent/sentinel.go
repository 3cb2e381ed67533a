package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A rank runs in a process group of its own, and whatever it starts (a
// DataLoader's workers, `sh -c 'a & b & wait'`) stays in that group. The
// agent ends the group when the rank ends, and ends its ranks when the
// launcher goes away; a rank also dies with the agent (Pdeathsig). But if
// the agent itself is killed outright (SIGKILL, the OOM killer), nothing
// of it runs any more, and the rank's children would outlive it: the
// kernel signals only the rank. So each agent starts a sentinel, a small
// process of its own (gorun __sentinel, in a process group of its own, so
// that signals for the agent's group miss it), and tells it each rank's
// group as the rank starts ("+pgid") and when its group is gone ("-pgid"),
// and the job's files on this host ("~glob", "@path": shared memory
// segments, status pages, Open MPI's session directory). When the agent's
// end of the pipe closes, however the agent ended, the sentinel SIGKILLs
// every group it still holds, removes those files, and exits. After a
// normal end there are none left to kill or remove.
//
// Process groups, not a subreaper: the sentinel is no ancestor of the
// ranks, and a subreaper that is (the agent) is what dies here. A process
// that leaves its group (setsid: a daemon) escapes; a cgroup would catch
// it, but needs privileges or a delegated cgroup tree that a user's shell
// on a cluster node rarely has.

// sentinel is the agent's end of the pipe to its sentinel. Its methods do
// nothing on a nil sentinel.
type sentinel struct {
	mu  sync.Mutex
	w   io.WriteCloser
	cmd *exec.Cmd
}

// startSentinel starts the sentinel command with a pipe to its stdin.
func startSentinel(argv []string) (*sentinel, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the sentinel: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped when it exits
	return &sentinel{w: w, cmd: cmd}, nil
}

func (s *sentinel) send(line string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		_, _ = io.WriteString(s.w, line+"\n")
	}
}

// add tells the sentinel of a rank's process group.
func (s *sentinel) add(pgid int) { s.send("+" + strconv.Itoa(pgid)) }

// done tells the sentinel that a group is gone.
func (s *sentinel) done(pgid int) { s.send("-" + strconv.Itoa(pgid)) }

// removeGlob and removeAll tell the sentinel of the job's files, to remove
// if the agent dies (names that start with "gorun-" only).
func (s *sentinel) removeGlob(pattern string) { s.send("~" + pattern) }
func (s *sentinel) removeAll(path string)     { s.send("@" + path) }

// close closes the pipe: the sentinel ends the groups it still holds (none
// after a normal end) and exits.
func (s *sentinel) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		_ = s.w.Close()
		s.w = nil
	}
}

// Sentinel is the body of `gorun __sentinel`: it reads "+pgid", "-pgid",
// "~glob" and "@path" lines from in until in ends, then SIGKILLs every
// process group it still holds (twice, a moment apart, for processes
// forked while the first signal went out) and removes the files. A
// hang-up is not for it.
func Sentinel(in io.Reader) error {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	held := map[int]bool{}
	var files []string // globs
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		if line[0] == '~' || line[0] == '@' {
			// Only the job's own names: gorun-<job>-...
			if name := line[1:]; filepath.IsAbs(name) && strings.HasPrefix(filepath.Base(name), "gorun-") {
				if line[0] == '@' {
					name = globQuote(name)
				}
				files = append(files, name)
			}
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			held[pgid] = true
		case '-':
			delete(held, pgid)
		}
	}
	// After a normal end it holds nothing, and exits at once: the agent's
	// output, which it shares, ends with it (a second pass every time
	// kept every job 200 ms longer).
	for pass := 0; pass < 2 && len(held) > 0; pass++ {
		if pass > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		for pgid := range held {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	for _, g := range files {
		m, _ := filepath.Glob(g)
		for _, f := range m {
			_ = os.RemoveAll(f)
		}
	}
	return nil
}

// globQuote escapes the glob metacharacters of a literal path.
func globQuote(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
