// Package jobtest lets a test binary double as gorun: as the per-host
// agent, as a dedicated hub and as the rank program, so that tests start
// real jobs of real processes with the launcher.
package jobtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/agent"
	"github.com/gorun/gorun/ps"
)

// RankEnv marks a process started as a rank of a test job.
const RankEnv = "GORUN_JOBTEST_RANK"

// Dispatch runs this binary as gorun's agent or as a hub when it was
// started as one, and then reports ok with the exit code for TestMain to
// exit with; a hub writes what it served, and either writes its error, to
// w. It returns ok=false in the test process and in ranks (IsRank tells
// them apart).
func Dispatch(w io.Writer) (code int, ok bool) {
	if len(os.Args) < 2 {
		return 0, false
	}
	var err error
	switch os.Args[1] {
	case launcher.AgentCommandName:
		err = agent.Run(context.Background(), agent.Config{In: os.Stdin, Out: os.Stdout, Environ: os.Environ()})
	case launcher.HubCommandName:
		var cfg ps.HubConfig
		if cfg, err = ps.HubConfigFromEnv(os.LookupEnv); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			var st ps.HubStats
			st, err = ps.Serve(ctx, cfg, time.Second)
			stop()
			// Tests check that the hubs really served.
			fmt.Fprintf(w, "hub %d served %d requests\n", cfg.Index, st.Requests)
		}
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintln(w, err)
		return 1, true
	}
	return 0, true
}

// Main is the body of TestMain for a test binary that doubles as gorun:
// it serves as the agent or a hub when started as one, runs rank when
// started as a rank of a test job, and otherwise runs the tests. TestMain
// exits with the code it returns.
func Main(m *testing.M, rank func() int) int {
	if code, ok := Dispatch(os.Stdout); ok {
		return code
	}
	if IsRank() {
		return rank()
	}
	return m.Run()
}

// IsRank reports whether this process is a rank of a test job.
func IsRank() bool { return os.Getenv(RankEnv) == "1" }

// Launch runs np ranks of this binary with args; set adjusts the job. It
// returns how the job ended and everything the ranks printed.
func Launch(t testing.TB, np int, args []string, set func(*launcher.Config)) (launcher.Result, string) {
	t.Helper()
	proctest.SkipShort(t)
	cfg := launcher.DefaultConfig()
	cfg.NP, cfg.Program, cfg.Gorun, cfg.Args = np, os.Args[0], os.Args[0], args
	cfg.Env = []string{RankEnv + "=1", "GORACE=atexit_sleep_ms=0"}
	cfg.Grace, cfg.Timeout = 3*time.Second, 3*time.Minute
	var out proctest.Buffer
	cfg.Stdout, cfg.Stderr = &out, &out
	if set != nil {
		set(&cfg)
	}
	res, err := launcher.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// LoopbackAddrs reserves n loopback "host:port" addresses below the
// ephemeral range, as the launcher does for ranks (agent.FreePort): a
// port picked with :0 can be taken by another test's outgoing connection
// before the rank binds it.
func LoopbackAddrs(t testing.TB, n int) []string {
	t.Helper()
	var taken []int
	addrs := make([]string, 0, n)
	for len(addrs) < n {
		p, err := agent.FreePort(taken)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, p)
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	return addrs
}
