package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/internal/jobenv"
)

// elasticRankArg makes the test binary an elastic rank (elasticRank)
// instead of gorun: `TESTBINARY __elasticrank SCENARIO MARK`.
const elasticRankArg = "__elasticrank"

// elasticRank is a rank of the --elastic tests, in plain Go (no package
// collective): it talks to its agent over GORUN_CONTROL_FD as a rank
// does. Scenario "die": rank 2 exits with 7; "freeze": rank 1 reports
// rank 3 lost, and rank 3 hangs without reading its channel. The other
// ranks print the first line the channel gives them ("VIEW 1 0,1,3") and
// exit 0; one that gets nothing within 20 s exits with 3. Scenarios
// "rejoin" and "rejoin-fenced" are rejoinRank's.
func elasticRank(args []string) int {
	rank, _ := strconv.Atoi(os.Getenv(jobenv.RankVar))
	fd, err := strconv.Atoi(os.Getenv(jobenv.ControlFDVar))
	if err != nil || len(args) < 1 {
		fmt.Fprintf(os.Stderr, "elastic rank %d: %s=%q, args %q\n", rank, jobenv.ControlFDVar, os.Getenv(jobenv.ControlFDVar), args)
		return 2
	}
	ctl, err := net.FileConn(os.NewFile(uintptr(fd), "control"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "elastic rank %d: control fd %d: %v\n", rank, fd, err)
		return 2
	}
	if strings.HasPrefix(args[0], "rejoin") {
		return rejoinRank(args, rank, ctl)
	}
	switch {
	case args[0] == "die" && rank == 2:
		time.Sleep(200 * time.Millisecond)
		return 7
	case args[0] == "freeze" && rank == 3:
		fmt.Println("frozen")
		time.Sleep(5 * time.Minute)
		return 0
	case args[0] == "freeze" && rank == 1:
		time.Sleep(200 * time.Millisecond)
		if _, err := fmt.Fprintf(ctl, "suspect 3 0 frozen\n"); err != nil {
			fmt.Fprintf(os.Stderr, "elastic rank 1: %v\n", err)
			return 2
		}
	}
	_ = ctl.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(ctl).ReadString('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "elastic rank %d: no view: %v\n", rank, err)
		return 3
	}
	fmt.Printf("VIEW %s\n", strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "view "))
	return 0
}

// rejoinRank is a rank of the --max-restarts tests (args: the scenario
// and the test's mark). Rank 2 is lost on its first start: in scenario
// "rejoin" it exits with 1; in "rejoin-fenced" it hangs and rank 1
// reports it lost once it has started (startedFile), so gorun fences it. Restarted (GORUN_RESTART_COUNT=1), it prints the first line of its
// channel ("FIRST view 1 0,1,3"), says "join 127.0.0.1:4021 localhost/2",
// and prints the view that holds it ("VIEW 2 0,1,2,3 +2 ..."). The other
// ranks print every view until one holds rank 2. Each start of rank 2
// prints its gossip port (START, RESTART). Every rank exits 0 once it
// printed the view with rank 2, and 3 if none comes within 20 s.
func rejoinRank(args []string, rank int, ctl net.Conn) int {
	scenario, started := args[0], startedFile(args[1])
	count := os.Getenv(jobenv.RestartCountVar)
	port := os.Getenv(jobenv.GossipPortVar)
	in := bufio.NewReader(ctl)
	begin := time.Now()
	_ = ctl.SetReadDeadline(begin.Add(20 * time.Second))
	next := func() (string, bool) {
		line, err := in.ReadString('\n')
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d (restart %q): no view: %v\n", rank, count, err)
			return "", false
		}
		return strings.TrimSuffix(line, "\n"), true
	}
	switch {
	case rank == 2 && count == "":
		fmt.Printf("START port=%s\n", port)
		if scenario == "rejoin-fenced" {
			if err := os.WriteFile(started, nil, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "rank 2: %v\n", err)
				return 2
			}
			time.Sleep(5 * time.Minute)
		}
		return 1
	case rank == 2:
		fmt.Printf("RESTART %s port=%s\n", count, port)
		line, ok := next()
		if !ok {
			return 3
		}
		fmt.Printf("FIRST %s\n", line)
		if _, err := fmt.Fprintf(ctl, "join 127.0.0.1:4021 localhost/2\n"); err != nil {
			fmt.Fprintf(os.Stderr, "rank 2: join: %v\n", err)
			return 2
		}
	case rank == 1 && scenario == "rejoin-fenced":
		// Rank 2 printed its port before it says it started; under load
		// a fence could otherwise beat its first line.
		for _, err := os.Stat(started); err != nil; _, err = os.Stat(started) {
			if time.Since(begin) > 20*time.Second {
				fmt.Fprintf(os.Stderr, "rank 1: rank 2 did not start: %v\n", err)
				return 3
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := fmt.Fprintf(ctl, "suspect 2 0 frozen\n"); err != nil {
			fmt.Fprintf(os.Stderr, "rank 1: %v\n", err)
			return 2
		}
	}
	for {
		line, ok := next()
		if !ok {
			return 3
		}
		fmt.Printf("VIEW %s\n", strings.TrimPrefix(line, "view "))
		if v, err := control.ParseView(line); err == nil && slices.Contains(v.Live, 2) {
			return 0
		}
	}
}

// startedFile is where rank 2 of scenario rejoin-fenced says it started.
func startedFile(mark string) string { return filepath.Join(os.TempDir(), mark+".started") }

// elasticJob runs the test binary as 4 elastic ranks of scenario, with
// more gorun flags.
func elasticJob(t *testing.T, scenario, mark string, flags ...string) result {
	t.Helper()
	args := append([]string{"-np", "4", "--elastic", "--grace", "1s"}, flags...)
	return gorun(t, append(args, os.Args[0], elasticRankArg, scenario, mark)...)
}

// views returns each rank's VIEW lines.
// wentOn checks that the job exited 0 and that each of the survivors
// read exactly view, and returns every rank's views.
func wentOn(t *testing.T, r result, view string, survivors ...string) map[string][]string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
	}
	got := views(r.stdout)
	for _, rank := range survivors {
		if len(got[rank]) != 1 || got[rank][0] != view {
			t.Fatalf("rank %s read %q, want exactly view %s; stdout:\n%s", rank, got[rank], view, r.stdout)
		}
	}
	return got
}

func views(stdout string) map[string][]string {
	got := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^\[(\d+)\] VIEW (.*)$`).FindAllStringSubmatch(stdout, -1) {
		got[m[1]] = append(got[m[1]], m[2])
	}
	return got
}

// TestElasticRankDies: under --elastic, rank 2 of 4 exits with 7; the job
// goes on, every survivor gets view 1 of ranks 0, 1 and 3 on its control
// channel, gorun names rank 2 and exits 0, and nothing is left.
func TestElasticRankDies(t *testing.T) {
	mark := marker(t)
	start := time.Now()
	r := elasticJob(t, "die", mark)
	got := wentOn(t, r, "1 0,1,3", "0", "1", "3")
	if len(got["2"]) != 0 {
		t.Fatalf("the dead rank read a view: %q", got["2"])
	}
	for _, want := range []string{"rank 2 on localhost (pid ", "exited with code 7; --elastic: the job goes on with 3 ranks (view 1)", "finished without 1 lost rank(s) [2] (--elastic)"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	noLeftovers(t, mark)
	t.Logf("took %v", time.Since(start))
}

// TestElasticFence: rank 1 reports rank 3 (which hangs, as a frozen rank
// would) lost; gorun fences rank 3 with SIGKILL, the survivors get view 1
// of ranks 0, 1 and 2, gorun exits 0, and nothing is left.
func TestElasticFence(t *testing.T) {
	mark := marker(t)
	start := time.Now()
	r := elasticJob(t, "freeze", mark)
	wentOn(t, r, "1 0,1,2", "0", "1", "2")
	for _, want := range []string{
		"rank 1 suspects rank 3 (frozen); --elastic: fenced it",
		"rank 3 on localhost (pid ", "was killed by signal 9 (killed); --elastic: the job goes on with 3 ranks (view 1)",
		"finished without 1 lost rank(s) [3] (--elastic)",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "not by gorun") {
		t.Fatalf("the fence counted as a foreign kill:\n%s", r.stderr)
	}
	noLeftovers(t, mark)
	t.Logf("took %v", time.Since(start))
}

// TestElasticMinNP: with --min-np 4 a death of one rank of 4 fails the
// job with its code, saying so, and stops the others.
func TestElasticMinNP(t *testing.T) {
	mark := marker(t)
	r := elasticJob(t, "die", mark, "--min-np", "4")
	if r.code != 7 || !strings.Contains(r.stderr, "exited with code 7; --elastic: 3 rank(s) left, below --min-np 4") {
		t.Fatalf("exit %d, want 7 and below --min-np; stderr:\n%s", r.code, r.stderr)
	}
	if got := views(r.stdout); len(got) != 0 {
		t.Fatalf("views sent although the job failed: %v", got)
	}
	noLeftovers(t, mark)
}

// TestElasticFlags: --min-np needs --elastic (or --hub-elastic) and fits
// -np; --max-restarts needs --elastic with the ring strategy; --elastic
// with --strategy hub is --hub-elastic (no control channel); without
// --elastic a rank gets no control channel.
func TestElasticFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-np", "2", "--min-np", "2", "true"}, "--min-np needs --elastic (or --hub-elastic)"},
		{[]string{"-np", "2", "--elastic", "--min-np", "3", "true"}, "--min-np 3 is more than the job's 2 ranks"},
		{[]string{"-np", "2", "--elastic", "--min-np", "0", "true"}, "--min-np 0: want at least 1"},
		{[]string{"-np", "2", "--max-restarts", "1", "true"}, "--max-restarts needs --elastic with the ring strategy"},
		{[]string{"-np", "2", "--max-restarts", "0", "true"}, "--max-restarts needs --elastic with the ring strategy"},
		{[]string{"-np", "2", "--hub-elastic", "--max-restarts", "1", "true"}, "--max-restarts needs --elastic with the ring strategy (not --hub-elastic or --strategy hub)"},
		{[]string{"-np", "2", "--elastic", "--strategy", "hub", "--max-restarts", "1", "true"}, "--max-restarts needs --elastic with the ring strategy"},
		{[]string{"-np", "2", "--elastic", "--max-restarts", "-1", "true"}, "--max-restarts -1: want 0 or more"},
	} {
		if r := gorun(t, c.args...); r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("gorun %v: exit %d, stderr %q; want exit 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// S: how many sockets the rank holds (PMI_FD's, and the control
	// channel's with --elastic ring); K: what GORUN_CONTROL_FD names.
	show := `k=none; [ -n "$GORUN_CONTROL_FD" ] && k=$(readlink /proc/$$/fd/$GORUN_CONTROL_FD | cut -d: -f1)
		echo "H=$GORUN_HUB_ELASTIC E=$GORUN_ELASTIC C=$GORUN_CONTROL_FD K=$k S=$(for f in /proc/$$/fd/*; do readlink $f; done | grep -c socket:)"`
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--elastic", "--strategy", "hub", "--min-np", "1"}, `H=1 E= C= K=none S=1`},
		{[]string{"--hub-elastic"}, `H=1 E= C= K=none S=1`},
		{nil, `H= E= C= K=none S=1`},
		{[]string{"--elastic"}, `H= E=1 C=[45] K=socket S=2`},
		{[]string{"--elastic", "--pmi", "none"}, `H= E=1 C=3 K=socket S=1`},
	} {
		args := append(append([]string{"-np", "1"}, c.args...), "sh", "-c", show)
		r := gorun(t, args...)
		if r.code != 0 || !regexp.MustCompile(`^\[0\] `+c.want+"\n$").MatchString(r.stdout) {
			t.Errorf("gorun %v: exit %d, stdout %q, want %q; stderr:\n%s", c.args, r.code, r.stdout, c.want, r.stderr)
		}
	}
}

// TestElasticRejoin: under --elastic --max-restarts 2, rank 2 of 4 is
// lost on its first start (it exits with 1; or it hangs and is fenced on
// rank 1's suspect). The survivors get view 1 without it at once; gorun
// restarts it on its host with the same gossip port and
// GORUN_RESTART_COUNT=1, and its control channel's first line is view 1;
// once it says join, every rank, the joiner too, gets view 2 with rank 2
// in it and named as joining. Every rank then exits 0, gorun exits 0
// naming the restart (and no lost rank), and nothing is left.
func TestElasticRejoin(t *testing.T) {
	for _, tc := range []struct {
		scenario, loss string
	}{
		{"rejoin", "exited with code 1"},
		{"rejoin-fenced", "was killed by signal 9 (killed)"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			mark := marker(t)
			t.Cleanup(func() { os.Remove(startedFile(mark)) })
			start := time.Now()
			r := elasticJob(t, tc.scenario, mark, "--max-restarts", "2")
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
			}
			joined := "2 0,1,2,3 +2 127.0.0.1:4021 localhost/2"
			got := views(r.stdout)
			for _, rank := range []string{"0", "1", "3"} {
				if strings.Join(got[rank], "|") != "1 0,1,3|"+joined {
					t.Fatalf("rank %s read %q, want view 1 0,1,3 then view %s; stdout:\n%s", rank, got[rank], joined, r.stdout)
				}
			}
			if strings.Join(got["2"], "|") != joined {
				t.Fatalf("restarted rank 2 read %q, want view %s; stdout:\n%s", got["2"], joined, r.stdout)
			}
			m := regexp.MustCompile(`(?m)^\[2\] START port=(\d+)\n(?:.*\n)*?\[2\] RESTART 1 port=(\d+)\n\[2\] FIRST view 1 0,1,3$`).FindStringSubmatch(r.stdout)
			if m == nil || m[1] != m[2] {
				t.Fatalf("rank 2's starts (want one restart, GORUN_RESTART_COUNT=1, the same port, view 1 first): %q; stdout:\n%s", m, r.stdout)
			}
			for _, want := range []string{
				"rank 2 on localhost (pid ", tc.loss + "; --elastic: the job goes on with 3 ranks (view 1); restarting it (restart 1 of 2)",
				"rank 2 joined (restart 1, at 127.0.0.1:4021); --elastic: the job goes on with 4 ranks (view 2)",
				"gorun: rank 2 restarted 1 time (--max-restarts 2)\n",
			} {
				if !strings.Contains(r.stderr, want) {
					t.Fatalf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "finished without") {
				t.Fatalf("the restarted rank counted as lost:\n%s", r.stderr)
			}
			noLeftovers(t, mark)
			t.Logf("took %v", time.Since(start))
		})
	}
}
