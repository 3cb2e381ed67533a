package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/examples/fmnist/nn"
	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/ps"
)

// naiveReachCurve walks each segment of the curve in fine steps and returns
// the first x whose interpolated accuracy is at least th, and the step's
// length (the answer's tolerance).
func naiveReachCurve(pts []point, th float64, x func(point) float64) (float64, float64, bool) {
	if len(pts) > 0 && pts[0].Accuracy >= th {
		return x(pts[0]), 0, true
	}
	const steps = 10000
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		for s := 1; s <= steps; s++ {
			f := float64(s) / steps
			if a.Accuracy+f*(b.Accuracy-a.Accuracy) >= th || s == steps && b.Accuracy >= th {
				return x(a) + f*(x(b)-x(a)), math.Abs(x(b)-x(a)) / steps, true
			}
		}
	}
	return 0, 0, false
}

// randomLearningCurve is a learning curve of n copies: rising times, steps that
// rise or repeat, accuracies anywhere (some equal to th, some repeated).
func randomLearningCurve(rng *rand.Rand, n int, th float64) []point {
	pts := make([]point, n)
	t, it := 0.0, 0
	for i := range pts {
		t += rng.Float64() * 5
		it += rng.IntN(3) * rng.IntN(50)
		acc := rng.Float64()
		switch rng.IntN(6) {
		case 0:
			acc = th
		case 1:
			if i > 0 {
				acc = pts[i-1].Accuracy
			}
		}
		pts[i] = point{T: t, Iter: it, Accuracy: acc}
	}
	return pts
}

func TestReach(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	xs := map[string]func(point) float64{"time": func(p point) float64 { return p.T }, "steps": func(p point) float64 { return float64(p.Iter) }}
	for trial := range 3000 {
		n := []int{0, 1, 2, 3, 5, 7, 11, 13}[trial%8]
		th := rng.Float64()
		pts := randomLearningCurve(rng, n, th)
		for name, x := range xs {
			got, ok := reach(pts, th, x)
			want, tol, wok := naiveReachCurve(pts, th, x)
			if ok != wok || ok && math.Abs(got-want) > tol+1e-9 {
				t.Fatalf("trial %d, %s, th %v: reach = %v, %v; naive %v±%v, %v\n%+v", trial, name, th, got, ok, want, tol, wok, pts)
			}
		}
	}
}

// TestAccuracyAt: on a rising curve, the accuracy at the step where
// reach says th is reached is th.
func TestAccuracyAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 2))
	for trial := range 2000 {
		n := 2 + trial%9
		pts := make([]point, n)
		it, acc := 0, 0.0
		for i := range pts {
			it += 1 + rng.IntN(100)
			acc += rng.Float64() / float64(n)
			pts[i] = point{T: float64(it), Iter: it, Accuracy: acc}
		}
		th := pts[0].Accuracy + rng.Float64()*(pts[n-1].Accuracy-pts[0].Accuracy)
		step, ok := reach(pts, th, func(p point) float64 { return float64(p.Iter) })
		if !ok {
			t.Fatalf("trial %d: %v within the curve was not reached: %+v", trial, th, pts)
		}
		if a, ok := accuracyAt(pts, step); !ok || math.Abs(a-th) > 1e-9 {
			t.Fatalf("trial %d: accuracy at step %v = %v, %v; want %v", trial, step, a, ok, th)
		}
	}
	if _, ok := accuracyAt([]point{{Iter: 5}}, 5); ok {
		t.Fatal("a curve of one copy has no segment to interpolate on")
	}
	if _, ok := accuracyAt([]point{{Iter: 5}, {Iter: 9}}, 10); ok {
		t.Fatal("a step past the curve was interpolated")
	}
}

// TestRingBytes checks the bytes model against a naive ring all-reduce:
// the buffer cut into n chunks as evenly as elements allow, each rank
// sending n-1 chunks in the reduce-scatter and n-1 in the all-gather;
// the trainer counts the mean over the ranks, rounded down.
func TestRingBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 3))
	for trial := range 500 {
		n := 1 + trial%9
		elems := []int{0, 1, 2, 3, 5, 7, 13, 54315, rng.IntN(100000)}[trial%9]
		size := []int{2, 4, 8}[rng.IntN(3)]
		chunk := func(c int) int { return elems/n + map[bool]int{true: 1, false: 0}[c < elems%n] }
		total := 0
		for r := range n {
			for s := range n - 1 {
				total += 2 * chunk((r-s+n)%n) * size // the same chunk in both phases
			}
		}
		if got, want := ringBytes(n, elems, size), int64(total/n); got != want {
			t.Fatalf("n %d, %d elements of %d bytes: ringBytes %d, naive %d", n, elems, size, got, want)
		}
	}
}

// TestHubPartition places the weights as the workers do (ps.Placement,
// partitions of -partition/4 elements) and checks that no hub holds more
// than one partition and that the partitions are the smallest that need
// no more partitions than hubs (a naive scan over sizes).
func TestHubPartition(t *testing.T) {
	for _, params := range []int{1, 2, 3, 5, 7, 13, 54314, 235146} {
		for hubs := 1; hubs <= 9; hubs++ {
			elems := hubPartition(params, hubs) / 4
			want := 1
			for (params+want-1)/want > hubs {
				want++
			}
			if elems != want {
				t.Fatalf("%d parameters over %d hubs: partitions of %d elements, the smallest that fit are %d", params, hubs, elems, want)
			}
			place, err := ps.NewPlacement(hubs, elems)
			if err != nil {
				t.Fatal(err)
			}
			per := make([]int, hubs)
			for _, p := range place.Add("w", params) {
				if per[p.Hub]++; per[p.Hub] > 1 {
					t.Fatalf("%d parameters over %d hubs: hub %d holds two partitions", params, hubs, p.Hub)
				}
			}
		}
	}
}

func TestResultFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 4))
	for range 200 {
		wire, push, comm := rng.Int64N(1<<40), rng.Int64N(1<<30), rng.Float64()*100
		line := fmt.Sprintf(`[0] mode=ring model=cnn straggler="rank 3 x4" data=fashion-mnist ranks=4 time=1.00s accuracy=0.5000 stats=all comm_s=%.3f wire_B=%d push_B=%d`, comm, wire, push)
		out := "[1] mode=ring wire_B=7\n[0] curve t=1 wire_B=9\n" + line + "\n[0] buckets n=3\n"
		f := resultFields(out)
		if v, ok := intField(f, "wire_B"); !ok || v != wire {
			t.Fatalf("wire_B %d, %v; want %d from %q", v, ok, wire, out)
		}
		if v, ok := intField(f, "push_B"); !ok || v != push {
			t.Fatalf("push_B %d, %v; want %d", v, ok, push)
		}
		if v, ok := floatField(f, "comm_s"); !ok || math.Abs(v-comm) > 0.0005 {
			t.Fatalf("comm_s %v, %v; want %v", v, ok, comm)
		}
		if f["straggler"] != "rank 3 x4" || f["mode"] != "ring" || f["time"] != "1.00s" {
			t.Fatalf("fields %v", f)
		}
		if _, ok := intField(f, "pull_B"); ok {
			t.Fatal("an absent field was found")
		}
	}
	if f := resultFields("[1] mode=ring wire_B=7\n"); f != nil {
		t.Fatalf("a line of rank 1 was taken for rank 0's: %v", f)
	}
}

func TestParseRate(t *testing.T) {
	unit := map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
	rng := rand.New(rand.NewPCG(36, 5))
	for range 500 {
		u := []string{"bit", "kbit", "mbit", "gbit", "tbit"}[rng.IntN(5)]
		v := float64(1+rng.IntN(1000)) / []float64{1, 10, 4}[rng.IntN(3)]
		s := strconv.FormatFloat(v, 'f', -1, 64) + u
		if rng.IntN(2) == 0 {
			s = strings.ToUpper(s)
		}
		got, ok := parseRate(s)
		if !ok || math.Abs(got-v*unit[u]) > 1e-9*v*unit[u] {
			t.Fatalf("parseRate(%q) = %v, %v; want %v", s, got, ok, v*unit[u])
		}
	}
	for _, bad := range []string{"", "100", "mbit", "100mbps", "1e3mbit", "-1gbit", "0mbit", "1 gbit", "1gbit/s"} {
		if v, ok := parseRate(bad); ok {
			t.Fatalf("parseRate(%q) = %v, want no rate", bad, v)
		}
	}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	if r := testnetRate(env(map[string]string{"RATE": "100mbit"})); r != "100mbit" {
		t.Fatalf("RATE=100mbit read as %q", r)
	}
	if r := testnetRate(env(nil)); r != "1gbit" {
		t.Fatalf("no RATE read as %q, want testnet.sh's default", r)
	}
}

// compressParams is the study's model size.
func compressParams(t *testing.T) int {
	m, err := nn.NewCNN(nn.Shape{H: 28, W: 28, C: 1}, 8, 16, 64, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	return len(m.Params)
}

// compressBuild builds gorun and the trainer into a temporary directory.
func compressBuild(t *testing.T) (gorun, trainer string) {
	t.Helper()
	bin := t.TempDir()
	for name, pkg := range map[string]string{"gorun": "../../cmd/gorun", "fmnist": "../fmnist"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	return filepath.Join(bin, "gorun"), filepath.Join(bin, "fmnist")
}

func compressNeedData(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err != nil {
		t.Fatalf("the real Fashion-MNIST is needed: apt-get install dataset-fashion-mnist (%v)", err)
	}
}

// TestCompressBytes checks the bytes the study computes where the trainer
// prints none against what the trainer counts itself, iteration by
// iteration: a ring of float64 and of float32 (the -csv rows'
// bytes_sent), and top-k's dense pull through the study's hubs (the
// -metrics lines' bytes_recv, with push_B the mean of their bytes_sent).
// Each method runs as the study runs it, for 3 iterations.
func TestCompressBytes(t *testing.T) {
	proctest.SkipShort(t)
	compressNeedData(t)
	gorun, trainer := compressBuild(t)
	params := compressParams(t)
	for _, np := range []int{2, 3} {
		methods, err := compressMethods(defaultCompressConfig(true), np, params)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range methods {
			if m.file != "float32" && m.file != "float64" && m.file != "topk" {
				continue
			}
			prefix := filepath.Join(t.TempDir(), m.file)
			args := append(append([]string{"-np", strconv.Itoa(np)}, m.gorun...), trainer)
			args = append(append(args, m.args...), "-model", "cnn", "-train", "600", "-test", "100", "-iters", "3", "-batch", "128", "-seed", "1",
				"-csv", prefix, "-metrics", prefix)
			cmd := exec.Command(gorun, args...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
			}
			ru := compressRun{m: m, fields: resultFields(string(out))}
			if ru.fields == nil {
				t.Fatalf("no result line:\n%s", out)
			}
			got := ru.bytes(np, params)
			if m.ring {
				for rank := range np {
					rows := compressReadCSV(t, fmt.Sprintf("%s.%d.csv", prefix, rank))
					col := compressColumn(t, rows, "bytes_sent")
					for i, row := range rows[1:] {
						if v, err := strconv.ParseInt(row[col], 10, 64); err != nil || v != got.sent {
							t.Fatalf("%s, %d ranks, rank %d, iteration %d: the trainer counted %q bytes, the study %d (computed %v)", m.name, np, rank, i, row[col], got.sent, got.computed)
						}
					}
				}
				continue
			}
			var pushed, iters int64
			for rank := range np {
				b, err := os.ReadFile(fmt.Sprintf("%s.%d", prefix, rank))
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					var it struct {
						Sent int64 `json:"bytes_sent"`
						Recv int64 `json:"bytes_recv"`
					}
					if err := json.Unmarshal([]byte(line), &it); err != nil {
						t.Fatalf("%s: %q: %v", m.name, line, err)
					}
					if it.Recv != got.pull || !got.pullComp && !strings.Contains(string(out), "pull_B=") {
						t.Fatalf("%s, %d ranks, rank %d: pulled %d bytes, the study says %d (computed %v)", m.name, np, rank, it.Recv, got.pull, got.pullComp)
					}
					pushed, iters = pushed+it.Sent, iters+1
				}
			}
			if iters != int64(3*np) || got.sent != pushed/iters {
				t.Fatalf("%s, %d ranks: %d bytes pushed over %d iterations; push_B %d", m.name, np, pushed, iters, got.sent)
			}
		}
	}
}

func compressReadCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("%s: %d rows, %v", path, len(rows), err)
	}
	return rows
}

func compressColumn(t *testing.T, rows [][]string, name string) int {
	t.Helper()
	for i, h := range rows[0] {
		if h == name {
			return i
		}
	}
	t.Fatalf("no column %q in %v", name, rows[0])
	return -1
}

// TestCompressQuick runs the study's small version with real jobs (2
// local ranks, the real Fashion-MNIST) and checks its report against its
// own data: a row per job, none failed; each final accuracy the last
// point of the method's curve; the points against float32 and the fp16
// and bf16 verdicts from those accuracies; the times to each threshold
// and their speed-ups recomputed from curves.csv by the naive walk; PNG
// charts with an SVG beside each.
func TestCompressQuick(t *testing.T) {
	proctest.SkipShort(t)
	compressNeedData(t)
	gorun, trainer := compressBuild(t)
	out := t.TempDir()
	var log bytes.Buffer
	o := options{gorun: gorun, trainer: trainer, out: out, date: "test", np: 2, quick: true, log: &log}
	path, err := compress(o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	c := defaultCompressConfig(true)
	methods, err := compressMethods(c, o.np, compressParams(t))
	if err != nil {
		t.Fatal(err)
	}
	jobs := len(regexp.MustCompile(`(?m)^\+ gorun `).FindAllString(log.String(), -1))
	if jobs != len(methods) {
		t.Fatalf("%d jobs for %d methods:\n%s", jobs, len(methods), log.String())
	}
	// The table's rows, by method name.
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		for _, m := range methods {
			if len(cells) > 1 && cells[0] == m.name {
				rows[m.file] = cells
			}
		}
	}
	if len(rows) != len(methods) {
		t.Fatalf("%d table rows for %d methods:\n%s", len(rows), len(methods), text)
	}
	curves := map[string][]point{}
	cr := compressReadCSV(t, filepath.Join(out, "compress-test", "curves.csv"))
	for _, r := range cr[1:] {
		p := point{T: atof(r[1]), Iter: atoi(r[2]), Accuracy: atof(r[3])}
		curves[r[0]] = append(curves[r[0]], p)
	}
	accOf := map[string]float64{}
	for _, m := range methods {
		cells, pts := rows[m.file], curves[m.file]
		if len(cells) != 8+2*len(c.Thresholds) || strings.HasPrefix(cells[1], "failed") || len(pts) < 3 {
			t.Fatalf("%s: row %q, %d curve points:\n%s", m.name, cells, len(pts), text)
		}
		acc := atof(cells[1])
		if got := fmt.Sprintf("%.4f", pts[len(pts)-1].Accuracy); got != cells[1] {
			t.Fatalf("%s: final accuracy %s in the table, %s at the curve's end", m.name, cells[1], got)
		}
		accOf[m.file] = acc
		for i, th := range c.Thresholds {
			tc, sc := cells[8+2*i], cells[9+2*i]
			want, tol, ok := naiveReachCurve(pts, th, func(p point) float64 { return p.T })
			if !ok {
				if tc != "not reached" || sc != "-" {
					t.Fatalf("%s: %v not reached on the curve, the table says %q, %q", m.name, th, tc, sc)
				}
				continue
			}
			var got, step float64
			if _, err := fmt.Sscanf(tc, "%g (step %g)", &got, &step); err != nil || math.Abs(got-want) > tol+0.05+0.002*want {
				t.Fatalf("%s: time to %v %q in the table, %v on the curve (%v)", m.name, th, tc, want, err)
			}
			wantStep, stol, _ := naiveReachCurve(pts, th, func(p point) float64 { return float64(p.Iter) })
			if math.Abs(step-wantStep) > stol+0.5 {
				t.Fatalf("%s: step to %v %q in the table, %v on the curve", m.name, th, tc, wantStep)
			}
			bt, _, bok := naiveReachCurve(curves["float32"], th, func(p point) float64 { return p.T })
			switch {
			case !bok:
				if sc != "float32 did not" {
					t.Fatalf("%s: speed-up %q where float32 never reached %v", m.name, sc, th)
				}
			default:
				var sp float64
				if _, err := fmt.Sscanf(sc, "%g×", &sp); err != nil || want > 0 && math.Abs(sp-bt/want) > 0.01+0.02*bt/want {
					t.Fatalf("%s: speed-up %q, float32's %v s over %v s (%v)", m.name, sc, bt, want, err)
				}
			}
		}
	}
	for _, m := range methods {
		cells := rows[m.file]
		if m.file == "float32" {
			if cells[2] != "(baseline)" {
				t.Fatalf("float32's row %q", cells)
			}
			continue
		}
		d := 100 * (accOf[m.file] - accOf["float32"])
		if got := atof(cells[2]); math.Abs(got-d) > 0.006 {
			t.Fatalf("%s: %s points against float32, the accuracies say %+.3f", m.name, cells[2], d)
		}
		want := "-"
		if m.file == "fp16" || m.file == "bf16" {
			want = map[bool]string{true: "yes", false: "**no**"}[math.Abs(d) <= 0.5]
		}
		if cells[3] != want {
			t.Fatalf("%s: target cell %q, want %q for %+.3f points", m.name, cells[3], want, d)
		}
		if !regexp.MustCompile(`^[0-9]+( \*computed\*)?$|^[0-9]+ push \+ [0-9]+ pull( \*computed\*)? = [0-9]+$`).MatchString(cells[7]) {
			t.Fatalf("%s: bytes cell %q", m.name, cells[7])
		}
	}
	for _, s := range []string{"## Where the time goes", "## Conclusions", "The whole study took", "fp16 accuracy: target", "bf16 accuracy: target"} {
		if !strings.Contains(text, s) {
			t.Fatalf("no %q in the report:\n%s", s, text)
		}
	}
	compressCheckCharts(t, out, text, 2)
}

// compressCheckCharts checks that the report links want PNG charts that decode,
// each with an SVG beside it.
func compressCheckCharts(t *testing.T, out, text string, want int) {
	t.Helper()
	imgs := regexp.MustCompile(`\]\(([^)]+\.png)\)`).FindAllStringSubmatch(text, -1)
	if len(imgs) != want {
		t.Fatalf("%d charts, want %d:\n%s", len(imgs), want, text)
	}
	for _, img := range imgs {
		f, err := os.Open(filepath.Join(out, img[1]))
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", img[1], err)
		}
		b, err := os.ReadFile(filepath.Join(out, strings.TrimSuffix(img[1], ".png")+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName xml.Name `xml:"svg"`
		}
		if err := xml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", img[1], err)
		}
	}
}

// TestCompressFailures: when the jobs fail, the study still writes its
// report, a failed row per method, and returns an error naming it.
func TestCompressFailures(t *testing.T) {
	proctest.SkipShort(t)
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "gorun"), "../../cmd/gorun")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gorun: %v\n%s", err, out)
	}
	out := t.TempDir()
	o := options{gorun: filepath.Join(bin, "gorun"), trainer: "/bin/false", out: out, date: "test", np: 2, quick: true, log: &bytes.Buffer{}}
	path, err := compress(o)
	report := filepath.Join(out, "compress-test.md")
	if err == nil || path != "" || !strings.Contains(err.Error(), report) {
		t.Fatalf("compress = %q, %v; want an error naming %s", path, err, report)
	}
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if n := len(regexp.MustCompile(`(?m)^\| [^|]+ \| failed: `).FindAllString(string(b), -1)); n != 6 {
		t.Fatalf("%d failed rows, want 6:\n%s", n, b)
	}
	compressCheckCharts(t, out, string(b), 0)
}

// FuzzResultFields: any output parses without a panic, and a result line
// built from the fuzzer's numbers gives them back.
func FuzzResultFields(f *testing.F) {
	f.Add("[0] mode=ring model=cnn straggler=\"none\" wire_B=217260\n", int64(5016), int64(0))
	f.Add("[1] mode=bsp push_B=1\n[0] mode=bsp model=cnn push_B=5016 stats=all\n", int64(1), int64(1<<40))
	f.Add("[0] mode=\"\n[0] mode= =x \"unterminated", int64(-1), int64(7))
	f.Fuzz(func(t *testing.T, out string, wire, push int64) {
		_ = resultFields(out)
		line := fmt.Sprintf("[0] mode=ring model=cnn straggler=\"rank 1 x2\" wire_B=%d push_B=%d", wire, push)
		fs := resultFields(strings.ReplaceAll(out, "[0] mode=", "[0] other=") + "\n" + line + "\n" + out)
		if v, ok := intField(fs, "wire_B"); !ok || v != wire {
			t.Fatalf("wire_B %d, %v; want %d", v, ok, wire)
		}
		if v, ok := intField(fs, "push_B"); !ok || v != push {
			t.Fatalf("push_B %d, %v; want %d", v, ok, push)
		}
	})
}

// FuzzParseRate: any string is a positive finite rate or none.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100mbit", "1gbit", "2.5Gbit", "100mbps", "", "1e9bit", "99999999999999999999999999999tbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseRate(s)
		if ok && !(v > 0 && !math.IsInf(v, 0)) {
			t.Fatalf("parseRate(%q) = %v", s, v)
		}
	})
}
