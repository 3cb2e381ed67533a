package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

// TestPlacementAndEnvironment: 3 hosts x 2 slots; ranks land where the
// hostfile says and see the right environment.
func TestPlacementAndEnvironment(t *testing.T) {
	r := needRig(t)
	hf := r.hostfile(t, 3, 2)
	res := r.run(t, "-hostfile", hf, "-np", "6", "-x", "EXTRA=yes", "sh", "-c",
		`echo "$(hostname) R=$GORUN_RANK/$GORUN_SIZE L=$GORUN_LOCAL_RANK/$GORUN_LOCAL_SIZE N=$GORUN_NODE_RANK A=$GORUN_ADDR M=$MASTER_ADDR:$MASTER_PORT T=$RANK/$WORLD_SIZE/$LOCAL_RANK O=$OMPI_COMM_WORLD_RANK X=$EXTRA"`)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] (h\d) R=(\d)/6 L=(\d)/2 N=(\d) A=(\S+) M=(\S+) T=(\d)/6/(\d) O=(\d) X=yes$`)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 6 {
		t.Fatalf("want 6 lines, got %q", res.stdout)
	}
	masters := map[string]bool{}
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %q does not match", l)
		}
		rank, _ := strconv.Atoi(m[1])
		host := rank / 2 // by slot: ranks 0,1 on h1; 2,3 on h2; 4,5 on h3
		if m[2] != fmt.Sprintf("h%d", host+1) || m[6] != r.hosts[host] {
			t.Fatalf("rank %d ran on %s (%s), want h%d", rank, m[2], m[6], host+1)
		}
		if m[3] != m[1] || m[8] != m[1] || m[10] != m[1] || m[4] != strconv.Itoa(rank%2) || m[9] != m[4] || m[5] != strconv.Itoa(host) {
			t.Fatalf("bad rank variables in %q", l)
		}
		masters[m[7]] = true
	}
	if len(masters) != 1 || !strings.HasPrefix(lines[0][4:], "h") {
		t.Fatalf("MASTER_ADDR:PORT differ between ranks: %v", masters)
	}
	for m := range masters {
		if !strings.HasPrefix(m, r.hosts[0]+":") {
			t.Fatalf("MASTER_ADDR %s is not rank 0's host %s", m, r.hosts[0])
		}
	}

	// --map-by node deals ranks round-robin.
	res = r.run(t, "-hostfile", hf, "-np", "4", "--map-by", "node", "sh", "-c", `echo $(hostname)`)
	want := map[string]string{"[0]": "h1", "[1]": "h2", "[2]": "h3", "[3]": "h1"}
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		tag, host, _ := strings.Cut(l, " ")
		if want[tag] != host {
			t.Fatalf("--map-by node: %q", res.stdout)
		}
	}
}

func TestRemoteFailureLeavesNothing(t *testing.T) {
	r := needRig(t)
	hf := r.hostfile(t, 3, 2)
	res := r.run(t, "-hostfile", hf, "--grace", "1s", "sh", "-c",
		`sleep 300 & if [ $GORUN_RANK = 3 ]; then echo "rank 3 gives up" >&2; sleep 0.5; exit 7; fi; trap "" TERM; wait`)
	if res.code != 7 {
		t.Fatalf("exit %d, want 7: %s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "rank 3 on "+r.hosts[1]) || !strings.Contains(res.stderr, "rank 3 gives up") {
		t.Fatalf("summary does not name rank 3 on %s: %s", r.hosts[1], res.stderr)
	}
	r.noLeftovers(t)
}

func TestRemoteInterrupt(t *testing.T) {
	r := needRig(t)
	hf := r.hostfile(t, 3, 2)
	cmd, out, errb := r.cmd("-hostfile", hf, "--grace", "1s", "sh", "-c", `trap "echo got INT; exit 1" INT; echo up; sleep 300 & wait`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 30*time.Second, func() bool { return strings.Count(out.String(), "up") == 6 }, "6 ranks")
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130: %s", code, errb)
	}
	if n := strings.Count(out.String(), "got INT"); n != 6 {
		t.Fatalf("%d ranks saw SIGINT, want 6:\n%s", n, out)
	}
	r.noLeftovers(t)
}

// TestSSHDrop kills the ssh client of one host; that host's agent must kill
// its ranks, and the job must fail naming the host. Ranks that started
// children of their own (forkingRanks) leave nothing either.
func TestSSHDrop(t *testing.T) {
	for name, rank := range map[string]string{"sleeping": `echo up; sleep 300`, "forking": forkingRanks} {
		t.Run(name, func(t *testing.T) {
			r := needRig(t)
			hf := r.hostfile(t, 2, 2)
			cmd, out, errb := r.cmd("-hostfile", hf, "--grace", "1s", "sh", "-c", rank)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			proctest.WaitFor(t, 30*time.Second, func() bool { return strings.Count(out.String(), "up") == 4 }, "4 ranks")
			pids, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid), "-f", r.hosts[1]).Output()
			pid, err := strconv.Atoi(strings.TrimSpace(string(pids)))
			if err != nil {
				t.Fatalf("no ssh client for %s: %q", r.hosts[1], pids)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 255 {
				t.Fatalf("exit %d, want 255: %s", code, errb)
			}
			if !strings.Contains(errb.String(), "lost the agent on "+r.hosts[1]) {
				t.Fatalf("stderr does not name %s: %s", r.hosts[1], errb)
			}
			r.noLeftovers(t)
		})
	}
}

func TestUnreachableHost(t *testing.T) {
	r := needRig(t)
	hf := filepath.Join(t.TempDir(), "hosts")
	// .99 is inside the rig's range but has no host: "No route to host".
	if err := os.WriteFile(hf, []byte(r.hosts[0]+" slots=1\n198.18.0.99 slots=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.run(t, "-hostfile", hf, "true")
	if res.code != 1 || !strings.Contains(res.stderr, "198.18.0.99: ssh: connect to host 198.18.0.99") {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
	r.noLeftovers(t)
}

func TestWrongKey(t *testing.T) {
	r := needRig(t)
	res := r.run(t, "-H", r.hosts[0], "--ssh", "ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes -i /dev/null", "true")
	if res.code != 1 || !strings.Contains(res.stderr, r.hosts[0]+": ") || !strings.Contains(res.stderr, "Permission denied (publickey)") {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestMissingProgramRemote(t *testing.T) {
	r := needRig(t)
	hf := r.hostfile(t, 3, 1)
	res := r.run(t, "-hostfile", hf, "./no-such-train")
	if res.code != 1 {
		t.Fatalf("exit %d", res.code)
	}
	for _, h := range r.hosts[:3] {
		if !strings.Contains(res.stderr, h+": ./no-such-train: no such file") {
			t.Fatalf("stderr does not report %s: %s", h, res.stderr)
		}
	}
	r.noLeftovers(t)
}

func TestMalformedHostfile(t *testing.T) {
	r := needRig(t)
	hf := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hf, []byte(r.hosts[0]+" slots=2\n# comment\n"+r.hosts[1]+" slots=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.run(t, "-hostfile", hf, "true")
	if res.code != 1 || !strings.Contains(res.stderr, hf+`:3: slots: not a number "x"`) {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
}

// forkingRanks is a rank that starts two children of its own and waits,
// as a PyTorch DataLoader's workers are started.
const forkingRanks = `sh -c 'while :; do sleep 1; done' & sh -c 'while :; do sleep 1; done' & echo up; wait`

// TestAgentKilledOverSSH: one host's agent is SIGKILLed while its ranks'
// children run: its sentinel ends their process groups, so nothing stays
// on the host; gorun fails, naming the host and what happened.
func TestAgentKilledOverSSH(t *testing.T) {
	r := needRig(t)
	hf := r.hostfile(t, 2, 2)
	cmd, out, errb := r.cmd("-hostfile", hf, "--grace", "1s", "sh", "-c", forkingRanks)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 30*time.Second, func() bool { return strings.Count(out.String(), "up") == 4 }, "4 ranks")
	var agent int
	for _, p := range r.hostProcs(1) {
		if f := strings.Fields(p); len(f) > 2 && strings.HasSuffix(f[2], "__agent") {
			agent, _ = strconv.Atoi(f[0])
		}
	}
	if agent == 0 {
		t.Fatalf("no agent on %s: %v", r.hosts[1], r.hostProcs(1))
	}
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("exit 0 after an agent was killed: %s", errb)
	}
	if !strings.Contains(errb.String(), r.hosts[1]) {
		t.Fatalf("stderr does not name %s: %s", r.hosts[1], errb)
	}
	r.noLeftovers(t)
}

// TestDelayedLinks: the harness's delay shaping (testhosts.sh delay, an
// NFQUEUE delay line in every host) holds each packet a host receives for
// 20 ms: a connection from this machine to a host's sshd takes at least
// that (the SYN waits), a job of reference-checked collectives still
// passes over the delayed links, and with the delay taken away no delay
// line is left running in any host.
func TestDelayedLinks(t *testing.T) {
	r := needRig(t)
	shape := func(d string) {
		t.Helper()
		cmd := exec.Command("bash", testnetScript(), "delay", d)
		cmd.Env = append(os.Environ(), "TESTNET_DIR="+r.dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("testhosts.sh delay %s: %v\n%s", d, err, out)
		}
	}
	shape("20ms")
	t.Cleanup(func() { shape("0") })
	fastest := time.Hour
	for range 5 {
		start := time.Now()
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(r.hosts[1], "22"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, time.Since(start))
		conn.Close()
	}
	if fastest < 20*time.Millisecond {
		t.Fatalf("the fastest of 5 connections took %v through a 20 ms delay", fastest)
	}
	res := r.run(t, "-hostfile", r.hostfile(t, 2, 2), r.selftest(t), "-rounds", "20", "-seed", "5")
	if res.code != 0 || strings.Count(res.stdout, "20 rounds OK") != 4 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	shape("0")
	r.noLeftovers(t)
}
