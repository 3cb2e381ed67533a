package e2e

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

// rig describes the running test hosts.
type rig struct {
	dir      string   // TESTNET_DIR: scripts/testhosts.sh's state
	hosts    []string // host addresses, h1 first
	ssh      string   // the ssh command for --ssh
	gorun    string   // the gorun binary under test
	testbins string   // where helper binaries are built
}

var (
	theRig  *rig
	skipWhy string
)

const hosts = 4

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if testing.Short() {
			skipWhy = "-short"
			return m.Run()
		}
		r, cleanup, err := setup()
		if err != nil {
			if os.Getenv("GORUN_REQUIRE_TESTNET") == "1" {
				fmt.Fprintf(os.Stderr, "e2e: testnet required but unavailable: %v\n", err)
				return 1
			}
			skipWhy = err.Error()
		}
		theRig = r
		defer cleanup()
		return m.Run()
	}()
	os.Exit(code)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// testnetScript is the project's own test-host harness.
func testnetScript() string { return filepath.Join(repoRoot(), "scripts", "testhosts.sh") }

func setup() (*rig, func(), error) {
	nop := func() {}
	if os.Geteuid() != 0 {
		return nil, nop, fmt.Errorf("needs root")
	}
	script := testnetScript()
	if _, err := os.Stat(script); err != nil {
		return nil, nop, fmt.Errorf("testnet script: %w", err)
	}
	for _, tool := range []string{"ip", "ssh", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, nop, fmt.Errorf("missing %s (apt-get install openssh-server iproute2)", tool)
		}
	}
	tmp, err := os.MkdirTemp("", "gorun-e2e-")
	if err != nil {
		return nil, nop, err
	}
	r := &rig{dir: filepath.Join(tmp, "testnet"), gorun: filepath.Join(tmp, "gorun"), testbins: tmp}
	build := exec.Command("go", "build", "-o", r.gorun, "./cmd/gorun")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return nil, nop, fmt.Errorf("building gorun: %v\n%s", err, out)
	}
	up := exec.Command("bash", script, "up", fmt.Sprint(hosts), "--slots", "2")
	up.Env = append(os.Environ(), "TESTNET_DIR="+r.dir)
	if out, err := up.CombinedOutput(); err != nil {
		return nil, nop, fmt.Errorf("testnet up: %v\n%s", err, out)
	}
	cleanup := func() {
		down := exec.Command("bash", script, "down")
		down.Env = append(os.Environ(), "TESTNET_DIR="+r.dir)
		_ = down.Run()
		_ = os.RemoveAll(tmp)
	}
	for i := 1; i <= hosts; i++ {
		r.hosts = append(r.hosts, fmt.Sprintf("198.18.0.%d", 10+i))
	}
	r.ssh = "ssh -F " + filepath.Join(r.dir, "ssh_config")
	return r, cleanup, nil
}

func needRig(t *testing.T) *rig {
	t.Helper()
	proctest.SkipShort(t)
	if theRig == nil {
		t.Skip("testnet unavailable: " + skipWhy)
	}
	return theRig
}

// hostfile writes a hostfile for the first n hosts with slots each.
func (r *rig) hostfile(t *testing.T, n, slots int) string {
	t.Helper()
	var b strings.Builder
	for _, h := range r.hosts[:n] {
		fmt.Fprintf(&b, "%s slots=%d\n", h, slots)
	}
	p := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cmd returns gorun with the rig's ssh, not yet started.
func (r *rig) cmd(args ...string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	cmd := exec.Command(r.gorun, append([]string{"--ssh", r.ssh}, args...)...)
	var out, errb proctest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = r.testbins
	return cmd, &out, &errb
}

type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

func (r *rig) run(t *testing.T, args ...string) result {
	t.Helper()
	cmd, out, errb := r.cmd(args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := waitCmd(t, cmd, fmt.Sprintf("gorun %v", args), errb)
	return result{out.String(), errb.String(), code, time.Since(start)}
}

// hostProcs lists the processes inside host i's namespace other than its
// daemons: its sshd listener and, with Slurm up, its slurmd.
func (r *rig) hostProcs(i int) []string {
	ns := fmt.Sprintf("gr-h%d", i+1)
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	listener, _ := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("h%d", i+1), "sshd.pid"))
	slurmd, _ := os.ReadFile(filepath.Join(r.dir, "slurm", fmt.Sprintf("slurmd-h%d.pid", i+1)))
	var procs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pid := strings.TrimSpace(sc.Text())
		if pid == "" || pid == strings.TrimSpace(string(listener)) || pid == strings.TrimSpace(string(slurmd)) {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
		if err != nil {
			continue // already gone
		}
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.HasPrefix(line, "slurmstepd:") {
			// Slurm's own step daemon winds down in its own time (Debian
			// 13's Slurm 24.11 has kept one for a minute after its step
			// ended); what ran under it is in the namespace and listed.
			continue
		}
		procs = append(procs, pid+" "+line)
	}
	return procs
}

// noLeftovers fails unless every host is back to its sshd listener alone.
func (r *rig) noLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for i := range r.hosts {
			for _, p := range r.hostProcs(i) {
				left = append(left, fmt.Sprintf("h%d: %s", i+1, p))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left on the hosts:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
