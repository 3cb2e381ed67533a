package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/reduce"
)

func TestMain(m *testing.M) {
	os.Exit(jobtest.Main(m, func() int { return run(os.Args[1:], os.Stdout) }))
}

var resultRE = regexp.MustCompile(`\[0\] mode=(\w+) model=softmax straggler="([^"]*)" data=synthetic ranks=3 time=[0-9.]+s iterations=(\d+) samples=(\d+) accuracy=([0-9.]+) loss=[0-9.]+ idle=([0-9.]+) max_staleness=(\d+)`)

// TestModesLearn: every mode trains the synthetic set well past chance
// (10%) on 3 real ranks with a straggler, and each keeps its staleness
// bound.
func TestModesLearn(t *testing.T) {
	for _, mode := range []string{"ring", "bsp", "ssp", "asp"} {
		t.Run(mode, func(t *testing.T) {
			res, out := jobtest.Launch(t, 3, []string{"-mode", mode, "-data", "synthetic", "-lr", "0.5", "-iters", "150", "-samples", "3000", "-straggler", "2", "-slow", "2"}, func(c *launcher.Config) {
				if mode != "ring" {
					c.Strategy = "hub"
				}
			})
			m := resultRE.FindStringSubmatch(out)
			if res.ExitCode != 0 || m == nil || m[1] != mode || m[2] != "rank 2 x2" || m[3] != "450" {
				t.Fatalf("exit %d:\n%s", res.ExitCode, out)
			}
			acc, _ := strconv.ParseFloat(m[5], 64)
			stale, _ := strconv.Atoi(m[7])
			// Chance is 0.1. ASP's staleness depends on the machine's load
			// (tens of clocks under a loaded CI), which costs accuracy.
			floor := 0.8
			if mode == "asp" {
				floor = 0.5
			}
			if acc < floor {
				t.Fatalf("accuracy %v (floor %v):\n%s", acc, floor, out)
			}
			if (mode == "bsp" || mode == "ring") && stale != 0 || mode == "ssp" && stale > 2 {
				t.Fatalf("%s saw staleness %d", mode, stale)
			}
		})
	}
}

// TestLBBSPShrinksTheStraggler: with LB-BSP the hub gives the 4x slower
// rank a smaller share of the global batch than the others, and the
// shares always add up to the global batch.
func TestLBBSPShrinksTheStraggler(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m")
	res, out := jobtest.Launch(t, 3, []string{"-mode", "lbbsp", "-data", "synthetic", "-iters", "60", "-samples", "3000", "-straggler", "2", "-batch", "300", "-metrics", metrics},
		func(c *launcher.Config) { c.Strategy, c.Hubs = "hub", 1 })
	if res.ExitCode != 0 || resultRE.FindStringSubmatch(out) == nil {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	batches := make([][]int, 3)
	for r := range 3 {
		f, err := os.Open(fmt.Sprintf("%s.%d", metrics, r))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m ps.Metrics
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			batches[r] = append(batches[r], m.Batch)
		}
		f.Close()
	}
	n := min(len(batches[0]), len(batches[1]), len(batches[2]))
	if n < 10 {
		t.Fatalf("only %d iterations", n)
	}
	late := func(r int) float64 {
		s := 0
		for _, b := range batches[r][n/2 : n] {
			s += b
		}
		return float64(s) / float64(n-n/2)
	}
	for i := n / 2; i < n; i++ {
		if sum := batches[0][i] + batches[1][i] + batches[2][i]; sum != 300 {
			t.Fatalf("iteration %d: shares %d+%d+%d != 300", i, batches[0][i], batches[1][i], batches[2][i])
		}
	}
	if s, f := late(2), (late(0)+late(1))/2; s > 0.6*f {
		t.Fatalf("straggler's share %.1f, the others' %.1f: not rebalanced", s, f)
	}
}

var realRE = regexp.MustCompile(`\[0\] mode=(\w+) model=(\w+) straggler="none" data=fashion-mnist ranks=(\d) .* accuracy=([0-9.]+) loss=([0-9.]+)`)

// realData fails the test when Debian's dataset-fashion-mnist is not
// installed (.ci/run installs it): these tests are about the real files.
func realData(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(DefaultData, "train-images-idx3-ubyte.gz")); err != nil {
		t.Fatalf("the real Fashion-MNIST is needed: apt-get install dataset-fashion-mnist (%v)", err)
	}
}

// TestRealDataLearns: softmax regression on a slice of the real
// Fashion-MNIST (10,000 training samples, 2,000 test), 2 ranks, 150
// iterations of a 128-sample batch, through the ring and through hub BSP:
// test accuracy beats 0.72 (chance is 0.10; this setup reaches about
// 0.81 here).
func TestRealDataLearns(t *testing.T) {
	realData(t)
	for _, mode := range []string{"ring", "bsp"} {
		res, out := jobtest.Launch(t, 2, []string{"-mode", mode, "-train", "10000", "-test", "2000", "-iters", "150", "-batch", "128", "-lr", "0.5"},
			func(c *launcher.Config) {
				if mode == "bsp" {
					c.Strategy = "hub"
				}
			})
		m := realRE.FindStringSubmatch(out)
		if res.ExitCode != 0 || m == nil || m[1] != mode {
			t.Fatalf("exit %d:\n%s", res.ExitCode, out)
		}
		if acc, _ := strconv.ParseFloat(m[4], 64); acc < 0.72 {
			t.Fatalf("%s: accuracy %v, floor 0.72:\n%s", mode, acc, out)
		}
	}
}

// TestRingEqualsHubBSP: the MLP trained on real data by 3 ranks for 8
// iterations from the same seed, through the ring (local momentum SGD on
// the averaged gradient) and through hub BSP (the same update at the
// hub), ends with the same weights to 1e-9 (the two sum the ranks'
// gradients in different orders); with a constant rate and with
// -lr-decay cosine, which must change the weights.
func TestRingEqualsHubBSP(t *testing.T) {
	realData(t)
	dir := t.TempDir()
	m, _ := newModel("mlp", nil, 1)
	final := map[string][]float64{}
	for _, sched := range []string{"none", "cosine"} {
		weights := map[string][]float64{}
		for _, mode := range []string{"ring", "bsp"} {
			f := filepath.Join(dir, mode+sched)
			res, out := jobtest.Launch(t, 3, []string{"-mode", mode, "-model", "mlp", "-train", "3000", "-test", "500", "-iters", "8", "-batch", "96", "-lr-decay", sched, "-dump", f},
				func(c *launcher.Config) {
					if mode == "bsp" {
						c.Strategy = "hub"
					}
				})
			if res.ExitCode != 0 || realRE.FindStringSubmatch(out) == nil {
				t.Fatalf("%s %s: exit %d:\n%s", mode, sched, res.ExitCode, out)
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			weights[mode] = reduce.FromBytes[float64](b)
		}
		r, h := weights["ring"], weights["bsp"]
		if len(r) != len(m.Params) || len(h) != len(r) {
			t.Fatalf("%s: dumped %d and %d weights, the MLP has %d", sched, len(r), len(h), len(m.Params))
		}
		moved := 0
		for i := range r {
			if math.Abs(r[i]-h[i]) > 1e-9*math.Max(1, math.Abs(r[i])) {
				t.Fatalf("%s: weight %d: ring %v, hub %v", sched, i, r[i], h[i])
			}
			if r[i] != m.Params[i] {
				moved++
			}
		}
		if moved < len(r)/2 {
			t.Fatalf("%s: only %d of %d weights moved from their initial values", sched, moved, len(r))
		}
		final[sched] = r
	}
	differ := 0
	for i := range final["none"] {
		if math.Abs(final["none"][i]-final["cosine"][i]) > 1e-9 {
			differ++
		}
	}
	if differ < len(m.Params)/2 {
		t.Fatalf("-lr-decay cosine changed only %d of %d weights", differ, len(m.Params))
	}
}

// TestDecay: the cosine schedule starts at 1, is 1/2 halfway, reaches 0
// at the end and stays there, falling all the way; none is always 1.
func TestDecay(t *testing.T) {
	const iters = 10
	if decay("cosine", 0, iters) != 1 || math.Abs(decay("cosine", iters/2, iters)-0.5) > 1e-12 || math.Abs(decay("cosine", iters, iters)) > 1e-12 || math.Abs(decay("cosine", iters+3, iters)) > 1e-12 {
		t.Fatalf("cosine: %v %v %v %v", decay("cosine", 0, iters), decay("cosine", iters/2, iters), decay("cosine", iters, iters), decay("cosine", iters+3, iters))
	}
	for i := 1; i <= iters; i++ {
		if decay("cosine", i, iters) >= decay("cosine", i-1, iters) {
			t.Fatalf("cosine does not fall at %d", i)
		}
		if decay("none", i, iters) != 1 {
			t.Fatalf("none at %d: %v", i, decay("none", i, iters))
		}
	}
}

// TestCSVAndPlot: -csv writes each rank's iterations (one row per
// iteration, epochs rising, the payload each rank sent) and rank 0's
// learning curve; -plot draws it as a PNG. Through the ring and hub BSP.
func TestCSVAndPlot(t *testing.T) {
	realData(t)
	for _, mode := range []string{"ring", "bsp"} {
		dir := t.TempDir()
		prefix, plot := filepath.Join(dir, "m"), filepath.Join(dir, "curve.png")
		res, out := jobtest.Launch(t, 2, []string{"-mode", mode, "-train", "2000", "-test", "500", "-iters", "20", "-batch", "64", "-csv", prefix, "-plot", plot},
			func(c *launcher.Config) {
				if mode == "bsp" {
					c.Strategy = "hub"
				}
			})
		if res.ExitCode != 0 {
			t.Fatalf("exit %d:\n%s", res.ExitCode, out)
		}
		for r := range 2 {
			rows := readCSV(t, fmt.Sprintf("%s.%d.csv", prefix, r))
			if len(rows) != 21 || strings.Join(rows[0], ",") != "iteration,epoch,wall_s,compute_s,idle_s,bytes_sent,staleness,train_loss" {
				t.Fatalf("%s rank %d: %d rows, header %v", mode, r, len(rows), rows[0])
			}
			prev := -1.0
			for i, row := range rows[1:] {
				epoch, _ := strconv.ParseFloat(row[1], 64)
				bytes, _ := strconv.Atoi(row[5])
				if row[0] != strconv.Itoa(i+1) || epoch <= prev || bytes <= 0 {
					t.Fatalf("%s rank %d row %d: %v", mode, r, i+1, row)
				}
				prev = epoch
			}
		}
		curve := readCSV(t, prefix+".curve.csv")
		if len(curve) < 5 || curve[0][5] != "test_accuracy" {
			t.Fatalf("%s: curve %v", mode, curve)
		}
		f, err := os.Open(plot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Fatalf("%s: -plot: %v", mode, err)
		}
		f.Close()
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRingElastic: under gorun --elastic a ring job whose rank 2 is
// killed (or frozen) 0.3 s into training goes on with ranks 0 and 1: they
// take the model from rank 0, split the data between them, finish the
// budget and learn; gorun exits 0.
func TestRingElastic(t *testing.T) {
	doneRE := regexp.MustCompile(`mode=ring model=softmax straggler="none" data=synthetic ranks=2 time=[0-9.]+s iterations=\d+ samples=\d+ accuracy=([0-9.]+)`)
	for _, how := range []string{"kill", "stop"} {
		res, out := jobtest.Launch(t, 3, []string{"-mode", "ring", "-data", "synthetic", "-lr", "0.5", "-iters", "400", "-samples", "3000", "-fail-rank", "2", "-fail-at", "300ms", "-fail-how", how},
			func(c *launcher.Config) { c.Elastic = true })
		m := doneRE.FindStringSubmatch(out)
		if res.ExitCode != 0 || m == nil || !strings.Contains(out, "elastic: epoch 1, ranks [0 1], 1 view change(s)") {
			t.Fatalf("%s: exit %d:\n%s", how, res.ExitCode, out)
		}
		if acc, _ := strconv.ParseFloat(m[1], 64); acc < 0.8 {
			t.Fatalf("%s: accuracy %v after the loss:\n%s", how, acc, out)
		}
	}
}

// TestRingRejoinStall: under gorun --elastic --max-restarts 1 rank 2,
// killed 0.3 s into 6 s of training (time for a restart under the full
// suite's load), says when it failed (-stall), comes back
// once (it does not fail again), and every rank goes through the view
// without it and the view with it back; rank 0, whose state the others
// take, redoes exactly the interrupted step each time; every rank
// reports its longest iteration.
func TestRingRejoinStall(t *testing.T) {
	res, out := jobtest.Launch(t, 3, []string{"-mode", "ring", "-data", "synthetic", "-lr", "0.5", "-duration", "6s", "-samples", "3000",
		"-fail-rank", "2", "-fail-at", "300ms", "-fail-how", "kill", "-stall", "1s"},
		func(c *launcher.Config) { c.Elastic, c.MaxRestarts = true, 1 })
	if res.ExitCode != 0 || !regexp.MustCompile(`\[0\] mode=ring .* ranks=3 `).MatchString(out) {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	if n := len(regexp.MustCompile(`\[2\] fail how=kill t=[0-9.]+ unix_ms=\d+ iter=\d+`).FindAllString(out, -1)); n != 1 {
		t.Fatalf("rank 2 said it failed %d times:\n%s", n, out)
	}
	view := regexp.MustCompile(`\[(\d)\] view epoch=(\d+) ranks=([0-9,]+) joined=([0-9,-]+) t=[0-9.]+ prev_ms=(\d+) err_ms=(\d+) back_ms=(\d+) resync_ms=[0-9.]+ redone=(-?\d+) iter=\d+ restart=(\d) up_ms=\d+`)
	last := map[string]string{} // each rank's last view
	for _, m := range view.FindAllStringSubmatch(out, -1) {
		prev, errAt, back := atoi(t, m[5]), atoi(t, m[6]), atoi(t, m[7])
		if !(prev <= errAt && errAt <= back) || m[1] == "0" && m[8] != "1" || m[1] == "2" && m[9] != "1" {
			t.Fatalf("view line %q: times out of order, or rank 0 did not redo one step, or rank 2 not restarted:\n%s", m[0], out)
		}
		last[m[1]] = m[3] + " +" + m[4]
	}
	for _, r := range []string{"0", "1", "2"} {
		if last[r] != "0,1,2 +2" {
			t.Fatalf("rank %s's last view is %q, want ranks 0,1,2 with 2 joined:\n%s", r, last[r], out)
		}
		if !regexp.MustCompile(`\[` + r + `\] longest_iter ms=[0-9.]+ t=[0-9.]+ iter=\d+`).MatchString(out) {
			t.Fatalf("rank %s reported no longest iteration:\n%s", r, out)
		}
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOverlapSameWeights: the MLP trained by 3 ranks from the same seed
// with its gradients reduced in buckets during backward (-overlap) and
// after it (-overlap=false) ends with the same weights bit for bit: the
// same buckets summed in the same order, only at other times. The job
// reports four buckets holding every gradient and the stop vote, and
// the weights moved.
func TestOverlapSameWeights(t *testing.T) {
	dir := t.TempDir()
	m, _ := newModel("mlp", nil, 1)
	result := regexp.MustCompile(`\[0\] mode=ring model=mlp .* loss=([0-9.]+) .* comm_s=([0-9.]+) exposed_s=([0-9.]+) hidden=(-?[0-9.]+)\n`)
	buckets := regexp.MustCompile(`\[0\] buckets n=(\d+) bytes=([0-9,]+) overlap=(true|false)\n`)
	weights, losses := map[string][]float64{}, map[string]string{}
	for _, overlap := range []string{"true", "false"} {
		f := filepath.Join(dir, overlap)
		res, out := jobtest.Launch(t, 3, []string{"-mode", "ring", "-model", "mlp", "-data", "synthetic", "-samples", "3000", "-iters", "12", "-batch", "96",
			"-lr-decay", "cosine", "-overlap=" + overlap, "-dump", f}, nil)
		r, b := result.FindStringSubmatch(out), buckets.FindStringSubmatch(out)
		if res.ExitCode != 0 || r == nil || b == nil || b[3] != overlap {
			t.Fatalf("-overlap=%s: exit %d:\n%s", overlap, res.ExitCode, out)
		}
		total := 0
		for _, n := range strings.Split(b[2], ",") {
			total += int(atoi(t, n))
		}
		if b[1] != "4" || total != 8*(len(m.Params)+1) {
			t.Fatalf("-overlap=%s: %s buckets of %d bytes in all, want 4 of %d (the MLP's gradient and the stop vote):\n%s", overlap, b[1], total, 8*(len(m.Params)+1), out)
		}
		if comm, _ := strconv.ParseFloat(r[2], 64); comm <= 0 {
			t.Fatalf("-overlap=%s: no communication time reported:\n%s", overlap, out)
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		weights[overlap], losses[overlap] = reduce.FromBytes[float64](raw), r[1]
	}
	on, off := weights["true"], weights["false"]
	if len(on) != len(m.Params) || len(off) != len(on) {
		t.Fatalf("dumped %d and %d weights, the MLP has %d", len(on), len(off), len(m.Params))
	}
	moved := 0
	for i := range on {
		if math.Float64bits(on[i]) != math.Float64bits(off[i]) {
			t.Fatalf("weight %d: %v with overlap, %v without", i, on[i], off[i])
		}
		if on[i] != m.Params[i] {
			moved++
		}
	}
	if moved < len(on)/2 {
		t.Fatalf("only %d of %d weights moved from their initial values", moved, len(on))
	}
	if losses["true"] != losses["false"] {
		t.Fatalf("test loss %s with overlap, %s without", losses["true"], losses["false"])
	}
}

// TestRingElasticBuckets: the MLP, whose gradient makes several buckets,
// through an elastic job whose rank 2 is killed 0.3 s in and comes back
// (gorun --max-restarts 1): every rank goes through both view changes and
// ends in the view with rank 2 back, and the job finishes. (Several
// buckets a step, each its own collective, must not leave the survivors
// and the restarted rank disagreeing on the collectives after a view
// change.)
func TestRingElasticBuckets(t *testing.T) {
	res, out := jobtest.Launch(t, 3, []string{"-mode", "ring", "-model", "mlp", "-data", "synthetic", "-lr", "0.5", "-duration", "5s", "-samples", "3000", "-batch", "96",
		"-fail-rank", "2", "-fail-at", "300ms", "-fail-how", "kill"},
		func(c *launcher.Config) { c.Elastic, c.MaxRestarts = true, 1 })
	if res.ExitCode != 0 || !regexp.MustCompile(`\[0\] mode=ring model=mlp .* ranks=3 `).MatchString(out) || !strings.Contains(out, "elastic: epoch 2, ranks [0 1 2], 2 view change(s)") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	for _, r := range []string{"0", "1", "2"} {
		if !regexp.MustCompile(`\[` + r + `\] view epoch=2 ranks=0,1,2 joined=2 `).MatchString(out) {
			t.Fatalf("rank %s did not go through the view with rank 2 back:\n%s", r, out)
		}
	}
}

// TestBucketConfig: the bucket flags are MiB (fractions too) turned into
// bytes, at least one; and they must be above zero.
func TestBucketConfig(t *testing.T) {
	o := options{bucketMB: 0.25, firstMB: 1e-9, overlap: true}
	cfg := bucketConfig(o)
	if cfg.CapBytes != 256<<10 || cfg.FirstBytes != 1 || !cfg.Overlap || !cfg.Rebuild {
		t.Fatalf("%+v", cfg)
	}
	o.overlap = false
	if cfg := bucketConfig(o); cfg.Overlap {
		t.Fatalf("-overlap=false: %+v", cfg)
	}
	for _, args := range [][]string{{"-bucket-mb", "0"}, {"-first-bucket-mb", "-1"}, {"-bucket-mb", "NaN"}} {
		if code := run(args, io.Discard); code != 2 {
			t.Fatalf("%v: exit %d, want 2", args, code)
		}
	}
}
