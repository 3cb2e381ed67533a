package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/gorun/gorun/internal/jobtest"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/ps"
)

func TestMain(m *testing.M) {
	os.Exit(jobtest.Main(m, func() int { return run(os.Args[1:], os.Stdout) }))
}

var (
	finalRE = regexp.MustCompile(`\[0\] final: loss ([0-9.]+) \(least squares ([0-9.]+)\), \|w - w\*\| ([0-9.]+), \|w - least squares\| ([0-9.]+), ranks (\d)`)
	firstRE = regexp.MustCompile(`\[0\] round 1: loss ([0-9.]+)`)
)

// TestTrainsToLeastSquares: 3 real ranks, hubs colocated or dedicated,
// average their weights at the hub until they reach the least-squares
// solution; every rank writes one metrics line per round.
func TestTrainsToLeastSquares(t *testing.T) {
	for _, hubs := range []int{0, 2} {
		t.Run(fmt.Sprintf("hubs%d", hubs), func(t *testing.T) {
			dir := t.TempDir()
			metrics := filepath.Join(dir, "m.jsonl")
			res, out := jobtest.Launch(t, 3, []string{"-rounds", "40", "-lr", "0.002", "-metrics", metrics}, func(c *launcher.Config) {
				c.Strategy, c.Hubs = "hub", hubs
			})
			if res.ExitCode != 0 {
				t.Fatalf("exit %d:\n%s", res.ExitCode, out)
			}
			m := finalRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no final line:\n%s", out)
			}
			f := firstRE.FindStringSubmatch(out)
			loss, _ := strconv.ParseFloat(m[1], 64)
			lsLoss, _ := strconv.ParseFloat(m[2], 64)
			toTrue, _ := strconv.ParseFloat(m[3], 64)
			if f == nil || m[5] != "3" {
				t.Fatalf("output:\n%s", out)
			}
			first, _ := strconv.ParseFloat(f[1], 64)
			if loss > 1.01*lsLoss || toTrue > 0.05 || first < 2*loss {
				t.Fatalf("did not converge to least squares: first loss %v, %s\n%s", first, m[0], out)
			}
			for r := range 3 {
				f, err := os.Open(fmt.Sprintf("%s.%d", metrics, r))
				if err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(f)
				lines := 0
				for sc.Scan() {
					var rec ps.Metrics
					if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
						t.Fatal(err)
					}
					if rec.Worker != r || rec.Iteration != lines || rec.BytesSent != 16*8 || rec.BytesRecv != 16*8 || rec.Batch < 666 || rec.Compute <= 0 || rec.Push <= 0 {
						t.Fatalf("rank %d line %d: %s", r, lines, sc.Text())
					}
					lines++
				}
				f.Close()
				if lines != 40 {
					t.Fatalf("rank %d wrote %d metrics lines, want 40", r, lines)
				}
			}
		})
	}
}

func TestWithoutHubs(t *testing.T) {
	res, out := jobtest.Launch(t, 2, []string{"-rounds", "1"}, nil)
	if res.ExitCode == 0 || !regexp.MustCompile(`gorun --strategy hub`).MatchString(out) {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
}
