package launcher

import (
	"bufio"
	"encoding/gob"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/pmi"
)

// The launcher and each host's agent talk over the agent's stdin and stdout
// (a pipe locally, an SSH session remotely) with gob-encoded messages. The
// agent first writes agentMagic on a line of its own, so that anything a
// remote shell prints before it (a chatty .bashrc) is skipped.
const (
	agentMagic   = "GORUN-AGENT-1"
	protoVersion = 3 // 2: rankSpec.Hub (dedicated ParamHub processes); 3: PMI-1

	maxBannerLines = 10000
)

type msgKind uint8

// ONLY APPEND TO THIS LIST: the values cross the wire.
const (
	msgSpec       msgKind = iota + 1 // launcher -> agent: what to run
	msgReady                         // agent -> launcher: pre-flight passed, ports reserved
	msgStart                         // launcher -> agent: start the ranks
	msgStarted                       // agent -> launcher: a rank's pid
	msgOutput                        // agent -> launcher: one line of a rank's output
	msgExit                          // agent -> launcher: a rank exited
	msgStdin                         // launcher -> agent: bytes for the stdin of rank 0
	msgStdinEOF                      // launcher -> agent: stdin of rank 0 is closed
	msgTerminate                     // launcher -> agent: signal every rank, then kill after the grace period
	msgDone                          // agent -> launcher: every rank is gone
	msgError                         // agent -> launcher: the agent cannot go on
	msgPMIFence                      // agent -> launcher: every local rank entered PMI barrier Epoch; Puts are the host's puts
	msgPMIRelease                    // launcher -> agent: PMI barrier Epoch is complete; Puts are every host's puts
	msgPMIAbort                      // agent -> launcher: Rank asked to abort the job with exit code Code (MPI_Abort)
	msgStatus                        // agent -> launcher: Rank's status page changed (Status)
	msgDump                          // launcher -> agent: SIGQUIT the Go ranks; their stderr comes back as streamDump
	msgClock                         // launcher -> agent: what time is it? agent -> launcher: Clock, its time (unix ns)
	msgTimeline                      // agent -> launcher: Rank's timeline file (Data), after it exited
)

type rankSpec struct {
	Rank, LocalRank, LocalSize, NodeRank int
	Hub                                  int // 0: a rank; h+1: ParamHub h (runs `gorun __hub`)
}

type hostSpec struct {
	Version   int
	JobID     string
	Host      string // the name the launcher used
	Program   string
	Args      []string
	Wdir      string
	WdirSet   bool // the user gave --wdir: failing to enter it is an error
	Env       []string
	Ranks     []rankSpec
	Grace     time.Duration
	Advertise string   // address to advertise; "" lets the agent decide
	PMI       *pmiSpec // nil: no PMI for this job's ranks
	Timeline  bool     // ranks record timelines (gorun --timeline)
}

// pmiSpec is what a host's ranks are told through PMI-1.
type pmiSpec struct {
	KVS     string // the job's KVS name
	Size    int    // ranks in the job
	Mapping string // PMI_process_mapping ("" leaves it unset)
}

type readyInfo struct {
	Hostname   string
	Addr       string // address the host's ranks advertise
	Ports      []int  // one gossip port per rank, in Ranks order
	MasterPort int
}

type exitInfo struct {
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

type msg struct {
	Kind   msgKind
	Spec   *hostSpec
	Ready  *readyInfo
	Env    []string // msgStart: environment added for every rank
	Rank   int
	Pid    int
	Stream int // 1 stdout, 2 stderr
	Data   []byte
	Exit   *exitInfo
	Signal int
	Err    string
	Epoch  int      // msgPMIFence, msgPMIRelease
	Puts   []pmi.KV // msgPMIFence, msgPMIRelease
	Code   int      // msgPMIAbort
	Status *statusInfo
	Clock  int64 // msgClock
}

// conn is one end of the launcher-agent channel. Send is safe for
// concurrent use; Recv is not.
type conn struct {
	mu  sync.Mutex
	enc *gob.Encoder
	w   io.Writer
	dec *gob.Decoder
}

func newConn(r io.Reader, w io.Writer) *conn {
	return &conn{enc: gob.NewEncoder(w), w: w, dec: gob.NewDecoder(r)}
}

func (c *conn) Send(m *msg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(m); err != nil {
		return err
	}
	if f, ok := c.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

func (c *conn) Recv() (*msg, error) {
	m := new(msg)
	if err := c.dec.Decode(m); err != nil {
		return nil, err
	}
	return m, nil
}

// skipBanner reads r up to and including the agent's magic line and returns
// the first lines that came before it (a remote shell's noise, or an error
// message). It gives up after maxBannerLines lines.
func skipBanner(r *bufio.Reader) (noise []string, err error) {
	for range maxBannerLines {
		line, err := r.ReadSlice('\n')
		s := strings.TrimRight(string(line), "\r\n") // before the next read reuses line
		for err == bufio.ErrBufferFull {             // a very long line: keep its start only
			_, err = r.ReadSlice('\n')
		}
		if err == nil && s == agentMagic {
			return noise, nil
		}
		if s != "" && len(noise) < 20 {
			noise = append(noise, s)
		}
		if err != nil {
			return noise, err
		}
	}
	return noise, fmt.Errorf("no agent greeting in the first %d lines", maxBannerLines)
}
