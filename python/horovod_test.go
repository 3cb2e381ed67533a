package python_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestHorovodOps: the job's shape, gorun.horovod's collectives (every
// call, data type and a spread of sizes, compression, process sets of the
// even and the odd ranks, join, the errors of ranks that disagree) against
// naive references, and shutdown then init again, on 1, 2, 3 and 5 ranks.
func TestHorovodOps(t *testing.T) {
	setup(t)
	hvdRuns(t, "ops")
}

// TestHorovodTrain: gorun.horovod's DistributedOptimizer equals one
// process training on the whole batch (float64, to 1e-9), also with
// backward_passes_per_step=2, gradient_predivide_factor and op=Sum; fp16
// compression within its bound; an LR scheduler made before the wrapper;
// broadcast_parameters, broadcast_optimizer_state (also after a backward
// pass), SyncBatchNorm and elastic.run on a job of fixed size; on 1, 2, 3
// and 5 ranks.
func TestHorovodTrain(t *testing.T) {
	setup(t)
	hvdRuns(t, "train")
}

// TestHorovodSolo: a Horovod script started without a launcher
// (python3 train.py) runs as a job of one rank, as under Horovod's MPI
// build; one that another launcher started as one of several is refused,
// naming the variable that says so.
func TestHorovodSolo(t *testing.T) {
	setup(t)
	for _, v := range []string{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "HOROVOD_SIZE"} {
		t.Setenv(v, "") // whatever started the test
	}
	for _, mode := range []string{"ops", "train"} {
		out, code := runTimed(t, "", python, "tests/horovod.py", "--mode", mode, "--seed", "11")
		ok := regexp.MustCompile(`hvd-ok rank=0 mode=` + mode + ` size=1 checks=[1-9]`)
		if code != 0 || !ok.MatchString(out) {
			t.Fatalf("%s without gorun: exit %d:\n%s", mode, code, out)
		}
	}
	t.Setenv("WORLD_SIZE", "2")
	out, code := runTimed(t, "", python, "tests/horovod.py", "--mode", "ops")
	if code == 0 || !strings.Contains(out, "one of 2 (WORLD_SIZE) that another launcher started") {
		t.Fatalf("one of two processes another launcher started: exit %d:\n%s", code, out)
	}
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
	script := scriptCopy(t, "tests/horovod.py", "hvd-kill-drill.py")
	out, code := job(t, 4, nil, script, "--mode", "kill", "--victim", "2", "--at", "10")
	if code == 0 {
		t.Fatalf("gorun exited 0:\n%s", out)
	}
	survivorsSaw(t, out, regexp.MustCompile(`hvd-kill-seen rank=(\d+) after=([0-9.]+) error=(\w+): (.*)`),
		[]string{"0", "1", "3"}, "2", "HorovodInternalError", "rank 2 was lost")
	noneLeft(t, script)
}

// TestHorovodElastic: gorun.horovod.elastic (run, TorchState, commit) with
// a DistributedOptimizer under gorun --elastic. A killed rank (rank 0, the
// first state holder) leaves the survivors to go back to their last commit,
// sync and train on in a smaller view; with --max-restarts 1 the restarted
// rank comes back in, takes the survivors' state, and the job ends with
// every rank of the final view holding the same weights and step.
func TestHorovodElastic(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`hvd-elastic-ok rank=(\d+) step=(\d+) size=(\d+) resets=(\d+) restarts=(\d+)`)
	t.Run("shrink", func(t *testing.T) {
		out, code := job(t, 4, []string{"--elastic"}, "tests/horovod.py", "--mode", "elastic", "--victim", "0", "--at", "8", "--steps", "30")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		got := lines(out, okRE)
		if len(got) != 3 {
			t.Fatalf("%d ranks finished, want the 3 survivors:\n%s", len(got), out)
		}
		for _, r := range []string{"1", "2", "3"} {
			m, ok := got[r]
			if !ok || m[2] != "30" || m[3] != "3" || m[4] == "0" {
				t.Fatalf("rank %s: %v, want step 30 in a view of 3 after a reset:\n%s", r, m, out)
			}
		}
	})
	t.Run("rejoin", func(t *testing.T) {
		out, code := job(t, 3, []string{"--elastic", "--max-restarts", "1"}, "tests/horovod.py", "--mode", "elastic", "--victim", "1", "--at", "8", "--steps", "30", "--until-size", "3")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		got := everyRank(t, out, 3, okRE)
		for r, m := range got {
			if m[3] != "3" || m[2] != got["0"][2] {
				t.Fatalf("rank %s: %v, want the view of 3 at rank 0's step %s:\n%s", r, m, got["0"][2], out)
			}
		}
		if got["1"][5] != "1" {
			t.Fatalf("rank 1 was not restarted: %v\n%s", got["1"], out)
		}
	})
}
