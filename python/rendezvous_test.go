package python_test

import (
	"regexp"
	"strings"
	"testing"
)

// rendezvous runs tests/rendezvous.py (a copy named for the test, to look
// for leftovers by): ranks that gorun did not start, meeting through
// torch.distributed's rendezvous.
func rendezvous(t *testing.T, args ...string) (string, int) {
	t.Helper()
	script := scriptCopy(t, "tests/rendezvous.py", "rdv-"+strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())+".py")
	out, code := runTimed(t, t.TempDir(), python, append([]string{script}, args...)...)
	noneLeft(t, script)
	return out, code
}

// TestRendezvous: ranks started as torchrun starts them (each with RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Debian's torchrun itself cannot
// start a job, docs/pytorch.md says why) and by
// torch.multiprocessing.spawn join the gorun backend through
// init_process_group's init methods (env://, tcp://, file://) and a
// store= of their own, and get the right results; gorun's launcher is
// not involved. Ranks of one host share memory, as under gorun.
func TestRendezvous(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-rdv-ok rank=(\d+) size=(\d+) checks=(\d+)`)
	for _, c := range launchesAndMethods() {
		t.Run(strings.Join(c, "-"), func(t *testing.T) {
			np := "3"
			out, code := rendezvous(t, "--launch", c[0], "--method", c[1], "--np", np)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for r, m := range everyRank(t, out, 3, okRE) {
				if m[2] != np || m[3] == "0" {
					t.Fatalf("rank %s: %v", r, m)
				}
			}
		})
	}
}

// TestRendezvousKill: in such a job, however started and met, a rank that
// dies mid-job makes every other rank's operation raise PeerLost naming
// it, within seconds, as under gorun's launcher, and no process is left.
func TestRendezvousKill(t *testing.T) {
	setup(t)
	seenRE := regexp.MustCompile(`gorun-rdv-seen rank=(\d+) after=([0-9.]+) error=(\w+): (.*)`)
	for _, c := range launchesAndMethods() {
		t.Run(strings.Join(c, "-"), func(t *testing.T) {
			out, code := rendezvous(t, "--launch", c[0], "--method", c[1], "--np", "4", "--victim", "2")
			if code == 0 {
				t.Fatalf("exit 0:\n%s", out)
			}
			survivorsSaw(t, out, seenRE, []string{"0", "1", "3"}, "2", "PeerLost", "rank 2")
			if strings.Contains(out, "gorun-rdv-hung") {
				t.Fatalf("a rank hung:\n%s", out)
			}
		})
	}
}

// launchesAndMethods: every way of starting the ranks with every init method.
func launchesAndMethods() [][]string {
	var cs [][]string
	for _, launch := range []string{"procs", "spawn"} {
		for _, method := range []string{"env", "tcp", "file", "store"} {
			cs = append(cs, []string{launch, method})
		}
	}
	return cs
}
