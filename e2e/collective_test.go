package e2e

import (
	"encoding/json"
	"fmt"
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

// selftest builds examples/selftest once.
func (r *rig) selftest(t *testing.T) string {
	t.Helper()
	bin := r.testbins + "/selftest"
	build := exec.Command("go", "build", "-o", bin, "./examples/selftest")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building selftest: %v\n%s", err, out)
	}
	return bin
}

// checkSelftest runs examples/selftest's reference-checked random
// collectives on nhosts test hosts with 2 ranks each; every rank must pass
// and report the hosts layout hosts.
func checkSelftest(t *testing.T, nhosts int, seed, hosts string) {
	t.Helper()
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, nhosts, 2)
	res := r.run(t, "-hostfile", hf, bin, "-rounds", "60", "-seed", seed)
	if res.code != 0 || strings.Count(res.stdout, "60 rounds OK") != 2*nhosts || strings.Count(res.stdout, "(hosts "+hosts+")") != 2*nhosts {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	r.noLeftovers(t)
}

// TestCollectivesOverSSH: 8 ranks on 4 hosts find each other by gossip
// across the hosts' network and check random collectives of every kind
// against a reference.
func TestCollectivesOverSSH(t *testing.T) {
	checkSelftest(t, 4, "7", "[[0 1] [2 3] [4 5] [6 7]]")
}

// TestNodeAwareOverSSH: 2 ranks on each of 2 hosts: ranks on a host share
// memory, all-reduces, reduce-scatters and all-gathers above SmallBytes
// run node-aware (on-host stages through shared memory, cross-host stages
// between the ranks at the same place on each host), and the random
// collectives still match the reference.
func TestNodeAwareOverSSH(t *testing.T) {
	checkSelftest(t, 2, "11", "[[0 1] [2 3]]")
}

// TestKillDrillOverSSH: the last rank (on h3) is SIGKILLed in the middle of
// an all-reduce; every survivor, on every host, reports ErrPeerLost naming
// it, and gorun exits non-zero leaving nothing behind.
func TestKillDrillOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 3, 2)
	res := r.run(t, "-hostfile", hf, "--grace", "2s", bin, "-drill", "kill", "-mib", "16")
	if res.code == 0 {
		t.Fatalf("job succeeded:\n%s", res.stdout)
	}
	lost := regexp.MustCompile(`\[(\d)\] LOST \d+ peerlost=true err=.*rank 5 lost`).FindAllString(res.stdout, -1)
	if len(lost) != 5 {
		t.Fatalf("%d of 5 survivors reported rank 5 lost:\n%s\n%s", len(lost), res.stdout, res.stderr)
	}
	if strings.Contains(res.stdout, "peerlost=false") {
		t.Fatalf("a survivor got an error other than ErrPeerLost:\n%s", res.stdout)
	}
	r.noLeftovers(t)
}

// TestElasticOverSSH: under gorun --elastic the last rank (on h3) is
// killed, or frozen, in the middle of an all-reduce: the five survivors on
// three hosts each get one ErrViewChanged, go on, and check every later
// result on the new view; the frozen rank is fenced; gorun exits 0 and
// leaves nothing behind. With --max-restarts 1 the killed rank is started
// again on h3 and joins the survivors, and all six finish on view 2.
func TestElasticOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 3, 2)
	for _, c := range []struct {
		name, drill string
		flags       []string
		done        string
		ranks       int
	}{
		{"kill", "kill", nil, "DONE changes=1 view={1 [0 1 2 3 4]} size=5", 5},
		{"stop", "stop", nil, "DONE changes=1 view={1 [0 1 2 3 4]} size=5", 5},
		{"rejoin", "kill", []string{"--max-restarts", "1"}, " view={2 [0 1 2 3 4 5]} size=6", 6},
	} {
		args := append(append([]string{"-hostfile", hf, "--elastic", "--grace", "2s"}, c.flags...), bin, "-drill", c.drill)
		if c.flags != nil {
			args = append(args, "-rejoin", "-pause", "20ms")
		}
		res := r.run(t, args...)
		if done := strings.Count(res.stdout, c.done); res.code != 0 || done != c.ranks {
			t.Fatalf("%s: exit %d, %d of %d ranks done with %q:\n%s\n%s", c.name, res.code, done, c.ranks, c.done, res.stdout, res.stderr)
		}
		if !strings.Contains(res.stdout+res.stderr, "rank 5") {
			t.Fatalf("%s: gorun did not name rank 5:\n%s\n%s", c.name, res.stdout, res.stderr)
		}
		if c.flags != nil && !strings.Contains(res.stderr, "rank 5 restarted 1 time") {
			t.Fatalf("%s: gorun did not say it restarted rank 5:\n%s", c.name, res.stderr)
		}
		r.noLeftovers(t)
	}
}

// loseHost runs gorun with args and, once rank 0 is at step 5 of its
// drill, kills the SSH session of host (the host is lost to the job); it
// returns gorun's exit code and output.
func (r *rig) loseHost(t *testing.T, host string, args ...string) (int, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	cmd, out, errb := r.cmd(args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	proctest.WaitFor(t, 60*time.Second, func() bool { return strings.Contains(out.String(), "[0] STEP 5") }, "rank 0 at step 5")
	pids, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid), "-f", host).Output()
	pid, err := strconv.Atoi(strings.TrimSpace(string(pids)))
	if err != nil {
		t.Fatalf("no ssh client for %s: %q", host, pids)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("hung:\n%s\n%s", out, errb)
	}
	return cmd.ProcessState.ExitCode(), out, errb
}

// TestElasticHostLostOverSSH: under gorun --elastic the SSH session of
// the third test host is killed mid-training: its agent kills its two
// ranks, gorun counts both as lost and sends one view, and the four
// survivors on the other hosts finish exact on it; gorun exits 0.
func TestElasticHostLostOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 3, 2)
	code, out, errb := r.loseHost(t, r.hosts[2], "-hostfile", hf, "--elastic", "--grace", "1s", bin, "-drill", "outside", "-pause", "100ms")
	finished := strings.Count(out.String(), "DONE changes=1 view={1 [0 1 2 3]} size=4")
	if code != 0 || finished != 4 {
		t.Fatalf("exit %d, %d of 4 survivors done on view 1:\n%s\n%s", code, finished, out, errb)
	}
	if !strings.Contains(errb.String(), "its ranks [4 5] are lost") {
		t.Fatalf("gorun did not say it lost ranks 4 and 5:\n%s", errb)
	}
	r.noLeftovers(t)
}

// TestHubsOverSSH: 4 ranks on 4 hosts run the reference-checked workload
// through 2 dedicated hubs that gorun starts on the first two hosts; then
// a kill drill under the hub strategy: every survivor names the victim.
func TestHubsOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 4, 1)
	res := r.run(t, "-hostfile", hf, "--hubs", "2", "--strategy", "hub", bin, "-rounds", "40", "-seed", "3")
	if res.code != 0 || strings.Count(res.stdout, "40 rounds OK") != 4 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	r.noLeftovers(t)
	res = r.run(t, "-hostfile", hf, "--hubs", "2", "--strategy", "hub", "--grace", "2s", bin, "-drill", "kill", "-mib", "16")
	lost := regexp.MustCompile(`\[(\d)\] LOST \d+ peerlost=true err=.*rank 3 lost`).FindAllString(res.stdout, -1)
	if res.code == 0 || len(lost) != 3 {
		t.Fatalf("exit %d; %d of 3 survivors reported rank 3 lost:\n%s\n%s", res.code, len(lost), res.stdout, res.stderr)
	}
	r.noLeftovers(t)
}

// TestTimelineOverSSH: --timeline on 2 test hosts x 2 ranks writes one
// Chrome trace: it parses as JSON, has a track per rank (named with its
// host), every collective begins before it ends, the program's span is
// there, and the same all-reduce, all-gather or barrier overlaps on every
// rank on the aligned clock (to within the clocks' stated error). Every
// collective splits into waiting and moving; in the last all-reduce, which
// rank 3 enters 300 ms late, ranks 0-2 wait most of that time and rank 3
// does not.
func TestTimelineOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 2, 2)
	path := filepath.Join(t.TempDir(), "timeline.json")
	res := r.run(t, "-hostfile", hf, "--timeline", path, bin, "-rounds", "40", "-seed", "5", "-late", "300ms")
	if res.code != 0 || !strings.Contains(res.stderr, "timeline of 4 rank(s) in "+path) {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Ts, Dur       float64
			Pid           int
			Args          map[string]any
		}
		Metadata struct {
			Hosts map[string]struct {
				ErrorUs float64 `json:"error_us"`
			}
		}
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	slack := 0.0
	for _, h := range tr.Metadata.Hosts {
		slack = max(slack, 2*h.ErrorUs)
	}
	if len(tr.Metadata.Hosts) != 2 {
		t.Fatalf("clock metadata for %d hosts, want 2: %s", len(tr.Metadata.Hosts), b[:min(len(b), 300)])
	}
	type span struct{ begin, end float64 }
	type last struct {
		seq  float64
		wait float64
	}
	lastAR := map[int]last{}
	tracks := map[int]string{}
	spans := map[int]int{}
	same := map[string][]span{}
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			tracks[e.Pid] = e.Args["name"].(string)
		case e.Ph == "X" && e.Dur < 0:
			t.Fatalf("rank %d: %s ends before it begins", e.Pid, e.Name)
		case e.Ph == "X" && e.Cat == "span":
			spans[e.Pid]++
		case e.Ph == "X" && e.Cat == "collective":
			w, wok := e.Args["wait_us"].(float64)
			m, mok := e.Args["move_us"].(float64)
			if !wok || !mok || w < 0 || m < 0 || w+m > e.Dur+1 || w+m < e.Dur-1 {
				t.Fatalf("rank %d: %s of %.1f us: wait %v, move %v", e.Pid, e.Name, e.Dur, e.Args["wait_us"], e.Args["move_us"])
			}
			if strings.HasPrefix(e.Name, "allreduce ") && e.Args["seq"].(float64) > lastAR[e.Pid].seq {
				lastAR[e.Pid] = last{e.Args["seq"].(float64), w}
			}
			// The job's collectives run on all 4 ranks (a child's, named
			// with its communicator, on its own ranks only).
			if (strings.HasPrefix(e.Name, "allreduce ") || strings.HasPrefix(e.Name, "allgather ") || strings.HasPrefix(e.Name, "barrier ")) && !strings.Contains(e.Name, "(comm ") {
				same[e.Name] = append(same[e.Name], span{e.Ts, e.Ts + e.Dur})
			}
		}
	}
	for rank := range 3 {
		if lastAR[rank].wait < 200e3 || lastAR[3].wait > lastAR[rank].wait/2 {
			t.Fatalf("rank 3 entered the last all-reduce 300 ms late: ranks waited %v (us)", lastAR)
		}
	}
	for rank := range 4 {
		want := fmt.Sprintf("rank %d (%s)", rank, r.hosts[rank/2])
		if tracks[rank] != want || spans[rank] != 1 {
			t.Fatalf("track %d: %q with %d spans, want %q with 1", rank, tracks[rank], spans[rank], want)
		}
	}
	if len(same) < 5 {
		t.Fatalf("only %d all-reduces, all-gathers and barriers", len(same))
	}
	for name, ss := range same {
		if len(ss) != 4 {
			t.Fatalf("%s on %d ranks", name, len(ss))
		}
		latestBegin, earliestEnd := ss[0].begin, ss[0].end
		for _, s := range ss {
			latestBegin, earliestEnd = max(latestBegin, s.begin), min(earliestEnd, s.end)
		}
		if latestBegin > earliestEnd+slack {
			t.Fatalf("%s: a rank ended (%.1f us) before another began (%.1f us), beyond the clocks' error %.1f us", name, earliestEnd, latestBegin, slack)
		}
	}
	r.noLeftovers(t)
}

// TestElasticHostMovedOverSSH: under gorun --elastic --max-restarts 1, 5
// ranks on h1 (2 slots: ranks 0, 1), h2 (2 slots: 2, 3) and h3 (4 slots:
// 4, and 3 free); h2's SSH session is killed mid-training. Its two ranks
// are lost in one view, restarted on h3 (the only host with a free slot),
// and join one view each: every rank finishes on view 3 with all five;
// gorun exits 0 and leaves nothing behind.
func TestElasticHostMovedOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := filepath.Join(t.TempDir(), "hosts")
	text := fmt.Sprintf("%s slots=2\n%s slots=2\n%s slots=4\n", r.hosts[0], r.hosts[1], r.hosts[2])
	if err := os.WriteFile(hf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errb := r.loseHost(t, r.hosts[1], "-np", "5", "-hostfile", hf, "--elastic", "--max-restarts", "1", "--grace", "1s", bin, "-drill", "outside", "-rejoin", "-pause", "100ms")
	finished := strings.Count(out.String(), " view={3 [0 1 2 3 4]} size=5")
	if code != 0 || finished != 5 {
		t.Fatalf("exit %d, %d of 5 ranks done on view 3 with every rank:\n%s\n%s", code, finished, out, errb)
	}
	for _, want := range []string{"its ranks [2 3] are lost", "rank 2: its host is gone: restarting it on " + r.hosts[2], "rank 3: its host is gone: restarting it on " + r.hosts[2],
		"rank 2 restarted 1 time, rank 3 restarted 1 time"} {
		if !strings.Contains(errb.String(), want) {
			t.Fatalf("gorun did not say %q:\n%s", want, errb)
		}
	}
	r.noLeftovers(t)
}
