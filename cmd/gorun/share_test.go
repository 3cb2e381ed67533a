package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/collective"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/ps"
)

// shareRankArg makes the test binary a rank of the --hub-share tests
// (shareRank) instead of gorun: `TESTBINARY __sharerank TOTAL`.
const shareRankArg = "__sharerank"

// shareSpeed is what rank r reports of its last iteration: 10 samples in
// (r+1)·10 ms, so rank 0 is the fastest.
func shareSpeed(r int) (int, time.Duration) { return 10, time.Duration(r+1) * 10 * time.Millisecond }

// shareRank joins the job with the hub strategy (collective.ConfigFromEnv,
// as every gorun rank does), asks hub 0 for its LB-BSP share of TOTAL
// samples twice, first with nothing measured and then reporting
// shareSpeed, and prints "SHARE rank first second relaxed" (relaxed:
// Client.DeadlineRelaxed).
func shareRank(args []string) int {
	total, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "share rank: TOTAL:", err)
		return 2
	}
	cfg, err := collective.ConfigFromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "share rank:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := collective.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "share rank:", err)
		return 2
	}
	defer c.Close()
	first, err := c.Hub().Share(ctx, total, 0, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "share rank: first share:", err)
		return 3
	}
	n, d := shareSpeed(c.Rank())
	second, err := c.Hub().Share(ctx, total, n, d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "share rank: second share:", err)
		return 3
	}
	fmt.Printf("SHARE %d %d %d %d\n", c.Rank(), first, second, c.Hub().DeadlineRelaxed())
	return 0
}

// shares runs 3 share ranks under gorun with flags and returns each
// rank's two shares.
func shares(t *testing.T, total int, flags ...string) (first, second []int) {
	t.Helper()
	first, second, relaxed := sharesRelaxed(t, total, flags...)
	if fmt.Sprint(relaxed) != "[0 0 0]" {
		t.Fatalf("gorun %v: relaxed deadlines %v without a deadline", flags, relaxed)
	}
	return first, second
}

// sharesRelaxed is shares, with each rank's count of relaxed rounds.
func sharesRelaxed(t *testing.T, total int, flags ...string) (first, second, relaxed []int) {
	t.Helper()
	args := append(append([]string{"-np", "3", "--strategy", "hub"}, flags...), os.Args[0], shareRankArg, strconv.Itoa(total))
	r := gorun(t, args...)
	if r.code != 0 {
		t.Fatalf("gorun %v: exit %d\n%s\n%s", flags, r.code, r.stdout, r.stderr)
	}
	first, second, relaxed = make([]int, 3), make([]int, 3), make([]int, 3)
	m := regexp.MustCompile(`(?m)^\[\d\] SHARE (\d) (\d+) (\d+) (\d+)$`).FindAllStringSubmatch(r.stdout, -1)
	if len(m) != 3 {
		t.Fatalf("gorun %v: want a SHARE line from each of 3 ranks:\n%s", flags, r.stdout)
	}
	for _, l := range m {
		rank, _ := strconv.Atoi(l[1])
		first[rank], _ = strconv.Atoi(l[2])
		second[rank], _ = strconv.Atoi(l[3])
		relaxed[rank], _ = strconv.Atoi(l[4])
	}
	return first, second, relaxed
}

// TestHubShareDeadlineMiss: a deadline no split can meet (1 ms, where
// the slowest rank takes 3 ms a sample). With miss=relax, the default,
// the measured round is split for the least makespan, as the optimal
// rule without the deadline splits it, and every rank counts one relaxed
// round; with miss=fail the job fails, naming the deadline.
func TestHubShareDeadlineMiss(t *testing.T) {
	const total = 30
	speeds := make([]float64, 3)
	for r := range speeds {
		var s ps.Speed
		s.Observe(shareSpeed(r))
		speeds[r] = s.Rate()
	}
	want, err := ps.ShareConfig{Rule: ps.ShareOptimal}.Split(total, speeds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (ps.ShareConfig{Rule: ps.ShareOptimal, Deadline: time.Millisecond}).Split(total, speeds, nil); err == nil {
		t.Fatal("the test needs a deadline no split meets")
	}
	_, second, relaxed := sharesRelaxed(t, total, "--hub-share", "optimal:deadline=1ms")
	if fmt.Sprint(second) != fmt.Sprint(want) || fmt.Sprint(relaxed) != "[1 1 1]" {
		t.Fatalf("miss=relax: shares %v, relaxed %v; want the least makespan %v and one relaxed round on every rank", second, relaxed, want)
	}
	args := []string{"-np", "3", "--strategy", "hub", "--hub-share", "optimal:deadline=1ms,miss=fail", os.Args[0], shareRankArg, strconv.Itoa(total)}
	r := gorun(t, args...)
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "infeasible: deadline") {
		t.Fatalf("miss=fail: exit %d, want a failure naming the deadline:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestHubShareFlag: --hub-share reaches hub 0, colocated in rank 0 or a
// dedicated hub (--hubs 1): with the optimal rule and a cap on the
// fastest rank, every rank gets ShareConfig.Split's share for the speeds
// it reported, and the fastest stays within its cap, which the
// proportional split of the same job (no --hub-share) exceeds.
func TestHubShareFlag(t *testing.T) {
	const total, spec = 30, "optimal:cap=12/0/0,overhead=0s/5ms/0s"
	sc, err := ps.ParseShareConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	speeds := make([]float64, 3)
	for r := range speeds {
		var s ps.Speed
		s.Observe(shareSpeed(r))
		speeds[r] = s.Rate()
	}
	even, err := sc.Split(total, make([]float64, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sc.Split(total, speeds, nil)
	if err != nil {
		t.Fatal(err)
	}
	prop, err := ps.Shares(total, speeds)
	if err != nil {
		t.Fatal(err)
	}
	if prop[0] <= sc.Cap[0] {
		t.Fatalf("the test needs a cap the proportional split %v exceeds; cap %d", prop, sc.Cap[0])
	}
	for _, flags := range [][]string{{"--hub-share", spec}, {"--hub-share", spec, "--hubs", "1"}, {"-x", jobenv.HubShareVar + "=" + spec}} {
		first, second := shares(t, total, flags...)
		if fmt.Sprint(first) != fmt.Sprint(even) || fmt.Sprint(second) != fmt.Sprint(want) {
			t.Fatalf("gorun %v: shares %v then %v; the optimal rule gives %v then %v", flags, first, second, even, want)
		}
	}
	if _, second := shares(t, total); fmt.Sprint(second) != fmt.Sprint(prop) {
		t.Fatalf("no --hub-share: shares %v, the proportional split is %v", second, prop)
	}
}

// TestHubShareFlagRefused: a spec that does not parse, or whose lists do
// not have one entry per rank, fails the launch before any rank starts,
// and the error names the problem.
func TestHubShareFlagRefused(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--hub-share", "fastest"}, `--hub-share: ps: hub share rule "fastest": unknown rule "fastest"`},
		{[]string{"--hub-share", "optimal:cap=4/x"}, `cap of worker 1: "x" is not a whole number`},
		{[]string{"--hub-share", "optimal:deadline=-1s"}, "deadline: -1s is negative"},
		{[]string{"--hub-share", "optimal:cap=4/4/4"}, "Share.Cap has 3 entries, want one per worker (2)"},
		{[]string{"-x", jobenv.HubShareVar + "=optimal:price=1"}, "Share.Price has 1 entries, want one per worker (2)"},
		{[]string{"-x", jobenv.HubShareVar + "=optimal", "--hub-share", "optimal"}, "give --hub-share or -x GORUN_HUB_SHARE, not both"},
		{[]string{"--hubs", "1", "--hub-share", "optimal:overhead=1s"}, "Share.Overhead has 1 entries, want one per worker (2)"},
	} {
		args := append(append([]string{"-np", "2", "--strategy", "hub"}, c.args...), "sh", "-c", "touch "+ran)
		r := gorun(t, args...)
		if r.code != launcher.ExitLaunchFailed || !strings.Contains(r.stderr, c.want) {
			t.Errorf("gorun %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, launcher.ExitLaunchFailed, c.want)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("gorun %v: a rank ran", c.args)
		}
	}
	// Per-node starts count their ranks as --nnodes times --nproc-per-node.
	r := gorun(t, "--nnodes", "1", "--nproc-per-node", "3", "--hub-share", "optimal:cap=1/1", "sh", "-c", "touch "+ran)
	if r.code != launcher.ExitLaunchFailed || !strings.Contains(r.stderr, "want one per worker (3)") {
		t.Errorf("per-node: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("per-node: a rank ran")
	}
}
