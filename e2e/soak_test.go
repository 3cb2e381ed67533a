package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/soak"
)

// TestSoakOverSSH: 8 ranks on the 4 test hosts under gorun --elastic
// --max-restarts, struck from outside for 24 s by a random fault every 1.5
// to 3 s: kills, freezes, a restarted rank struck again while it joins,
// and a host cut off the network for 3 s, each kind at least twice. The
// job must heal every time: it ends with every rank back in the view, all
// exact, gorun exits 0, and no process is left on any host
// (bench/soak.sh runs the long form and reports it).
func TestSoakOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, hosts, 2)
	cfg := soak.DefaultConfig()
	cfg.Gorun = []string{r.gorun, "--ssh", r.ssh, "-hostfile", hf, "--elastic", "--max-restarts", "100", "--grace", "1s"}
	cfg.Program, _ = filepath.Abs(bin)
	cfg.ProgramArgs = []string{"-pause", "20ms"}
	cfg.Ranks = 2 * hosts
	for i := range hosts {
		cfg.Hosts = append(cfg.Hosts, fmt.Sprintf("gr-h%d", i+1))
	}
	cfg.For, cfg.MinGap, cfg.MaxGap = 24*time.Second, 1500*time.Millisecond, 3*time.Second
	cfg.Seed = uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("GORUN_SOAK_SEED"), 10, 64); err == nil {
		cfg.Seed = s // a failed run's seed, again (the faults' timing is the machine's)
	}
	cfg.Dir = r.testbins
	var log strings.Builder
	cfg.Log = func(s string) { fmt.Fprintf(&log, "%s %s\n", time.Now().Format("15:04:05.000"), s) }
	rep, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Healed(cfg.Ranks); err != nil {
		t.Fatalf("seed %d: %v\nstrikes:\n%s\nstderr:\n%s\nstdout (tail):\n%s", cfg.Seed, err, log.String(), rep.Stderr, lastLines(rep.Stdout, 30))
	}
	for _, k := range soak.Kinds {
		if rep.Faults[k] < 2 {
			t.Fatalf("seed %d: %d faults of kind %s, want 2 or more: %v\n%s", cfg.Seed, rep.Faults[k], k, rep.Faults, log.String())
		}
	}
	if rep.Restarts < 4 || rep.Steps < 100 {
		t.Fatalf("seed %d: %d restarts and %d steps: the faults did not take or the job did not run\n%s\n%s", cfg.Seed, rep.Restarts, rep.Steps, log.String(), rep.Stderr)
	}
	t.Logf("seed %d: faults %v, %d restarts, %d steps, longest out %v (rank %d), %v",
		cfg.Seed, rep.Faults, rep.Restarts, rep.Steps, rep.Longest.Round(time.Millisecond), rep.LongestRank, rep.Elapsed.Round(time.Millisecond))
	r.noLeftovers(t)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
