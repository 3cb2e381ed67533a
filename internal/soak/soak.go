// Package soak strikes a running elastic gorun job with random faults from
// outside, as a user's cluster would, and reports whether the job healed:
// ranks killed (SIGKILL), frozen (SIGSTOP, for gorun to fence), struck
// again while they rejoin, and whole test hosts cut off the network for a
// few seconds.
//
// The job is examples/selftest's soak (-drill outside -until T) under
// gorun --elastic --max-restarts: every rank steps through exact-checked
// all-reduces until T and until the view holds every rank again, then all
// stop together and say DONE. Run starts it, strikes it for Config.For,
// waits for its end and reads its output: which faults it survived, the
// steps done, the ranks still out at the end, and the longest time any
// rank stayed out (from the strike to gorun's "rank R joined").
//
// The harness runs on the machine that holds the test hosts
// (scripts/testhosts.sh): it finds the ranks' processes in /proc by a mark
// of the run in their environment (gorun -x), and cuts a host by setting its network namespace's
// link down. It needs root.
package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	Kill   = "kill"   // SIGKILL of a random rank
	Stop   = "stop"   // SIGSTOP of a random rank (gorun fences it)
	Joiner = "joiner" // SIGKILL or SIGSTOP of a restarted rank still joining (a kill if none is)
	Cut    = "cut"    // a random host's link down for Config.CutFor
)

// Kinds are the fault kinds in the order reports list them.
var Kinds = []string{Kill, Stop, Joiner, Cut}

// Config is one soak run.
type Config struct {
	// Gorun is gorun's command up to the program: the binary and its
	// flags (--elastic --max-restarts R, -hostfile, --ssh ...).
	Gorun []string
	// Program is examples/selftest's binary, by absolute path (every
	// test host runs it from there); Run adds -drill outside -until T and
	// ProgramArgs.
	Program     string
	ProgramArgs []string
	// Ranks is the job's size.
	Ranks int
	// Hosts are the test hosts' network namespaces (for cuts); none
	// leaves cuts out.
	Hosts []string
	// Device is the hosts' link inside their namespaces ("eth0").
	Device string
	// For is how long faults strike; Settle is the time after it that
	// the job still runs (and must be whole at its end).
	For, Settle time.Duration
	// MinGap and MaxGap bound the random pause between faults.
	MinGap, MaxGap time.Duration
	// CutFor is a host cut's length.
	CutFor time.Duration
	// Kinds are the faults to strike, each once in every round of
	// len(Kinds) faults, in a random order (Kinds if empty).
	Kinds []string
	// Seed seeds the choices.
	Seed uint64
	// Dir is gorun's working directory.
	Dir string
	// Log, if set, hears each strike and the job's end.
	Log func(string)
}

// DefaultConfig is a 60 s soak with a fault every 2 to 5 s.
func DefaultConfig() Config {
	return Config{Device: "eth0", For: 60 * time.Second, Settle: 5 * time.Second,
		MinGap: 2 * time.Second, MaxGap: 5 * time.Second, CutFor: 3 * time.Second, Kinds: Kinds, Seed: 1}
}

// Report is what one run survived.
type Report struct {
	Faults   map[string]int // strikes by kind
	Restarts int            // ranks gorun restarted
	Exit     int            // gorun's exit code (-1: killed as hung)
	Done     int            // ranks that finished
	Steps    int            // steps the job completed (from the ranks' DONE)
	View     []int          // the final view
	Out      []int          // ranks of the job not in the final view
	// Longest is the longest time a struck rank stayed out, from its
	// strike to gorun's "rank R joined"; LongestRank is that rank.
	Longest     time.Duration
	LongestRank int
	Left        int // processes of Program still running 10 s after gorun's end
	Elapsed     time.Duration
	Stdout      string
	Stderr      string
}

// Healed reports whether the run ended as it should: gorun exited 0,
// every rank finished on a view that holds them all, nothing was left.
func (r Report) Healed(ranks int) error {
	switch {
	case r.Exit != 0:
		return fmt.Errorf("gorun exited %d", r.Exit)
	case len(r.Out) > 0:
		return fmt.Errorf("ranks %v were out at the end (view %v)", r.Out, r.View)
	case r.Done != ranks:
		return fmt.Errorf("%d of %d ranks finished", r.Done, ranks)
	case r.Left > 0:
		return fmt.Errorf("%d processes left behind", r.Left)
	}
	return nil
}

var (
	doneLine   = regexp.MustCompile(`^\[(\d+)\] DONE changes=\d+ view=\{\d+ \[([\d ]*)\]\} size=\d+ steps=(\d+)$`)
	joinedLine = regexp.MustCompile(`rank (\d+) joined`)
)

// run is one run's state shared by the strikes and the output readers.
type run struct {
	cfg     Config
	rng     *rand.Rand
	envMark string // KEY=VALUE in every rank's environment (gorun -x)

	mu       sync.Mutex
	outSince map[int]time.Time
	longest  time.Duration
	lrank    int
	restarts int
	started  chan struct{} // closed at rank 0's STEP 5
	once     sync.Once
	stdout   bytes.Buffer
	stderr   bytes.Buffer
}

// Run runs one soak and reports it. Its error is the harness's own (gorun
// would not start); how the job fared is in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Ranks < 1 || cfg.Program == "" || len(cfg.Gorun) == 0 {
		return Report{}, errors.New("soak: Config needs Gorun, Program and Ranks")
	}
	if !filepath.IsAbs(cfg.Program) {
		return Report{}, fmt.Errorf("soak: Program %q: want an absolute path", cfg.Program)
	}
	if cfg.MaxGap < cfg.MinGap || cfg.MinGap <= 0 {
		return Report{}, fmt.Errorf("soak: gaps %v..%v: want 0 < MinGap <= MaxGap", cfg.MinGap, cfg.MaxGap)
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = Kinds
	}
	if len(cfg.Hosts) == 0 {
		cfg.Kinds = slices.DeleteFunc(slices.Clone(cfg.Kinds), func(k string) bool { return k == Cut })
	}
	for _, k := range cfg.Kinds {
		if !slices.Contains(Kinds, k) {
			return Report{}, fmt.Errorf("soak: fault %q: want one of %v", k, Kinds)
		}
	}
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x50a4)), outSince: map[int]time.Time{}, started: make(chan struct{})}
	start := time.Now()
	until := start.Add(cfg.For + cfg.Settle)
	// The ranks carry a mark of this run in their environment, by which
	// procs finds them (their executable's path is not enough: inside a
	// chroot, /proc shows it from another root).
	r.envMark = fmt.Sprintf("GORUN_SOAK_RUN=%d-%x", os.Getpid(), r.rng.Uint64())
	args := append(slices.Clone(cfg.Gorun[1:]), "-x", r.envMark, cfg.Program, "-drill", "outside", "-until", strconv.FormatInt(until.UnixNano(), 10))
	args = append(args, cfg.ProgramArgs...)
	cmd := exec.Command(cfg.Gorun[0], args...)
	cmd.Dir = cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Report{}, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return Report{}, err
	}
	if err := cmd.Start(); err != nil {
		return Report{}, fmt.Errorf("soak: starting gorun: %w", err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); r.read(stdout, &r.stdout) }()
	go func() { defer readers.Done(); r.read(stderr, &r.stderr) }()
	exited := make(chan struct{})
	go func() { readers.Wait(); _ = cmd.Wait(); close(exited) }()

	rep := Report{Faults: map[string]int{}}
	limit := time.NewTimer(cfg.For + cfg.Settle + 60*time.Second + 60*time.Second) // MaxOut, and a minute to start
	defer limit.Stop()
	hung := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	select {
	case <-r.started:
	case <-exited:
	case <-limit.C:
		hung()
	case <-ctx.Done():
		hung()
	}
	r.strike(ctx, &rep, time.Now().Add(cfg.For), exited)
	select {
	case <-exited:
	case <-limit.C:
		r.logf("gorun did not end in time: ending it")
		hung()
	case <-ctx.Done():
		hung()
	}
	rep.Elapsed = time.Since(start)
	rep.Exit = cmd.ProcessState.ExitCode()
	rep.Left = r.left()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Restarts, rep.Longest, rep.LongestRank = r.restarts, r.longest, r.lrank
	rep.Stdout, rep.Stderr = r.stdout.String(), r.stderr.String()
	finalView := map[int]bool{}
	for _, line := range strings.Split(rep.Stdout, "\n") {
		m := doneLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rep.Done++
		rep.Steps, _ = strconv.Atoi(m[3])
		rep.View = nil
		for _, f := range strings.Fields(m[2]) {
			n, _ := strconv.Atoi(f)
			rep.View = append(rep.View, n)
			finalView[n] = true
		}
	}
	for i := range cfg.Ranks {
		if !finalView[i] {
			rep.Out = append(rep.Out, i)
		}
	}
	r.logf("gorun exited %d after %v: %d ranks done, out %v", rep.Exit, rep.Elapsed.Round(time.Millisecond), rep.Done, rep.Out)
	return rep, nil
}

// read copies one of gorun's streams into into, line by line, noting
// rank 0's start and gorun's restarts and joins as they come.
func (r *run) read(from io.Reader, into *bytes.Buffer) {
	sc := bufio.NewScanner(from)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		now := time.Now()
		r.mu.Lock()
		into.WriteString(line)
		into.WriteByte('\n')
		if strings.Contains(line, "restarting it (restart") {
			r.restarts++
		}
		if m := joinedLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(line, "gorun:") {
			rank, _ := strconv.Atoi(m[1])
			if since, ok := r.outSince[rank]; ok {
				if d := now.Sub(since); d > r.longest {
					r.longest, r.lrank = d, rank
				}
				delete(r.outSince, rank)
			}
		}
		r.mu.Unlock()
		if strings.HasPrefix(line, "[0] STEP 5") {
			r.once.Do(func() { close(r.started) })
		}
	}
}

// strike strikes until end (or gorun's exit), one fault per random gap,
// each kind of r.cfg.Kinds once per round in a random order.
func (r *run) strike(ctx context.Context, rep *Report, end time.Time, exited <-chan struct{}) {
	var round []string
	var cuts sync.WaitGroup
	defer cuts.Wait()
	for {
		gap := r.cfg.MinGap + time.Duration(r.rng.Int64N(int64(r.cfg.MaxGap-r.cfg.MinGap)+1))
		if time.Now().Add(gap).After(end) {
			return
		}
		select {
		case <-time.After(gap):
		case <-exited:
			return
		case <-ctx.Done():
			return
		}
		if len(round) == 0 {
			round = slices.Clone(r.cfg.Kinds)
			r.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		kind := round[0]
		round = round[1:]
		if kind == Cut {
			host := r.cfg.Hosts[r.rng.IntN(len(r.cfg.Hosts))]
			ranks, err := r.cut(host, &cuts)
			if err != nil {
				r.logf("cut %s: %v", host, err)
				continue
			}
			rep.Faults[Cut]++
			r.logf("cut %s (ranks %v) for %v", host, ranks, r.cfg.CutFor)
			continue
		}
		procs := r.procs()
		var pick []proc
		switch kind {
		case Joiner:
			r.mu.Lock()
			for _, p := range procs {
				if _, out := r.outSince[p.rank]; out && !p.stopped {
					pick = append(pick, p)
				}
			}
			r.mu.Unlock()
		}
		if len(pick) == 0 {
			for _, p := range procs {
				if !p.stopped {
					pick = append(pick, p)
				}
			}
		}
		if len(pick) == 0 {
			r.logf("%s: no running rank to strike", kind)
			continue
		}
		p := pick[r.rng.IntN(len(pick))]
		sig := syscall.SIGKILL
		if kind == Stop || kind == Joiner && r.rng.IntN(2) == 0 {
			sig = syscall.SIGSTOP
		}
		if err := syscall.Kill(p.pid, sig); err != nil {
			continue // gone already
		}
		rep.Faults[kind]++
		r.mark(p.rank)
		r.logf("%s: rank %d (pid %d) %v", kind, p.rank, p.pid, sig)
	}
}

// mark notes that rank was struck now, unless it is out already.
func (r *run) mark(rank int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, out := r.outSince[rank]; !out {
		r.outSince[rank] = time.Now()
	}
}

// cut sets host's link down now and up after CutFor, and returns the
// ranks running there.
func (r *run) cut(host string, wg *sync.WaitGroup) ([]int, error) {
	ino, err := nsInode(filepath.Join("/run/netns", host))
	if err != nil {
		return nil, err
	}
	var ranks []int
	for _, p := range r.procs() {
		if p.netns == ino {
			ranks = append(ranks, p.rank)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", host, "ip", "link", "set", r.cfg.Device, "down").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	for _, rank := range ranks {
		r.mark(rank)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(r.cfg.CutFor)
		if out, err := exec.Command("ip", "netns", "exec", host, "ip", "link", "set", r.cfg.Device, "up").CombinedOutput(); err != nil {
			r.logf("cut %s: link up: %v: %s", host, err, bytes.TrimSpace(out))
		}
	}()
	slices.Sort(ranks)
	return ranks, nil
}

// proc is one of the job's rank processes.
type proc struct {
	pid, rank int
	netns     uint64
	stopped   bool
}

// procs lists the running rank processes of this run (by their mark) and
// their ranks.
func (r *run) procs() []proc {
	ents, _ := os.ReadDir("/proc")
	var ps []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		env, err := os.ReadFile(dir + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(kv []byte) bool { return string(kv) == r.envMark }) {
			continue
		}
		rank := -1
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("GORUN_RANK=")); ok {
				rank, _ = strconv.Atoi(string(v))
			}
		}
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil || rank < 0 {
			continue
		}
		// The state follows the command's closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
			continue
		}
		ino, _ := nsInode(dir + "/ns/net")
		ps = append(ps, proc{pid: pid, rank: rank, netns: ino, stopped: stat[i+2] == 'T'})
	}
	return ps
}

// left waits up to 10 s for the job's processes to go and counts those
// that stay.
func (r *run) left() int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := len(r.procs())
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nsInode is the inode of a network namespace file.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		r.cfg.Log(fmt.Sprintf(format, args...))
	}
}
