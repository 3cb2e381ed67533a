// Package python_test runs the gorun backend for torch.distributed
// (python/gorun, over capi's library) in real processes under gorun, on
// Debian's PyTorch at /usr/bin/python3 (package python3-torch; `make deps`
// installs it). Without it these tests fail, naming the package.
package python_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

const python = "/usr/bin/python3"

var (
	once     sync.Once
	dir      string
	setupErr error
)

// setup builds gorun and libgorun.so once, and checks for PyTorch.
func setup(t *testing.T) {
	t.Helper()
	proctest.SkipShort(t)
	once.Do(func() {
		if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
			setupErr = fmt.Errorf("Debian's PyTorch is needed at %s: apt-get install python3-torch (or bash scripts/testdeps.sh): %v\n%s", python, err, out)
			return
		}
		d, err := os.MkdirTemp("", "gorun-python-test-")
		if err != nil {
			setupErr = err
			return
		}
		dir = d
		for _, b := range []struct {
			out, pkg string
			env      []string
			args     []string
		}{
			{"gorun", "../cmd/gorun", []string{"CGO_ENABLED=0"}, nil},
			{"libgorun.so", "../capi", []string{"CGO_ENABLED=1"}, []string{"-buildmode=c-shared"}},
		} {
			args := append(append([]string{"build"}, b.args...), "-o", filepath.Join(dir, b.out), b.pkg)
			cmd := exec.Command("go", args...)
			cmd.Env = append(os.Environ(), b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				setupErr = fmt.Errorf("building %s: %v\n%s", b.out, err, out)
				return
			}
		}
		// The native fast path, beside libgorun.so, where gorun.torch
		// looks for it; the tests run with GORUN_TORCH_NATIVE=1, so that
		// its absence fails them.
		if out, err := exec.Command(python, "csrc/build.py", dir).CombinedOutput(); err != nil {
			setupErr = fmt.Errorf("building the native fast path: %v\n%s", err, out)
			return
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "_torchc-*.so")); len(m) != 1 {
			setupErr = fmt.Errorf("csrc/build.py built no native fast path (bash scripts/testdeps.sh installs what it needs)")
			return
		}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// job runs script under gorun with np ranks and returns its output and
// exit code.
func job(t *testing.T, np int, gorunArgs []string, script string, args ...string) (string, int) {
	t.Helper()
	argv := append(append([]string{"-np", fmt.Sprint(np)}, gorunArgs...), python, script)
	return runTimed(t, "", filepath.Join(dir, "gorun"), append(argv, args...)...)
}

// runTimed runs prog with args in wd ("": here) with the package's
// environment (the library built for the tests, this directory on
// PYTHONPATH), for at most 4 minutes, and returns its output and exit
// code.
func runTimed(t *testing.T, wd, prog string, args ...string) (string, int) {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), "GORUN_LIBRARY="+filepath.Join(dir, "libgorun.so"), "PYTHONPATH="+here, "OMP_NUM_THREADS=1")
	if !slices.ContainsFunc(cmd.Env, func(v string) bool { return strings.HasPrefix(v, "GORUN_TORCH_NATIVE=") }) {
		cmd.Env = append(cmd.Env, "GORUN_TORCH_NATIVE=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after 4 minutes:\n%s", filepath.Base(prog), strings.Join(args, " "), out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// lines returns, per rank, the first line that matches re (its submatches).
func lines(out string, re *regexp.Regexp) map[string][]string {
	got := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if _, ok := got[m[1]]; !ok {
			got[m[1]] = m
		}
	}
	return got
}

// everyRank fails unless every rank 0..np-1 printed a line matching re.
func everyRank(t *testing.T, out string, np int, re *regexp.Regexp) map[string][]string {
	t.Helper()
	got := lines(out, re)
	for r := range np {
		if _, ok := got[fmt.Sprint(r)]; !ok {
			t.Fatalf("rank %d printed no line matching %s:\n%s", r, re, out)
		}
	}
	return got
}

// TestOps: every operation and dtype against PyTorch's definition, on 1,
// 2, 3, 5 and 9 ranks, and through ParamHub with torch's own env://
// rendezvous.
func TestOps(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-ops-ok rank=(\d+) checks=(\d+)`)
	for _, c := range []struct {
		np    int
		gorun []string
		args  []string
	}{
		{1, nil, nil}, {2, nil, nil}, {3, nil, nil}, {5, nil, nil}, {9, nil, []string{"--seed", "9"}},
		{4, []string{"--strategy", "hub"}, []string{"--init", "env", "--seed", "4"}},
	} {
		t.Run(fmt.Sprintf("np=%d%s", c.np, strings.Join(c.gorun, "")), func(t *testing.T) {
			out, code := job(t, c.np, c.gorun, "tests/ops.py", append([]string{"--seed", fmt.Sprint(c.np)}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for r, m := range everyRank(t, out, c.np, okRE) {
				if m[2] == "0" {
					t.Fatalf("rank %s checked nothing", r)
				}
			}
		})
	}
}

// TestWire: gorun --wire fp16 and bf16 under torch.distributed: float32
// all_reduce within the format's bound of the exact sum, in the format,
// the same bits on every rank; int64 exact.
func TestWire(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-wire-ok rank=(\d+) wire=(\w+) digest=(\w+) worst=([\d.]+)`)
	for _, wire := range []string{"fp16", "bf16"} {
		out, code := job(t, 3, []string{"--wire", wire}, "tests/wire.py")
		if code != 0 {
			t.Fatalf("--wire %s: exit %d:\n%s", wire, code, out)
		}
		got := everyRank(t, out, 3, okRE)
		for r, m := range got {
			if m[2] != wire || m[3] != got["0"][3] {
				t.Fatalf("--wire %s: rank %s: %v (rank 0: %v)", wire, r, m, got["0"])
			}
		}
		t.Logf("--wire %s: worst %s of the bound", wire, got["0"][4])
	}
}

// TestExact: exact sums through torch.distributed, from gorun --exact and
// from gt.init(exact=True), under the ring and the hub strategy, on 3 and
// 4 ranks: every element within the bound of the exact sum, and the same
// bits on every rank and, for one job size, in every run.
func TestExact(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-exact rank=(\d+) digest=(\w+)`)
	for _, np := range []int{3, 4} {
		digests := map[string]bool{}
		for _, run := range []struct {
			gorun []string
			args  []string
		}{
			{[]string{"--exact"}, nil},
			{[]string{"--strategy", "hub", "-x", "GORUN_COLOCATED_HUBS=2"}, []string{"--init-exact"}},
			{[]string{"--exact", "--strategy", "hub"}, nil},
		} {
			out, code := job(t, np, run.gorun, "tests/exact.py", run.args...)
			if code != 0 {
				t.Fatalf("np %d %v %v: exit %d:\n%s", np, run.gorun, run.args, code, out)
			}
			for _, m := range everyRank(t, out, np, okRE) {
				digests[m[2]] = true
			}
			if len(digests) != 1 {
				t.Fatalf("np %d %v %v: the bits differ across ranks or runs (%v):\n%s", np, run.gorun, run.args, digests, out)
			}
		}
	}
}

// TestPowerSGDHook: PyTorch's own PowerSGD comm hook on the gorun
// backend (it calls allreduce only): the same weights on every rank, and
// the loss falls.
func TestPowerSGDHook(t *testing.T) {
	setup(t)
	out, code := job(t, 3, nil, "tests/powersgd.py")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	got := everyRank(t, out, 3, regexp.MustCompile(`gorun-powersgd-ok rank=(\d+) loss0=([\d.]+) loss=([\d.]+)`))
	t.Logf("rank 0: loss %s -> %s", got["0"][2], got["0"][3])
}

// TestDDP: DDP over the ring and over ParamHub (colocated and dedicated
// hubs) equals one process training on the whole batch; its buckets run
// in the calling thread (their size is under INLINE_BYTES) and, with
// GORUN_TORCH_INLINE_BYTES=0, handed off to overlap backward.
func TestDDP(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-ddp-ok rank=(\d+) size=(\d+) .* hub=(\w+)`)
	for _, c := range []struct {
		np     int
		gorun  []string
		hub    string
		inline string
	}{
		{1, nil, "False", ""}, {2, nil, "False", ""}, {3, nil, "False", ""}, {5, nil, "False", ""},
		{3, []string{"--strategy", "hub"}, "True", ""}, {2, []string{"--strategy", "hub", "--hubs", "1"}, "True", ""},
		{3, nil, "False", "0"},
	} {
		name := fmt.Sprintf("np=%d%s", c.np, strings.Join(c.gorun, ""))
		if c.inline != "" {
			name += ",inline=" + c.inline
		}
		t.Run(name, func(t *testing.T) {
			if c.inline != "" {
				t.Setenv("GORUN_TORCH_INLINE_BYTES", c.inline)
			}
			out, code := job(t, c.np, c.gorun, "tests/ddp.py")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for r, m := range everyRank(t, out, c.np, okRE) {
				if m[2] != fmt.Sprint(c.np) || m[3] != c.hub {
					t.Fatalf("rank %s: size %s hub %s, want %d and %s", r, m[2], m[3], c.np, c.hub)
				}
			}
		})
	}
}

// scriptCopy copies tests/NAME to a file of its own, named name, to look
// for leftover processes by.
func scriptCopy(t *testing.T, src, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

// survivorsSaw fails unless each survivor printed a line matching re
// (submatches: rank, seconds, error type, message) with error type want
// and a message holding victim's name, and the victim printed none.
func survivorsSaw(t *testing.T, out string, re *regexp.Regexp, survivors []string, victim, want, name string) {
	t.Helper()
	seen := lines(out, re)
	for _, r := range survivors {
		m, ok := seen[r]
		if !ok {
			t.Fatalf("rank %s reported no failure:\n%s", r, out)
		}
		if m[3] != want || !strings.Contains(m[4], name) {
			t.Fatalf("rank %s: %s: %s, want %s naming rank %s", r, m[3], m[4], want, victim)
		}
		t.Logf("rank %s saw the loss after %ss: %s", r, m[2], m[4])
	}
	if _, ok := seen[victim]; ok {
		t.Fatalf("the victim reported a failure:\n%s", out)
	}
}

// noneLeft fails if a process runs script.
func noneLeft(t *testing.T, script string) {
	t.Helper()
	if left, _ := exec.Command("pgrep", "-f", script).Output(); len(left) > 0 {
		t.Fatalf("processes left behind: %s", left)
	}
}

// TestKill: a rank SIGKILLed with Works outstanding makes every other
// rank's pending Work raise PeerLost naming it; gorun exits non-zero and
// no rank is left.
func TestKill(t *testing.T) {
	setup(t)
	script := scriptCopy(t, "tests/kill.py", "kill-drill.py")
	out, code := job(t, 4, nil, script, "--victim", "2", "--at", "10")
	if code == 0 {
		t.Fatalf("gorun exited 0:\n%s", out)
	}
	survivorsSaw(t, out, regexp.MustCompile(`gorun-kill-seen rank=(\d+) after=([0-9.]+) error=(\w+): (.*)`),
		[]string{"0", "1", "3"}, "2", "PeerLost", "rank 2")
	noneLeft(t, script)
}

// TestMismatch: ranks whose tensors disagree in length all raise
// Mismatch, naming a rank they disagree with.
func TestMismatch(t *testing.T) {
	setup(t)
	out, code := job(t, 3, nil, "tests/mismatch.py")
	if code == 0 {
		t.Fatalf("gorun exited 0:\n%s", out)
	}
	for r, m := range everyRank(t, out, 3, regexp.MustCompile(`gorun-mismatch-seen rank=(\d+) error=(\w+): (.*)`)) {
		if m[2] != "Mismatch" || !regexp.MustCompile(`rank \d disagrees on buffer length`).MatchString(m[3]) {
			t.Fatalf("rank %s: %s: %s", r, m[2], m[3])
		}
	}
}

// TestTimeout: an operation's timeout (its group's, from new_group) ends
// it with Timeout, a TimeoutError whose message says " timeout " (torch's
// tests look for that), no sooner than asked; it breaks the job's
// communication, so the ranks waiting elsewhere fail with Aborted naming
// it, and the job ends non-zero.
func TestTimeout(t *testing.T) {
	setup(t)
	out, code := job(t, 3, nil, "tests/timeout.py")
	if code == 0 {
		t.Fatalf("gorun exited 0:\n%s", out)
	}
	for r, m := range everyRank(t, out, 3, regexp.MustCompile(`gorun-timeout-seen rank=(\d+) error=(\S+) took=([\d.]+): (.*)`)) {
		took, _ := strconv.ParseFloat(m[3], 64)
		switch {
		case r == "0" && (m[2] != "Timeout(TimeoutError)" || !strings.Contains(m[4], " timeout ") || took < 0.5):
			t.Fatalf("rank 0: %s after %ss: %s", m[2], m[3], m[4])
		case r != "0" && (m[2] != "Aborted" || !strings.Contains(m[4], "rank 0")):
			t.Fatalf("rank %s: %s: %s", r, m[2], m[4])
		}
	}
}

// TestElastic: DDP under gorun --elastic. A killed rank (rank 0, whose
// loss also moves DDP's broadcast root) leaves the survivors to resync and
// train on in a smaller view; with --max-restarts 1 the restarted rank
// comes back in, takes the survivors' state, and the job ends with every
// rank of the final view holding the same weights and step.
func TestElastic(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-elastic-ok rank=(\d+) step=(\d+) size=(\d+) resyncs=(\d+) restarts=(\d+)`)
	t.Run("shrink", func(t *testing.T) {
		out, code := job(t, 4, []string{"--elastic"}, "tests/elastic.py", "--victim", "0", "--at", "8", "--steps", "30")
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
				t.Fatalf("rank %s: %v, want step 30 in a view of 3 after a resync:\n%s", r, m, out)
			}
		}
	})
	t.Run("rejoin", func(t *testing.T) {
		out, code := job(t, 3, []string{"--elastic", "--max-restarts", "1"}, "tests/elastic.py", "--victim", "1", "--at", "8", "--steps", "30", "--until-size", "3")
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

// TestTrainer: the Fashion-MNIST DDP trainer (examples/torch_fmnist) on
// gorun's collectives and on Gloo learns the same (the same data, order
// and arithmetic), and its elastic drill (a rank killed, restarted, back
// in) finishes.
func TestTrainer(t *testing.T) {
	setup(t)
	finalRE := regexp.MustCompile(`final backend=(\w+) np=(\d+) .* test_acc=([0-9.]+)`)
	acc := map[string]float64{}
	for _, b := range []string{"gorun", "gloo"} {
		out, code := job(t, 3, nil, "../examples/torch_fmnist/train.py", "--backend", b, "--epochs", "1", "--train", "3000", "--test", "1000")
		m := finalRE.FindStringSubmatch(out)
		if code != 0 || m == nil || m[1] != b || m[2] != "3" {
			t.Fatalf("%s: exit %d:\n%s", b, code, out)
		}
		var a float64
		fmt.Sscan(m[3], &a)
		acc[b] = a
	}
	if acc["gorun"] < 0.5 || acc["gorun"]-acc["gloo"] > 0.02 || acc["gloo"]-acc["gorun"] > 0.02 {
		t.Fatalf("test accuracy: gorun %.4f, gloo %.4f: want both above 0.5 and within 0.02", acc["gorun"], acc["gloo"])
	}
	out, code := job(t, 3, []string{"--elastic", "--max-restarts", "1"}, "../examples/torch_fmnist/train.py",
		"--epochs", "2", "--train", "2000", "--test", "500", "--kill-rank", "1", "--kill-step", "5")
	m := finalRE.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "view changed") {
		t.Fatalf("elastic drill: exit %d:\n%s", code, out)
	}
}

// TestTrainerExact: the CNN trainer under gorun --exact on 4 ranks trains
// the same weights, bit for bit, and so the same accuracy, under the ring
// strategy's default plan, the plain ring, and ParamHub: its gradient
// sums do not depend on the algorithm.
func TestTrainerExact(t *testing.T) {
	setup(t)
	finalRE := regexp.MustCompile(`final backend=gorun np=4 .* test_acc=([0-9.]+) .* weights=([0-9a-f]{16})`)
	digests := map[string]string{}
	for _, run := range []struct {
		name string
		args []string
	}{
		{"ring", []string{"--exact"}},
		{"plain ring", []string{"--exact", "-x", "GORUN_ALGORITHM=ring"}},
		{"hub", []string{"--exact", "--strategy", "hub"}},
	} {
		out, code := job(t, 4, run.args, "../examples/torch_fmnist/train.py", "--model", "cnn", "--epochs", "1", "--train", "768", "--test", "300", "--batch", "96")
		m := finalRE.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("%s: exit %d:\n%s", run.name, code, out)
		}
		digests[run.name] = m[1] + " " + m[2]
	}
	if digests["ring"] != digests["plain ring"] || digests["ring"] != digests["hub"] {
		t.Fatalf("accuracy and weights differ: %v", digests)
	}
}

// TestFunctional: torch 2.x's functional collectives
// (torch.distributed._functional_collectives) on the gorun backend, on the
// default group, by its name and on a group of the even ranks, against
// PyTorch's definition. Torch 1.13 has none: the test skips there, and
// fails instead under GORUN_REQUIRE_TORCH2.
func TestFunctional(t *testing.T) {
	setup(t)
	skipRE := regexp.MustCompile(`gorun-funcol-skip torch=(\S+):.*`)
	okRE := regexp.MustCompile(`gorun-funcol-ok rank=(\d+) checks=(\d+)`)
	for _, np := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			out, code := job(t, np, nil, "tests/funcol.py", "--seed", fmt.Sprint(np))
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if m := skipRE.FindStringSubmatch(out); m != nil {
				if os.Getenv("GORUN_REQUIRE_TORCH2") != "" || !strings.HasPrefix(m[1], "1.") {
					t.Fatalf("torch %s skipped: %s", m[1], m[0])
				}
				t.Skip(m[0])
			}
			for r, m := range everyRank(t, out, np, okRE) {
				if m[2] == "0" {
					t.Fatalf("rank %s checked nothing", r)
				}
			}
		})
	}
}

// TestBackendSpec: init_process_group("gorun"), and torch 2.x's
// device:backend forms "cpu:gorun" and "cpu:gorun,cuda:gloo" (gorun for CPU
// tensors, Gloo for CUDA ones; it runs without a GPU), with torch's
// env:// rendezvous. Torch 1.13 refuses the device:backend forms with
// ValueError, which the test accepts from a torch 1 only.
func TestBackendSpec(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-backends-ok rank=(\d+) spec=(\S+) torch=(\S+) checks=(\d+)`)
	refusedRE := regexp.MustCompile(`gorun-backends-refused rank=(\d+) torch=(\S+) error=(.*)`)
	for _, spec := range []string{"gorun", "cpu:gorun", "cpu:gorun,cuda:gloo"} {
		t.Run(spec, func(t *testing.T) {
			out, code := job(t, 3, nil, "tests/backends.py", "--spec", spec)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if refused := lines(out, refusedRE); len(refused) > 0 {
				for r, m := range everyRank(t, out, 3, refusedRE) {
					if !strings.HasPrefix(m[2], "1.") || os.Getenv("GORUN_REQUIRE_TORCH2") != "" || spec == "gorun" {
						t.Fatalf("rank %s: torch %s refused %q: %s", r, m[2], spec, m[3])
					}
				}
				t.Logf("torch %s refuses %q: %s", refused["0"][2], spec, refused["0"][3])
				return
			}
			for r, m := range everyRank(t, out, 3, okRE) {
				if m[2] != spec || m[4] == "0" {
					t.Fatalf("rank %s: %v", r, m)
				}
			}
		})
	}
}
