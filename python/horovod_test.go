package python_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHorovodOps: gorun.horovod's collectives (every call, data type and
// a spread of sizes, process sets of the even and the odd ranks, join,
// the errors of ranks that disagree) against naive references, on 1, 2,
// 3 and 5 ranks.
func TestHorovodOps(t *testing.T) {
	setup(t)
	hvdRuns(t, "ops")
}

// TestHorovodTrain: gorun.horovod's DistributedOptimizer equals one
// process training on the whole batch (float64, to 1e-9), also with
// backward_passes_per_step=2 and gradient_predivide_factor; fp16
// compression within its bound; broadcast_parameters,
// broadcast_optimizer_state and SyncBatchNorm; on 1, 2, 3 and 5 ranks.
func TestHorovodTrain(t *testing.T) {
	setup(t)
	hvdRuns(t, "train")
}

func hvdRuns(t *testing.T, mode string) {
	okRE := regexp.MustCompile(`hvd-ok rank=(\d+) mode=(\w+) size=(\d+) checks=(\d+)`)
	for _, np := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			out, code := job(t, np, nil, "tests/horovod.py", "--mode", mode, "--seed", fmt.Sprint(np))
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for r, m := range everyRank(t, out, np, okRE) {
				if m[2] != mode || m[3] != fmt.Sprint(np) || m[4] == "0" {
					t.Fatalf("rank %s: %v", r, m)
				}
			}
		})
	}
}

// TestHorovodKill: a rank SIGKILLed with all-reduces outstanding makes
// every survivor's synchronize raise HorovodInternalError naming it; the
// job exits non-zero and leaves no process behind.
func TestHorovodKill(t *testing.T) {
	setup(t)
	script := filepath.Join(t.TempDir(), "hvd-kill-drill.py")
	src, err := os.ReadFile("tests/horovod.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := job(t, 4, nil, script, "--mode", "kill", "--victim", "2", "--at", "10")
	if code == 0 {
		t.Fatalf("gorun exited 0:\n%s", out)
	}
	seen := lines(out, regexp.MustCompile(`hvd-kill-seen rank=(\d+) after=([0-9.]+) error=(\w+): (.*)`))
	for _, r := range []string{"0", "1", "3"} {
		m, ok := seen[r]
		if !ok {
			t.Fatalf("rank %s reported no failure:\n%s", r, out)
		}
		if m[3] != "HorovodInternalError" || !strings.Contains(m[4], "rank 2 was lost") {
			t.Fatalf("rank %s: %s: %s, want HorovodInternalError naming rank 2", r, m[3], m[4])
		}
		t.Logf("rank %s saw the loss %ss after reaching the step: %s", r, m[2], m[4])
	}
	if _, ok := seen["2"]; ok {
		t.Fatalf("the victim reported a failure:\n%s", out)
	}
	if left, _ := exec.Command("pgrep", "-f", script).Output(); len(left) > 0 {
		t.Fatalf("processes left behind: %s", left)
	}
}
