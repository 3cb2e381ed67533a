// Package proto is what gorun's launcher and its per-host agents say to
// each other: the message kinds, the job spec a host is given, and the
// framed stream that carries them. Both sides import it and nothing else
// of each other; see package launcher's documentation for the picture.
//
// The launcher starts each host's agent (`gorun __agent`, over SSH for a
// remote host) and talks to it over the agent's stdin and stdout with
// gob-encoded Messages. The agent first writes Magic on a line of its own,
// so that anything a remote shell prints before it (a chatty .bashrc) is
// skipped (SkipBanner). The first message is the launcher's MsgSpec; the
// spec carries Version, and an agent of another version refuses it.
package proto

import (
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/internal/inspect"
	"github.com/gorun/gorun/pmi"
)

const (
	// Magic is the line an agent writes before its first message.
	Magic = "GORUN-AGENT-1"
	// Version is the protocol version; launcher and agent must agree.
	// 2: RankSpec.Hub (dedicated ParamHub processes); 3: PMI-1;
	// 4: elastic ranks (HostSpec.Elastic, MsgView, MsgSuspect, MsgSignalRank);
	// 5: restarts (HostSpec.MaxRestarts, MsgRestart, MsgJoin, Message.Joined);
	// 6: a restart on another host (Message.RankSpec); 7: the spec carries
	// the placement (PMIx).
	Version = 7

	// MaxBannerLines is how many lines before Magic SkipBanner reads
	// before it gives up.
	MaxBannerLines = 10000

	// MaxLine caps the data of one MsgOutput: a longer line of a rank's
	// output is sent in pieces.
	MaxLine = 64 << 10
)

// The hidden subcommands of the gorun binary that the processes of a job
// start each other with.
const (
	// AgentCommandName runs a host's agent (started by the launcher).
	AgentCommandName = "__agent"
	// HubCommandName runs a dedicated ParamHub (started by an agent).
	HubCommandName = "__hub"
	// SentinelCommandName runs an agent's sentinel (started by the agent).
	SentinelCommandName = "__sentinel"
)

// Kind is a message's type.
type Kind uint8

// ONLY APPEND TO THIS LIST: the values cross the wire.
const (
	MsgSpec       Kind = iota + 1 // launcher -> agent: what to run (Spec)
	MsgReady                      // agent -> launcher: pre-flight passed, ports reserved (Ready)
	MsgStart                      // launcher -> agent: start the ranks (Env)
	MsgStarted                    // agent -> launcher: Rank started as Pid
	MsgOutput                     // agent -> launcher: one line (Data) of Rank's Stream
	MsgExit                       // agent -> launcher: Rank exited (Exit)
	MsgStdin                      // launcher -> agent: bytes (Data) for the stdin of rank 0
	MsgStdinEOF                   // launcher -> agent: stdin of rank 0 is closed
	MsgTerminate                  // launcher -> agent: Signal every rank, then SIGKILL after the grace period
	MsgDone                       // agent -> launcher: every rank is gone
	MsgError                      // agent -> launcher: the agent cannot go on (Err)
	MsgPMIFence                   // agent -> launcher: every local rank entered PMI barrier Epoch; Puts are the host's puts
	MsgPMIRelease                 // launcher -> agent: PMI barrier Epoch is complete; Puts are every host's puts
	MsgPMIAbort                   // agent -> launcher: Rank asked to abort the job with exit code Code (MPI_Abort)
	MsgStatus                     // agent -> launcher: Rank's status page changed (Status)
	MsgDump                       // launcher -> agent: SIGQUIT the Go ranks; their stderr comes back as StreamDump
	MsgClock                      // launcher -> agent: what time is it? agent -> launcher: Clock, its time (unix ns)
	MsgTimeline                   // agent -> launcher: Rank's timeline file (Data), after it exited
	MsgView                       // launcher -> agent: the job's membership changed to view Epoch (Live); tell every running rank
	MsgSuspect                    // agent -> launcher: Rank reports rank Target lost (Err: its reason)
	MsgSignalRank                 // launcher -> agent: send Signal to Rank alone (SIGKILL: the launcher fences it)
	MsgRestart                    // launcher -> agent: start Rank again, its Count-th restart; its control channel gets view Epoch (Live) first; RankSpec if it moves there
	MsgJoin                       // agent -> launcher: restarted Rank says join: its data address Addr and host key Host
	MsgStdinAck                   // agent -> launcher: Count bytes of stdin were written to rank 0 (or dropped: it is gone)
	MsgResult                     // launcher -> agent that dialed in: the job ended with exit code Code (its stream closes next)
)

// Streams of MsgOutput.
const (
	StreamStdout = 1
	StreamStderr = 2
	// StreamDump is a rank's goroutine dump: its stderr after the agent
	// sent it SIGQUIT (MsgDump).
	StreamDump = 3
)

// RankSpec is one process an agent starts: a rank, or a dedicated hub.
type RankSpec struct {
	Rank, LocalRank, LocalSize, NodeRank int
	Hub                                  int // 0: a rank; h+1: ParamHub h (runs `gorun __hub`)
}

// HostSpec is everything one host's agent is told before the start.
type HostSpec struct {
	Version   int
	JobID     string
	Host      string // the name the launcher used
	Program   string
	Args      []string
	Wdir      string
	WdirSet   bool // the user gave --wdir: failing to enter it is an error
	Env       []string
	Ranks     []RankSpec
	Grace     time.Duration
	Advertise string   // address to advertise; "" lets the agent decide
	PMI       *PMISpec // nil: no PMI for this job's ranks
	Timeline  bool     // ranks record timelines (gorun --timeline)
	Timing    bool     // ranks time their collectives on their status pages (gorun --metrics)
	// Elastic: every rank (not a hub) gets a control channel, a socket
	// whose descriptor GORUN_CONTROL_FD names (gorun --elastic, ring).
	Elastic bool
	// MaxRestarts, with Elastic, is how often the launcher may restart
	// each rank (gorun --max-restarts): a rank that fails with restarts
	// left is still the agent's until the launcher's MsgRestart or
	// MsgTerminate.
	MaxRestarts int
}

// PMISpec is what a host's ranks are told through PMI-1.
type PMISpec struct {
	KVS     string // the job's KVS name
	Size    int    // ranks in the job
	Mapping string // PMI_process_mapping ("" leaves it unset)
	// Nodes is each rank's node (the index of its host among the hosts
	// with ranks) and NodeNames each node's name: the placement a PMIx
	// client reads at init.
	Nodes     []int
	NodeNames []string
}

// Ready is an agent's answer to the spec once its pre-flight passed.
type Ready struct {
	Hostname   string
	Addr       string // address the host's ranks advertise
	Ports      []int  // one gossip port per rank, in Ranks order
	MasterPort int
}

// Exit is how a rank ended.
type Exit struct {
	Pid    int
	Code   int // exit code, or -1 when killed by a signal
	Signal int
	// Failure, if set, is why the agent counts the rank as failed whatever
	// its exit status (a PMI protocol error, MPI_Init without MPI_Finalize).
	Failure string
	// ForeignKill: SIGKILL that neither gorun nor its agent sent; OOM: the
	// cgroup's OOM-kill count rose while the rank ran.
	ForeignKill, OOM bool
}

// Status is one rank's status page as its agent read it: Age is how long
// before the agent sent it the rank's state last changed (the launcher
// turns it into a time of its own clock; 0 as agents send each change at
// the reading that shows it).
type Status struct {
	State inspect.State
	Age   time.Duration
}

// Message is one message in either direction; Kind says which fields
// are set.
type Message struct {
	Kind   Kind
	Spec   *HostSpec
	Ready  *Ready
	Env    []string // MsgStart: environment added for every rank
	Rank   int
	Pid    int
	Stream int // MsgOutput: StreamStdout, StreamStderr or StreamDump
	Data   []byte
	Exit   *Exit
	Signal int
	Err    string
	Epoch  int   // MsgPMIFence, MsgPMIRelease, MsgView, MsgRestart; MsgSuspect: the newest view the reporting rank had heard of
	Live   []int // MsgView, MsgRestart: the live ranks, in increasing order
	Target int   // MsgSuspect: the rank suspected
	// Joined (MsgView): the restarted ranks that join in this view.
	Joined []control.Joiner
	Count  int      // MsgRestart: the restart's number, from 1 (GORUN_RESTART_COUNT); MsgStdinAck: bytes
	Addr   string   // MsgJoin: where the rank's transport listens
	Host   string   // MsgJoin: the rank's host key
	Puts   []pmi.KV // MsgPMIFence, MsgPMIRelease
	Code   int      // MsgPMIAbort
	Status *Status
	Clock  int64 // MsgClock
	// RankSpec (MsgRestart): the rank's numbers on the agent's host when
	// it moves there from a host that is gone (its LocalRank, LocalSize
	// and NodeRank there); nil restarts a rank of the host in its place.
	RankSpec *RankSpec
}
