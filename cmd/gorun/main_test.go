package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher"
)

// The test binary is also gorun: with GORUN_TEST_AS_GORUN=1, or when it is
// started as an agent, it runs main's code instead of the tests; started
// as `__elasticrank`, it is a rank of the --elastic tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == elasticRankArg {
		os.Exit(elasticRank(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == shareRankArg {
		os.Exit(shareRank(os.Args[2:]))
	}
	if os.Getenv("GORUN_TEST_AS_GORUN") == "1" || len(os.Args) > 1 && (os.Args[1] == launcher.AgentCommandName || os.Args[1] == launcher.HubCommandName || os.Args[1] == launcher.SentinelCommandName) {
		os.Exit(run(os.Args))
	}
	os.Exit(m.Run())
}

type result struct {
	stdout, stderr string
	code           int
}

// gorun starts the test binary as gorun and returns the command, not yet
// started, with its output captured.
func gorunCmd(t *testing.T, args ...string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	proctest.SkipShort(t)
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GORUN_TEST_AS_GORUN=1", "GORACE=atexit_sleep_ms=0")
	var out, errb proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func gorun(t *testing.T, args ...string) result {
	t.Helper()
	cmd, out, errb := gorunCmd(t, args...)
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("gorun %v did not finish in 60s; stderr:\n%s", args, errb)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// marker makes a string unique to one test, to find its processes.
func marker(t *testing.T) string {
	return fmt.Sprintf("gorunmark_%s_%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

// leftovers lists processes whose command line holds mark.
func leftovers(mark string) []string {
	out, _ := exec.Command("pgrep", "-af", mark).Output()
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.Contains(l, "pgrep") {
			procs = append(procs, l)
		}
	}
	return procs
}

// noLeftovers waits briefly for processes to be reaped, then fails if any
// process with mark is still alive.
func noLeftovers(t *testing.T, mark string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := leftovers(mark)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived gorun:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEnvironment(t *testing.T) {
	r := gorun(t, "-np", "3", "-x", "FOO=bar baz", "-x", "HOME", "sh", "-c",
		`echo "R=$GORUN_RANK S=$GORUN_SIZE L=$GORUN_LOCAL_RANK LS=$GORUN_LOCAL_SIZE N=$GORUN_NODE_RANK J=$GORUN_JOB_ID `+
			`T=$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE M=$MASTER_ADDR:$MASTER_PORT O=$OMPI_COMM_WORLD_RANK/$OMPI_COMM_WORLD_SIZE/$OMPI_COMM_WORLD_LOCAL_RANK `+
			`F=$FOO H=$HOME SECRET=${#GORUN_JOB_SECRET} P=$GORUN_PEERS"`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] R=(\d) S=3 L=(\d) LS=3 N=0 J=([0-9a-f]{16}) T=(\d)/3/(\d)/3 M=127\.0\.0\.1:(\d+) O=(\d)/3/(\d) F=bar baz H=(\S+) SECRET=(\d+) P=(\S+)$`)
	seen := map[string]bool{}
	jobs := map[string]bool{}
	ports := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q does not match", line)
		}
		for _, same := range []string{m[2], m[3], m[5], m[6], m[8], m[9]} {
			if same != m[1] {
				t.Fatalf("rank variables disagree in %q", line)
			}
		}
		if m[10] != os.Getenv("HOME") {
			t.Fatalf("-x HOME not passed: %q", line)
		}
		if n, _ := strconv.Atoi(m[11]); n < 32 {
			t.Fatalf("job secret too short: %q", line)
		}
		if len(strings.Split(m[12], ",")) != 3 {
			t.Fatalf("GORUN_PEERS should list 3 ranks: %q", line)
		}
		seen[m[1]] = true
		jobs[m[4]] = true
		ports[m[7]] = true
	}
	if len(seen) != 3 || len(jobs) != 1 || len(ports) != 1 {
		t.Fatalf("want ranks 0-2 with one job id and master port, got %v %v %v", seen, jobs, ports)
	}
}

// TestOutputWholeLines has every rank write long lines as fast as it can;
// each line must come out whole, behind its own rank's tag.
func TestOutputWholeLines(t *testing.T) {
	const lines = 300
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do printf "rank%%s-line%%s-%%s\n" $GORUN_RANK $i "$(printf '%%*s' 2000 '' | tr ' ' x)"; i=$((i+1)); done`, lines)
	r := gorun(t, "-np", "4", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] rank(\d)-line(\d+)-(x+)$`)
	next := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || m[1] != m[2] || len(m[4]) != 2000 {
			t.Fatalf("mangled line (%d bytes): %.80q", len(line), line)
		}
		if n, _ := strconv.Atoi(m[3]); n != next[m[1]] {
			t.Fatalf("rank %s: line %d out of order (want %d)", m[1], n, next[m[1]])
		}
		next[m[1]]++
	}
	for r := range 4 {
		if next[strconv.Itoa(r)] != lines {
			t.Fatalf("rank %d: %d lines, want %d", r, next[strconv.Itoa(r)], lines)
		}
	}
	untagged := gorun(t, "-np", "2", "--tag-output=false", "echo", "plain")
	if untagged.stdout != "plain\nplain\n" {
		t.Fatalf("--tag-output=false gave %q", untagged.stdout)
	}
}

func TestFailingRankEndsJob(t *testing.T) {
	mark := marker(t)
	start := time.Now()
	r := gorun(t, "-np", "4", "sh", "-c",
		`if [ $GORUN_RANK = 2 ]; then echo "about to fail" >&2; sleep 0.2; exit 7; fi; sleep 300 # `+mark)
	if r.code != 7 {
		t.Fatalf("exit %d, want 7; stderr:\n%s", r.code, r.stderr)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("job took %v to end after a rank failed", el)
	}
	for _, want := range []string{"rank 2 on localhost (pid ", "exited with code 7", "about to fail"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	noLeftovers(t, mark)
}

func TestKilledRankExitCode(t *testing.T) {
	mark := marker(t)
	r := gorun(t, "-np", "2", "sh", "-c", `if [ $GORUN_RANK = 1 ]; then kill -9 $$; fi; sleep 300 # `+mark)
	if r.code != 128+9 {
		t.Fatalf("exit %d, want 137; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "rank 1") || !strings.Contains(r.stderr, "signal 9") {
		t.Fatalf("summary: %s", r.stderr)
	}
	noLeftovers(t, mark)
}

// TestInterruptForwarded sends SIGINT to gorun; ranks and their children
// must be gone, SIGTERM-ignoring ones by SIGKILL after the grace period.
func TestInterruptForwarded(t *testing.T) {
	mark := marker(t)
	cmd, out, errb := gorunCmd(t, "-np", "3", "--grace", "1s", "sh", "-c",
		`trap "echo caught INT; exit 5" INT; if [ $GORUN_RANK = 1 ]; then trap "" INT TERM; fi; sleep 300 & echo started; wait # `+mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 20*time.Second, func() bool { return strings.Count(out.String(), "started") == 3 }, "ranks to start")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+2 {
		t.Fatalf("exit %d (%v), want 130; stderr:\n%s", code, err, errb)
	}
	if !strings.Contains(out.String(), "caught INT") {
		t.Fatalf("ranks never saw SIGINT: %s", out)
	}
	noLeftovers(t, mark)
}

// TestLauncherKilled: gorun dies by SIGKILL; the agents see their stream
// end and take the ranks with them, and remove the shared memory files
// the ranks left (as ranks killed while setting up shared memory would).
func TestLauncherKilled(t *testing.T) {
	mark := marker(t)
	cmd, out, _ := gorunCmd(t, "-np", "2", "--grace", "1s", "sh", "-c",
		`f=`+jobenv.ShmDir+`/`+jobenv.ShmPrefix+`$GORUN_JOB_ID-$GORUN_RANK-litter; echo x > $f; echo "up $f"; sleep 300 # `+mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 20*time.Second, func() bool { return strings.Count(out.String(), "up ") == 2 }, "ranks to start")
	files := regexp.MustCompile(`up (\S+)`).FindAllStringSubmatch(out.String(), -1)
	for _, f := range files {
		if _, err := os.Stat(f[1]); err != nil {
			t.Fatalf("a rank's file is not there: %v", err)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	noLeftovers(t, mark)
	proctest.WaitFor(t, 10*time.Second, func() bool {
		for _, f := range files {
			if _, err := os.Stat(f[1]); err == nil {
				return false
			}
		}
		return true
	}, "the agent to remove the job's shared memory files")
}

func TestTimeout(t *testing.T) {
	mark := marker(t)
	r := gorun(t, "-np", "2", "--timeout", "500ms", "sh", "-c", "sleep 300 # "+mark)
	if r.code != launcher.ExitTimeout || !strings.Contains(r.stderr, "timed out after 500ms") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	noLeftovers(t, mark)
}

func TestStdinGoesToRankZero(t *testing.T) {
	cmd, out, errb := gorunCmd(t, "-np", "2", "sh", "-c", `if [ $GORUN_RANK = 0 ]; then cat; else cat; echo "rank1 done"; fi`)
	cmd.Stdin = strings.NewReader("line one\nline two\n")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, errb)
	}
	want := "[0] line one\n[0] line two\n"
	got := ""
	for _, l := range strings.SplitAfter(out.String(), "\n") {
		if strings.HasPrefix(l, "[0]") {
			got += l
		} else if l != "" && l != "[1] rank1 done\n" {
			t.Fatalf("unexpected line %q", l)
		}
	}
	if got != want {
		t.Fatalf("rank 0 read %q, want %q", got, want)
	}
}

// countingReader is an endless stdin that counts what was read of it.
type countingReader struct{ n atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// TestStdinFlowControl: rank 0 does not read its stdin for a while; gorun
// stops reading its own stdin once a window of bytes waits for rank 0,
// instead of the agent queueing all of it. Then rank 0 reads everything
// it reads arrives whole, and the job ends with it.
func TestStdinFlowControl(t *testing.T) {
	src := &countingReader{}
	cmd, out, errb := gorunCmd(t, "-np", "1", "sh", "-c", `sleep 2; head -c 3000000 | wc -c`)
	cmd.Stdin = src
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(1500 * time.Millisecond)
	if n := src.n.Load(); n > 4<<20 {
		t.Fatalf("gorun read %d bytes of stdin for a rank that reads none yet (window 1 MiB)", n)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %s", err, errb)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running: %s", errb)
	}
	if !strings.Contains(out.String(), "[0] 3000000") {
		t.Fatalf("rank 0 read %q, want 3000000 bytes", out.String())
	}
}

func TestOutputFiles(t *testing.T) {
	dir := t.TempDir()
	r := gorun(t, "-np", "2", "--output-filename", dir, "sh", "-c", `echo out$GORUN_RANK; echo err$GORUN_RANK >&2`)
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	for rank := range 2 {
		for _, s := range []string{"stdout", "stderr"} {
			b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(rank), s))
			if err != nil {
				t.Fatal(err)
			}
			want := s[3:] + strconv.Itoa(rank) + "\n"
			if string(b) != want {
				t.Fatalf("rank %d %s = %q, want %q", rank, s, b, want)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	hf := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hf, []byte("localhost slots=2\nlocalhost slots=two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-np", "2", "./no-such-program"}, "localhost: ./no-such-program: no such file"},
		{[]string{"-np", "1", "no-such-command-xyz"}, "no-such-command-xyz: command not found in PATH"},
		{[]string{"-hostfile", hf, "true"}, hf + `:2: slots: not a number "two"`},
		{[]string{"-H", "localhost:2", "-np", "3", "true"}, "--oversubscribe"},
		{[]string{"--map-by", "socket", "true"}, `--map-by "socket"`},
		{[]string{"-x", "GORUN_SURELY_UNSET_VAR", "true"}, "not set"},
		{[]string{"--wdir", "/no/such/dir", "true"}, "wdir /no/such/dir: no such directory"},
		{[]string{"--strategy", "tree", "true"}, `--strategy "tree"`},
		{[]string{"--wire", "fp8", "true"}, `--wire: reduce: unknown wire format "fp8"`},
	}
	for _, c := range cases {
		r := gorun(t, c.args...)
		if r.code != launcher.ExitLaunchFailed || !strings.Contains(r.stderr, c.want) {
			t.Errorf("gorun %v: exit %d, stderr %q; want exit 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// TestWireFlag: --wire reaches every rank as GORUN_WIRE, which the
// collective package reads (collective's tests check what it does).
func TestWireFlag(t *testing.T) {
	r := gorun(t, "--wire", "bf16", "-np", "2", "sh", "-c", "echo wire=$GORUN_WIRE")
	if r.code != 0 || strings.Count(r.stdout, "wire=bf16") != 2 {
		t.Fatalf("exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestExactFlag: --exact reaches every rank as GORUN_EXACT=1, which the
// collective package reads (collective's tests check what it does).
func TestExactFlag(t *testing.T) {
	r := gorun(t, "--exact", "-np", "2", "sh", "-c", "echo exact=$GORUN_EXACT")
	if r.code != 0 || strings.Count(r.stdout, "exact=1") != 2 {
		t.Fatalf("exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = gorun(t, "-np", "1", "sh", "-c", "echo exact=${GORUN_EXACT:-unset}")
	if r.code != 0 || !strings.Contains(r.stdout, "exact=unset") {
		t.Fatalf("without --exact: exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestGOMAXPROCS: ranks get an equal share of the CPUs unless the user
// sets GOMAXPROCS.
func TestGOMAXPROCS(t *testing.T) {
	for np := 1; np <= 3; np++ {
		r := gorun(t, "-np", strconv.Itoa(np), "sh", "-c", `echo "G=$GOMAXPROCS"`)
		want := fmt.Sprintf("G=%d", max(1, runtime.NumCPU()/np))
		if own := os.Getenv("GOMAXPROCS"); own != "" {
			want = "G=" + own // the user's setting wins
		}
		if r.code != 0 || strings.Count(r.stdout, want+"\n") != np {
			t.Fatalf("np %d: want %q on every rank, got %q", np, want, r.stdout)
		}
	}
	r := gorun(t, "-np", "2", "-x", "GOMAXPROCS=7", "sh", "-c", `echo "G=$GOMAXPROCS"`)
	if strings.Count(r.stdout, "G=7\n") != 2 {
		t.Fatalf("-x GOMAXPROCS=7 not honoured: %q", r.stdout)
	}
}

func TestOversubscribeAndWdir(t *testing.T) {
	dir := t.TempDir()
	r := gorun(t, "-H", "localhost:1", "-np", "3", "--oversubscribe", "--wdir", dir, "pwd")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	if strings.Count(r.stdout, dir+"\n") != 3 {
		t.Fatalf("want 3 ranks in %s, got %q", dir, r.stdout)
	}
}

// TestHubsFlag: --hubs 2 starts two hub processes (tagged [hub N]) whose
// addresses every rank gets in GORUN_HUBS; they stop when the ranks are
// done (here the ranks never connect), and nothing is left behind.
func TestHubsFlag(t *testing.T) {
	mark := marker(t)
	r := gorun(t, "-np", "3", "--hubs", "2", "--strategy", "hub", "sh", "-c", `echo "H=$GORUN_HUBS S=$GORUN_STRATEGY"; : `+mark)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	re := regexp.MustCompile(`(?m)^\[\d\] H=(127\.0\.0\.1:\d+),(127\.0\.0\.1:\d+) S=hub$`)
	m := re.FindAllStringSubmatch(r.stdout, -1)
	if len(m) != 3 || m[0][1] == m[0][2] || m[1][1] != m[0][1] || m[2][2] != m[0][2] {
		t.Fatalf("ranks did not all get the same two hub addresses:\n%s", r.stdout)
	}
	noLeftovers(t, mark)
	if r := gorun(t, "-np", "1", "--hubs", "-1", "true"); r.code == 0 || !strings.Contains(r.stderr, "--hubs -1") {
		t.Fatalf("--hubs -1: exit %d: %s", r.code, r.stderr)
	}
}

// TestBench runs `gorun bench` on 3 local ranks with 2 dedicated hubs: it
// must report both strategies for every size, and the bytes through the
// busiest hub must match the cost model (2·N·S/K plus headers).
func TestBench(t *testing.T) {
	r := gorun(t, "bench", "-np", "3", "--hubs", "2", "--sizes", "4KiB,1MiB", "--target", "100ms", "--format", "csv")
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "bytes,ranks,hubs,ring_us") {
		t.Fatalf("csv:\n%s", r.stdout)
	}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		var bytes, ranks, hubs int
		var ringUS, hubUS float64
		var busiest, model int64
		fmt.Sscan(f[0], &bytes)
		fmt.Sscan(f[1], &ranks)
		fmt.Sscan(f[2], &hubs)
		fmt.Sscan(f[3], &ringUS)
		fmt.Sscan(f[5], &hubUS)
		fmt.Sscan(f[9], &busiest)
		fmt.Sscan(f[10], &model)
		if ranks != 3 || hubs != 2 || ringUS <= 0 || hubUS <= 0 {
			t.Fatalf("bad row %q", l)
		}
		// The busiest hub carries between an even share of 2·N·S
		// (partitions spread over the K hubs) and all of it (one
		// partition, on one hub), as the model says for the partition
		// size the round takes; 4 KiB is one partition.
		lo, hi := int64(2*ranks*bytes/hubs), int64(2*ranks*bytes)
		if bytes <= 4096 {
			lo = hi
		}
		if model < lo || model > hi || busiest < model || float64(busiest) > float64(model)*1.05+4096 {
			t.Fatalf("%d bytes: busiest hub moved %d, model %d (want the model within [%d, %d], and the busiest hub at it)", bytes, busiest, model, lo, hi)
		}
	}
	if r := gorun(t, "bench", "--sizes", "3"); r.code == 0 || !strings.Contains(r.stderr, "whole number of float32s") {
		t.Fatalf("bad size: exit %d: %s", r.code, r.stderr)
	}
}

// TestForeignKill: a rank killed with SIGKILL by someone other than gorun
// (the OOM killer, an administrator) is labelled so in the summary.
func TestForeignKill(t *testing.T) {
	mark := marker(t)
	cmd, out, errb := gorunCmd(t, "-np", "2", "--grace", "1s", "sh", "-c", `echo "pid $$"; sleep 100 # `+mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	proctest.WaitFor(t, 20*time.Second, func() bool {
		m := regexp.MustCompile(`\[1\] pid (\d+)`).FindStringSubmatch(out.String())
		if m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return m != nil
	}, "rank 1's pid")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+9 || !strings.Contains(errb.String(), "rank 1 on localhost (pid "+strconv.Itoa(pid)+") was killed by signal 9 (killed) (not by gorun; out of memory?)") {
		t.Fatalf("exit %d:\n%s", code, errb)
	}
	// Rank 0, which gorun stopped, is not labelled.
	if strings.Count(errb.String(), "not by gorun") != 1 {
		t.Fatalf("more than one rank labelled:\n%s", errb)
	}
	noLeftovers(t, mark)
}

// TestOOMLabel: a rank the kernel's OOM killer ends (gorun runs in a
// memory cgroup of 384 MiB (room for gorun and its agent under -race), the rank fills a shell variable) is labelled
// so. Needs root and a writable cgroup v1 memory controller.
func TestOOMLabel(t *testing.T) {
	proctest.SkipShort(t)
	cg := filepath.Join("/sys/fs/cgroup/memory", "gorun-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("no cgroup v1 memory controller to write (%v)", err)
	}
	defer os.Remove(cg)
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("402653184"), 0o644); err != nil {
		t.Skipf("cannot limit memory: %v", err)
	}
	_ = os.WriteFile(filepath.Join(cg, "memory.swappiness"), []byte("0"), 0o644)
	cmd, _, errb := gorunCmd(t, "-np", "1", "sh", "-c", `x=$(head -c 1500000000 /dev/zero | tr '\0' a); echo ${#x}`)
	// The test binary, as gorun, moves itself into the cgroup first.
	cmd.Path, cmd.Args = "/bin/sh", append([]string{"sh", "-c", `echo $$ > "$0"/cgroup.procs && exec "$@"`, cg, os.Args[0]}, cmd.Args[1:]...)
	_ = cmd.Run()
	if !strings.Contains(errb.String(), "(by the kernel's OOM killer: the memory cgroup counted an oom_kill)") {
		t.Fatalf("exit %d, no OOM label:\n%s", cmd.ProcessState.ExitCode(), errb)
	}
}

// TestAgentKilled: the agent of a job whose ranks started children of
// their own (as a DataLoader's workers are) is SIGKILLed. Its sentinel
// ends the ranks' process groups, so no child outlives it; gorun exits
// non-zero and says the agent ended while running the job.
func TestAgentKilled(t *testing.T) {
	mark := marker(t)
	loop := `sh -c 'while :; do sleep 1; done # ` + mark + `'`
	cmd, out, errb := gorunCmd(t, "-np", "2", "--grace", "1s", "sh", "-c", loop+" & "+loop+" & echo up $GORUN_JOB_ID; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	proctest.WaitFor(t, 20*time.Second, func() bool { return strings.Count(out.String(), "up") == 2 }, "ranks to start")
	// gorun, the two ranks and their four children hold the mark.
	if n := len(leftovers(mark)); n != 7 {
		t.Fatalf("%d processes with the mark, want 7:\n%s", n, strings.Join(leftovers(mark), "\n"))
	}
	pids, err := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid), "-f", launcher.AgentCommandName).Output()
	agents := strings.Fields(string(pids))
	if err != nil || len(agents) != 1 {
		t.Fatalf("the agent: %q %v", pids, err)
	}
	pid, _ := strconv.Atoi(agents[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("gorun exited 0 after its agent was killed:\n%s", errb.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("gorun still running 30 s after its agent was killed:\n%s", errb.String())
	}
	if !strings.Contains(errb.String(), "agent ended while running the job") {
		t.Fatalf("gorun did not say what happened:\n%s", errb.String())
	}
	noLeftovers(t, mark)
	// The job's files on this host (status pages, Open MPI's session
	// directory) went with it too.
	job := regexp.MustCompile(`up (\S+)`).FindStringSubmatch(out.String())[1]
	proctest.WaitFor(t, 5*time.Second, func() bool {
		left, _ := filepath.Glob(jobenv.ShmPattern(jobenv.ShmDir, job))
		return len(left) == 0
	}, "the sentinel to remove the job's files")
}

// TestMapBySpeed: a real job placed by the hostfile's speed=: of 4 ranks
// on two hosts of this machine, the one three times as fast takes 3.
func TestMapBySpeed(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hf, []byte("localhost slots=4 speed=3\n127.0.0.1 slots=4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gorun(t, "-hostfile", hf, "--map-by", "speed", "-np", "4", "sh", "-c", "echo node=$GORUN_NODE_RANK local_size=$GORUN_LOCAL_SIZE")
	if r.code != 0 || strings.Count(r.stdout, "node=0 local_size=3") != 3 || strings.Count(r.stdout, "node=1 local_size=1") != 1 {
		t.Fatalf("exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
