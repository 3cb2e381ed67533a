package launcher

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"
)

// Config describes one job. Build it with DefaultConfig and change what
// you need.
type Config struct {
	NP            int    // number of ranks; 0 means one per slot
	Hosts         []Host // nil: every rank on this machine
	MapBy         MapBy
	Oversubscribe bool
	Program       string
	Args          []string
	Env           []string // extra "KEY=VALUE" for every rank (-x)
	Wdir          string   // working directory of the ranks ("" = the launcher's)
	// StatusLine: keep a live status line on Stderr (gorun sets it when
	// stderr is a terminal and --quiet is not given).
	StatusLine bool
	// Timeline, if set, is where gorun writes one Chrome trace (JSON) of
	// every rank's collectives and spans, on one clock, when the job ends.
	Timeline  string
	WdirSet   bool   // Wdir came from the user: failing to enter it is an error
	TagOutput bool   // prefix every line with "[rank] "
	OutputDir string // if set, also write DIR/rank.N/{stdout,stderr}
	Timeout   time.Duration
	// StallWarn: when ranks using gorun's collectives make no progress
	// for this long while one of them waits in a collective, print where
	// every rank is (again at growing intervals); 0 is off. StallAbort:
	// end such a job after this long stalled (exit 124); 0 is off.
	StallWarn, StallAbort time.Duration
	// DumpWait is how long Go ranks get to write their goroutine dumps
	// (SIGQUIT) before a timeout, a stall abort or a second Ctrl-C stops
	// them.
	DumpWait  time.Duration
	Grace     time.Duration // from SIGTERM to SIGKILL
	Preflight time.Duration // how long every host's agent gets to report ready
	// AgentWait bounds the wait on a host that has gone silent once the
	// job is ending: when the ranks are told to stop, every agent is
	// pinged, and one that says nothing for AgentWait (a partitioned or
	// unreachable host) is reported by name, its SSH session is killed,
	// and the job ends without it. Agents that answer get the grace period
	// as before. 0 turns the bound off: a silent host is then killed only
	// Grace plus 10 s after the stop.
	AgentWait   time.Duration
	SSH         []string // remote agent command, default ["ssh"]
	Gorun       string   // this gorun binary, started locally as the agent
	RemoteGorun string   // gorun's path on remote hosts ("" = Gorun)
	Strategy    string   // GORUN_STRATEGY for the ranks ("" = leave unset)
	// Hubs starts this many dedicated ParamHub processes (gorun __hub) on
	// the job's hosts, round-robin in host order, and gives every rank
	// their addresses in GORUN_HUBS. They stop when the ranks are done.
	Hubs       int
	HubElastic bool // hubs finish BSP rounds without a lost rank
	// Elastic: a rank's death does not end the job while MinNP ranks are
	// still running. With the ring strategy (Strategy "" or "ring") the
	// launcher sequences the membership: every rank gets GORUN_ELASTIC=1
	// and a control channel (GORUN_CONTROL_FD, package control), each
	// exit while the job goes on sends the running ranks a new view, and
	// a rank another one suspects is fenced (killed). With Strategy "hub"
	// it is HubElastic.
	Elastic bool
	// MinNP, with Elastic or HubElastic, is the fewest running ranks a
	// failed rank may leave; below it the job fails. 0 means 1.
	MinNP int
	// MaxRestarts, with Elastic and the ring strategy, is how often each
	// lost rank (a failed exit, a kill, a fence, its host's agent lost) is
	// started again, with the same rank and environment plus
	// GORUN_RESTART_COUNT=k and a fresh control channel whose first line
	// is the current view; once it says join, the next view holds it. It
	// restarts on its own host while that host's agent is there, else on
	// the live host with the most free slots; with no free slot anywhere
	// it is lost for good (see the package doc, Supervision). 0: none.
	MaxRestarts int
	// PMI is PMIOn ("pmi1", also ""): every rank gets a PMI-1 socket
	// (PMI_FD), so MPICH programs find their peers; or PMIOff ("none").
	PMI string
	// Metrics, if not nil, is where the launcher serves the job's
	// metrics (GET /metrics, Prometheus text format 0.0.4: ranks alive,
	// the elastic view, each rank's restarts, collectives and payload
	// bytes, the oldest stall; see docs/launching.md) from the start of
	// the ranks until the job ends, when it closes it (a scrape before
	// the start waits for it). The caller makes it (gorun --metrics
	// ADDR), so a busy address fails before anything starts; a Run that
	// fails before the ranks start leaves it open.
	Metrics net.Listener

	Stdin          io.Reader // forwarded to rank 0; nil = none
	Stdout, Stderr io.Writer
	Signals        <-chan os.Signal // signals to forward to the ranks
	Logger         *slog.Logger

	// Local and Remote start agents; nil picks LocalSpawner / SSHSpawner.
	Local, Remote Spawner
}

// DefaultConfig returns a Config with mpirun-like defaults.
func DefaultConfig() Config {
	return Config{
		TagOutput: true,
		StallWarn: 30 * time.Second,
		DumpWait:  2 * time.Second,
		Grace:     5 * time.Second,
		Preflight: 30 * time.Second,
		AgentWait: 2 * time.Second,
		SSH:       []string{"ssh"},
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
	}
}

func (c *Config) validate() error {
	if c.Program == "" {
		return errors.New("no program given: usage gorun [flags] PROGRAM [ARGS...]")
	}
	if c.NP < 0 {
		return fmt.Errorf("-np must be positive, got %d", c.NP)
	}
	if c.MinNP < 0 {
		return fmt.Errorf("--min-np %d: want at least 1", c.MinNP)
	}
	if c.MinNP > 0 && !c.Elastic && !c.HubElastic {
		return fmt.Errorf("--min-np %d needs --elastic (or --hub-elastic)", c.MinNP)
	}
	if c.MaxRestarts < 0 {
		return fmt.Errorf("--max-restarts %d: want 0 or more", c.MaxRestarts)
	}
	if c.MaxRestarts > 0 && c.elasticity() != ringElastic {
		return fmt.Errorf("--max-restarts %d needs --elastic with the ring strategy (not --hub-elastic or --strategy hub)", c.MaxRestarts)
	}
	if c.NP > 0 && c.MinNP > c.NP {
		return fmt.Errorf("--min-np %d is more than the job's %d ranks (-np)", c.MinNP, c.NP)
	}
	if c.Hubs < 0 || c.Hubs > 1024 {
		return fmt.Errorf("--hubs %d: want 0 to 1024", c.Hubs)
	}
	if c.Grace < 0 || c.Timeout < 0 || c.StallWarn < 0 || c.StallAbort < 0 || c.DumpWait < 0 || c.AgentWait < 0 {
		return errors.New("durations must not be negative")
	}
	if c.PMI != "" && c.PMI != PMIOn && c.PMI != PMIOff {
		return fmt.Errorf("--pmi %q: want %s or %s", c.PMI, PMIOn, PMIOff)
	}
	if len(c.SSH) == 0 || c.SSH[0] == "" {
		return errors.New("--ssh: empty command")
	}
	if c.Gorun == "" {
		return errors.New("launcher: Config.Gorun (path of the gorun binary) is not set")
	}
	if c.Stdout == nil || c.Stderr == nil {
		return errors.New("launcher: Stdout and Stderr must be set")
	}
	return nil
}

// elasticity is how the job takes a lost rank.
func (c *Config) elasticity() elasticity {
	switch {
	case c.Elastic && c.Strategy != "hub":
		return ringElastic
	case c.Elastic || c.HubElastic:
		return hubElastic
	}
	return notElastic
}

// Exit codes of the launcher itself.
const (
	ExitLaunchFailed = 1   // bad input, or a host failed its pre-flight
	ExitTimeout      = 124 // --timeout ran out (like timeout(1))
	ExitAgentLost    = 255 // a host's agent or SSH session died, or went silent
)

// Result is how a job ended.
type Result struct {
	JobID      string // the job's id (GORUN_JOB_ID), "" if it never started
	ExitCode   int
	LaunchTime time.Duration // from Run to the last rank started
	Failure    string        // one summary of what ended the job, "" on success
}
