package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
)

func TestSplitFlags(t *testing.T) {
	got, err := splitFlags(`--ssh "ssh -F /tmp/my cfg" -hostfile 'h f'  -x A=1`)
	want := []string{"--ssh", "ssh -F /tmp/my cfg", "-hostfile", "h f", "-x", "A=1"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := splitFlags(`--ssh "ssh`); err == nil {
		t.Fatal("an unterminated quote was accepted")
	}
}

func TestParse(t *testing.T) {
	out := "[1] noise\n[0] mode=bsp model=mlp straggler=\"rank 3 x4\" data=fashion-mnist ranks=4 time=20.01s iterations=300 samples=9600 accuracy=0.8123 loss=0.5432 idle=0.41 max_staleness=0 rmse=0.1700 iter_ms=66.70 iter_sd_ms=12.30 rank_idle=0.5,0.4,0.45,0.1 compute_ms=40.00 sync_ms=26.70 params=235146 stats=all\n" +
		"[0] curve t=0.001 loss=2.3000 rmse=0.3000 accuracy=0.1000 iter=0\n[0] curve t=1.000 loss=0.9000 rmse=0.2100 accuracy=0.7000 iter=15\n"
	r, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "bsp" || r.Time != 20.01 || r.Samples != 9600 || r.Accuracy != 0.8123 || r.RMSE != 0.17 || r.IterSdMs != 12.3 ||
		!slices.Equal(r.RankIdle, []float64{0.5, 0.4, 0.45, 0.1}) || r.SyncMs != 26.7 || r.Params != 235146 || r.Stats != "all" || len(r.Curve) != 2 || r.Curve[1].Loss != 0.9 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parse("[0] mode=bsp and nothing else"); err == nil {
		t.Fatal("a line without the result's fields was accepted")
	}
}

// TestStudiesQuick runs every study in its small version with real
// jobs (2 ranks, the real Fashion-MNIST): each writes its report, whose
// table holds what the jobs printed, and charts that are PNG images with
// an SVG beside each.
func TestStudiesQuick(t *testing.T) {
	proctest.SkipShort(t)
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err != nil {
		t.Fatalf("the real Fashion-MNIST is needed: apt-get install dataset-fashion-mnist (%v)", err)
	}
	bin := t.TempDir()
	for name, pkg := range map[string]string{"gorun": "../../cmd/gorun", "fmnist": "../fmnist"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}
	out := t.TempDir()
	for _, study := range []string{"paramhub", "orchestration", "horovod", "ringtmp", "accuracy", "assign", "pipeline"} {
		t.Run(study, func(t *testing.T) { quickStudy(t, study, bin, out) })
	}
}

// quickStudy runs one study's small version with the binaries in bin,
// its report in out, and checks the report.
func quickStudy(t *testing.T, study, bin, out string) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"-quick", "-np", "2", "-gorun", filepath.Join(bin, "gorun"), "-trainer", filepath.Join(bin, "fmnist"), "-out", out, "-date", "test", study}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s", study, code, stderr.String())
	}
	report := strings.TrimSpace(stdout.String())
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	// Every accuracy the jobs printed is in the report's table.
	jobs := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(line, "+ ") && strings.Contains(line, "gorun ") {
			jobs++
		}
	}
	rowRE := map[string]string{
		"paramhub":      `(?m)^\| [0-9]+ \| [^|]+ \| .*\| 0\.[0-9]{4} \|`,
		"orchestration": `(?m)^\| [0-9]+ \| [^|]+ \| .*\| 0\.[0-9]{4} \|`,
		"horovod":       `(?m)^\| local \| [0-9]+ \| .*\| 0\.[0-9]{4} \|$`,
		// 2 idle runs, 2 runs without a failure and 4 kill drills, 2
		// widths x 2 strategies under a limit.
		"ringtmp":  `(?m)^\| (ring|hub BSP) \| 2 \| .*\| 0\.[0-9]{4} \|$|^\| (ring|elastic ring|elastic ring \+ rejoin|elastic hub BSP) \| (none|SIGKILL|SIGSTOP) \| .* \|$|^\| [0-9]+,[0-9]+ \| [0-9]+ \| [0-9.]+ \| (ok|fails[^|]*) \| (ok|fails[^|]*) \|$`,
		"accuracy": `(?m)^\| (softmax|mlp|cnn) \| [0-9]+ \| .*\| 0\.[0-9]{4} \| .*\|$`,
		// One row per configuration (a failed one says so).
		"assign": `(?m)^\| (BSP \(equal shares\)|LB-BSP \(proportional\)( \+ overhead)?|solver, [a-z ]+( \+ overhead)?) \| ([0-9.]+|—) \| [0-9]+ \| [0-9., ]+ \| [0-9., ]* \| (0\.[0-9]{4}|failed: .*) \|$`,
		// One row per run (variant and seed).
		"pipeline": `(?m)^\| (raw pixels|standardized)[^|]* \| [0-9]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| 0\.[0-9]{4} \|$`,
	}[study]
	rows := regexp.MustCompile(rowRE).FindAllString(text, -1)
	want := jobs
	switch study {
	case "ringtmp":
		want = jobs - 2 // each width's row holds two jobs
	case "accuracy":
		want = jobs - 2 // the ring-against-hub pair is a sentence
		if !regexp.MustCompile(`Ring against hub BSP, .*: test accuracy 0\.[0-9]{4} and 0\.[0-9]{4}, difference 0\.[0-9]{4}`).MatchString(text) {
			t.Fatalf("accuracy: no ring-against-hub line:\n%s", text)
		}
	}
	if jobs == 0 || len(rows) != want || !strings.Contains(text, "The whole study took") {
		t.Fatalf("%s: %d jobs, %d table rows:\n%s", study, jobs, len(rows), text)
	}
	if study == "ringtmp" {
		checkResilience(t, text)
	}
	if study == "assign" {
		checkAssign(t, text, stderr.String())
	}
	if study == "pipeline" && !regexp.MustCompile(`\*\*On this data the survey's claim (holds|does not hold|holds only in part)\*\*: `).MatchString(text) {
		t.Fatalf("pipeline: no closing sentence on the survey's claim:\n%s", text)
	}
	if study == "ringtmp" && (!strings.Contains(text, "| 64,64 | 55050 | 0.4 | ok | ok |") || !regexp.MustCompile(`\| 4096,4096 \| 20037642 \| 152\.9 \| fails \(exit [0-9]+: rank [01] out of memory\) \|`).MatchString(text)) {
		t.Fatalf("ringtmp: the small model must fit and the ring must run out of memory with the big one:\n%s", text)
	}
	for _, img := range regexp.MustCompile(`\]\(([^)]+\.png)\)`).FindAllStringSubmatch(text, -1) {
		f, err := os.Open(filepath.Join(out, img[1]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Fatalf("%s: %v", img[1], err)
		}
		f.Close()
		svg := strings.TrimSuffix(img[1], ".png") + ".svg"
		b, err := os.ReadFile(filepath.Join(out, svg))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName xml.Name `xml:"svg"`
		}
		if err := xml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", svg, err)
		}
	}
}

// checkAssign checks the quick assign study: the three solver runs went
// through gorun --hub-share, the two deadline runs paid the overhead
// (fmnist -overhead) that the solver's spec declares, rank by rank, and
// the report compares each solver run with the heuristic on its own
// objective and says whether each rule meets the deadline in the
// measured makespans (or that the solver's run failed).
func checkAssign(t *testing.T, text, jobs string) {
	t.Helper()
	if n := strings.Count(jobs, " --hub-share optimal:"); n != 3 {
		t.Fatalf("assign: %d jobs with --hub-share, want 3:\n%s", n, jobs)
	}
	paid := 0
	for _, line := range strings.Split(jobs, "\n") {
		m := regexp.MustCompile(` -overhead ([0-9,]+):([0-9.a-zµ]+) `).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		paid++
		if !strings.Contains(line, " -mode lbbsp ") || !strings.Contains(line, " -straggler "+m[1]+" ") {
			t.Fatalf("assign: the overhead is not on the stragglers of an LB-BSP run: %s", line)
		}
		spec := regexp.MustCompile(`--hub-share optimal:\S*overhead=(\S+)`).FindStringSubmatch(line)
		if spec == nil {
			continue // the proportional rule's run
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatal(err)
		}
		for r, s := range strings.Split(spec[1], "/") {
			want := time.Duration(0)
			if slices.Contains(strings.Split(m[1], ","), strconv.Itoa(r)) {
				want = d
			}
			if got, err := time.ParseDuration(s); err != nil || got != want {
				t.Fatalf("assign: rank %d declares %q to the solver and pays %v: %s", r, s, want, line)
			}
		}
	}
	if paid != 2 || !strings.Contains(jobs, "--hub-share optimal:deadline=") {
		t.Fatalf("assign: %d jobs pay -overhead, want 2 (the proportional rule and the solver's deadline):\n%s", paid, jobs)
	}
	verdicts := regexp.MustCompile(`(?m)^- (Time first|Resource first|Deadline \(measured makespan, overhead paid\)): (the median iteration's objective is [0-9.]+ ms with the solver against [0-9.]+ ms with the heuristic \([-+][0-9.]+ %\): the solver \*\*(beats|matches|loses to)\*\*|the run failed)`).FindAllString(text, -1)
	deadline := regexp.MustCompile(`(?m)^- Deadline [0-9.]+ ms \(overhead paid, measured\): the solver \*\*(meets|misses)\*\* it .* the heuristic \*\*(meets|misses)\*\* it|^- Deadline: the solver's run failed`)
	table := regexp.MustCompile(`(?m)^\| (LB-BSP \(proportional\)|solver, deadline) \+ overhead \| ([0-9.]+|NaN) \(([0-9.]+|NaN)\) \| [0-9]+ % \| ([0-9.]+|NaN) ms \| ([0-9.]+|NaN) \| ([0-9.]+|NaN) \|$`).FindAllString(text, -1)
	if len(verdicts) != 3 || !deadline.MatchString(text) || len(table) != 2 || strings.Contains(text, "lacks") {
		t.Fatalf("assign: the checks are missing (%d verdicts, %d deadline rows):\n%s", len(verdicts), len(table), text)
	}
	checkAssignCalibration(t, text, jobs)
}

// checkAssignCalibration checks the assign report's calibration against
// naive references computed here from the runs' metrics files: each
// rank's fit (fixed + perSample·x, least squares by the normal equations
// over iterations 1..K−1 of the LB-BSP run, with the BSP run's added
// where the slope is less than twice its standard error; the hub's
// clamp), the solver's modelled makespan T_opt against a brute force
// over every split, the proportional split's T_prop, the overhead as the
// grid's best separating one, and the deadline's rule (at least 1.15 ×
// T_opt, said to separate the rules only if below T_prop).
func checkAssignCalibration(t *testing.T, text, jobs string) {
	t.Helper()
	metrics := func(mode string) string {
		for _, line := range strings.Split(jobs, "\n") {
			if strings.Contains(line, " -mode "+mode+" ") && !strings.Contains(line, "--hub-share") && !strings.Contains(line, " -overhead ") {
				if m := regexp.MustCompile(` -metrics (\S+)`).FindStringSubmatch(line); m != nil {
					return m[1]
				}
			}
		}
		t.Fatalf("assign: no %s job with -metrics:\n%s", mode, jobs)
		return ""
	}
	type point struct{ x, y float64 }
	read := func(prefix string) [][]point {
		var out [][]point
		for r := 0; ; r++ {
			b, err := os.ReadFile(prefix + "." + strconv.Itoa(r))
			if err != nil {
				break
			}
			var pts []point
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var m struct {
					Batch   int   `json:"batch"`
					Compute int64 `json:"compute_ns"`
				}
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatal(err)
				}
				pts = append(pts, point{float64(m.Batch), float64(m.Compute) / 1e6}) // ms
			}
			out = append(out, pts)
		}
		k := len(out[0])
		for _, p := range out {
			k = min(k, len(p))
		}
		for r := range out {
			out[r] = out[r][1:k]
		}
		return out
	}
	lb, even := read(metrics("lbbsp")), read(metrics("bsp"))
	np := len(lb)
	// ols is the normal equations' solution, the slope's standard error,
	// and the clamped fit.
	ols := func(pts []point) (slope, se, fixed, perSample float64) {
		var n, sx, sy, sxx, sxy float64
		for _, p := range pts {
			if p.x > 0 && p.y > 0 {
				n, sx, sy, sxx, sxy = n+1, sx+p.x, sy+p.y, sxx+p.x*p.x, sxy+p.x*p.y
			}
		}
		slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
		a := (sy - slope*sx) / n
		ss := 0.0
		for _, p := range pts {
			if p.x > 0 && p.y > 0 {
				e := p.y - a - slope*p.x
				ss += e * e
			}
		}
		se = math.Sqrt(ss / (n - 2) / (sxx - sx*sx/n))
		fixed = min(max(a, 0), 0.99*sy/n)
		return slope, se, fixed, (sy/n - fixed) / (sx / n)
	}
	fitRE := regexp.MustCompile(`rank ([0-9]+): ([0-9.]+) \+ ([0-9.]+)·x ms \((LB-BSP|LB-BSP and BSP), shares`)
	got := fitRE.FindAllStringSubmatch(text, -1)
	if len(got) != np {
		t.Fatalf("assign: %d fits in the report for %d ranks:\n%s", len(got), np, text)
	}
	fixed, perSample := make([]float64, np), make([]float64, np)
	for r, g := range got {
		slope, se, f, p := ols(lb[r])
		from := "LB-BSP"
		if slope < 2*se {
			_, _, f, p = ols(append(slices.Clone(lb[r]), even[r]...))
			from = "LB-BSP and BSP"
		}
		fixed[r], perSample[r] = f, p
		gf, _ := strconv.ParseFloat(g[2], 64)
		gp, _ := strconv.ParseFloat(g[3], 64)
		if g[1] != strconv.Itoa(r) || g[4] != from || math.Abs(gf-f) > 0.001 || math.Abs(gp-p) > 0.0001 {
			t.Fatalf("assign: rank %d's fit is %s + %s·x ms (%s), the reference %.3f + %.4f·x ms (%s)", r, g[2], g[3], g[4], f, p, from)
		}
	}
	calRE := regexp.MustCompile(`from 0\.5 ms to ([0-9.]+) ms .* at ([0-9.]+) ms: the solver's split is \[([0-9 ]+)\] with T_opt = ([0-9.]+) ms, the proportional split \[([0-9 ]+)\] with T_prop = ([0-9.]+) ms .* rounded up to 0\.1 ms: ([0-9.]+) ms\. (The proportional split's modelled makespan is [0-9.]+ % above it|\*\*The deadline does not separate the rules\*\*)`)
	m := calRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("assign: no calibration sentence:\n%s", text)
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	split := func(s string) []float64 {
		var x []float64
		for _, f := range strings.Fields(s) {
			x = append(x, num(f))
		}
		return x
	}
	hi, o, prop, tOpt, tProp, deadline := num(m[1]), num(m[2]), split(m[5]), num(m[4]), num(m[6]), num(m[7])
	batch := 0
	for _, x := range split(m[3]) {
		batch += int(x)
	}
	slow := func(r int) bool { return r >= np/2 }
	makespan := func(x []float64, o float64) float64 {
		T := 0.0
		for r := range x {
			v := fixed[r] + perSample[r]*x[r]
			if slow(r) {
				v += o
			}
			T = max(T, v)
		}
		return T
	}
	// best is the least makespan over every split with a sample or more
	// each.
	best := func(o float64) float64 {
		x := make([]float64, np)
		var rec func(r, left int) float64
		rec = func(r, left int) float64 {
			if r == np-1 {
				x[r] = float64(left)
				return makespan(x, o)
			}
			b := math.Inf(1)
			for v := 1; v <= left-(np-1-r); v++ {
				x[r] = float64(v)
				b = min(b, rec(r+1, left-v))
			}
			return b
		}
		return rec(0, batch)
	}
	if bf := best(o); math.Abs(bf-tOpt) > 0.006 {
		t.Fatalf("assign: T_opt %.2f ms at overhead %g ms, a brute force finds %.4f ms", tOpt, o, bf)
	}
	if v := makespan(prop, o); math.Abs(v-tProp) > 0.006 {
		t.Fatalf("assign: T_prop %.2f ms, the proportional split %v under the fits %.4f ms", tProp, prop, v)
	}
	for g := 0.5; g <= hi+1e-9; g += 0.5 {
		if r := makespan(prop, g) / best(g); r > tProp/tOpt*(1+0.002) {
			t.Fatalf("assign: overhead %g ms separates the rules more (%.3f) than the chosen %g ms (%.3f)", g, r, o, tProp/tOpt)
		}
	}
	mm := regexp.MustCompile(`The deadline's margin over T_opt, ([0-9.]+), is the larger of 1\.15 and the spread of the LB-BSP run's measured makespans \(95th percentile over median: ([0-9.]+)\)`).FindStringSubmatch(text)
	if mm == nil {
		t.Fatalf("assign: no sentence on the deadline's margin:\n%s", text)
	}
	margin := num(mm[1])
	if math.Abs(margin-max(1.15, num(mm[2]))) > 0.0001 {
		t.Fatalf("assign: margin %v, the larger of 1.15 and %v", margin, mm[2])
	}
	if deadline < margin*tOpt-0.005 || deadline > max(math.Sqrt(tOpt*tProp), margin*tOpt)+0.105 {
		t.Fatalf("assign: deadline %.1f ms for T_opt %.2f, T_prop %.2f ms and margin %.4f", deadline, tOpt, tProp, margin)
	}
	if separates := strings.HasPrefix(m[8], "The proportional"); separates != (deadline < tProp) {
		t.Fatalf("assign: deadline %.1f ms, T_prop %.2f ms, yet the report says %q", deadline, tProp, m[8])
	}
}

// checkResilience checks the quick RingTMP study's drills (2 ranks, rank
// 1 killed): the plain ring fails, the elastic ring goes on with one rank
// and redoes one step, the restarted rank comes back, the elastic hub
// goes on; every run reports its accuracy, and the survivors their stall.
func checkResilience(t *testing.T, text string) {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 10 && (cells[1] == "none" || strings.HasPrefix(cells[1], "SIG")) {
			rows[cells[0]+"/"+cells[1]] = cells
		}
	}
	acc := regexp.MustCompile(`^0\.[0-9]{4} \([0-9.]+ s\)$`)
	secs := regexp.MustCompile(`^[0-9]+\.[0-9]{2} s`)
	for _, k := range []string{"ring/none", "elastic hub BSP/none", "ring/SIGKILL", "elastic ring/SIGKILL", "elastic ring + rejoin/SIGKILL", "elastic hub BSP/SIGKILL"} {
		c, ok := rows[k]
		if !ok {
			t.Fatalf("ringtmp: no row %q:\n%s", k, text)
		}
		bad := func(why string) { t.Fatalf("ringtmp: %s: %s:\n%s", k, why, text) }
		if !acc.MatchString(c[5]) {
			bad("no final accuracy")
		}
		if k == "ring/SIGKILL" {
			if c[2] == "0" || !strings.Contains(c[3], "failed after") || c[6] != "never (the job ended)" {
				bad("the plain ring went on")
			}
			continue
		}
		if c[2] != "0" || !secs.MatchString(c[8]) {
			bad("gorun failed, or the survivors reported no stall")
		}
		if k == "ring/none" || k == "elastic hub BSP/none" {
			continue
		}
		// (The hub may go on within -stall: then no gap tells when.)
		if !acc.MatchString(c[4]) || !secs.MatchString(c[6]) && !(k == "elastic hub BSP/SIGKILL" && strings.HasPrefix(c[6], "under ")) {
			bad("no accuracy before the kill, or no recovery time")
		}
		switch k {
		case "elastic ring/SIGKILL":
			if !strings.Contains(c[3], "view 1 at") || !strings.HasPrefix(c[7], "1 step(s) redone") {
				bad("no view change, or not one step redone")
			}
		case "elastic ring + rejoin/SIGKILL":
			if !strings.Contains(c[3], "rank 1 back") || !secs.MatchString(c[9]) {
				bad("the restarted rank did not come back")
			}
		case "elastic hub BSP/SIGKILL":
			if !strings.Contains(c[3], "without rank 1") {
				bad("the hub did not go on without rank 1")
			}
		}
	}
}

func TestFailure(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"[0] fatal error: out of memory allocating heap arena metadata\n", "exit 2: rank 0 out of memory"},
		{"x\n[1] fatal error: runtime: out of memory\n", "exit 2: rank 1 out of memory"},
		{"[hub 0] fatal error: runtime: cannot allocate memory\n", "exit 2: hub 0 out of memory"},
		{"[1] runtime: failed to create new OS thread (have 7 already; errno=12)\n[1] fatal error: newosproc\n", "exit 2: rank 1 out of memory"},
		{"[0] panic: index out of range\n[0] fatal error: all goroutines are asleep\n", "exit 2: [0] fatal error: all goroutines are asleep"},
		{"gorun: rank 0 on localhost (pid 1) exited with code 2\n", "exit 2: gorun: rank 0 on localhost (pid 1) exited with code 2"},
	} {
		if got := failure(2, c.out); got != c.want {
			t.Errorf("failure(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}
