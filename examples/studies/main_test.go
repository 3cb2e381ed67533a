package main

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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
	out := "[1] noise\n[0] mode=bsp model=mlp straggler=\"rank 3 x4\" data=fashion-mnist ranks=4 time=20.01s iterations=300 samples=9600 accuracy=0.8123 loss=0.5432 idle=0.41 max_staleness=0 rmse=0.1700 iter_ms=66.70 iter_sd_ms=12.30 rank_idle=0.5,0.4,0.45,0.1\n" +
		"[0] curve t=0.001 loss=2.3000 rmse=0.3000 accuracy=0.1000\n[0] curve t=1.000 loss=0.9000 rmse=0.2100 accuracy=0.7000\n"
	r, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "bsp" || r.Time != 20.01 || r.Samples != 9600 || r.Accuracy != 0.8123 || r.RMSE != 0.17 || r.IterSdMs != 12.3 ||
		!slices.Equal(r.RankIdle, []float64{0.5, 0.4, 0.45, 0.1}) || len(r.Curve) != 2 || r.Curve[1].Loss != 0.9 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parse("[0] mode=bsp and nothing else"); err == nil {
		t.Fatal("a line without the result's fields was accepted")
	}
}

// TestStudiesQuick runs both studies in their small versions with real
// jobs (2 ranks, the real Fashion-MNIST): each writes its report, whose
// table holds what the jobs printed, and charts that are PNG images.
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
	for _, study := range []string{"paramhub", "orchestration"} {
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
			if strings.HasPrefix(line, "+ gorun ") {
				jobs++
			}
		}
		rows := regexp.MustCompile(`(?m)^\| [0-9]+ \| [^|]+ \| .*\| 0\.[0-9]{4} \|`).FindAllString(text, -1)
		if jobs == 0 || len(rows) != jobs || !strings.Contains(text, "The whole study took") {
			t.Fatalf("%s: %d jobs, %d table rows:\n%s", study, jobs, len(rows), text)
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
		}
	}
}
