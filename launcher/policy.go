package launcher

import (
	"fmt"
	"syscall"

	"github.com/gorun/gorun/launcher/proto"
)

// policy decides how a job ends: which exit code wins, when the ranks are
// told to stop and with which signal, and what the summary says. It is
// fed the job's events and returns what to do; it does no I/O and reads no
// clock, so its rules have table tests. The supervisor (supervisor.go)
// feeds it and turns its decisions into actions.
type policy struct {
	np      int  // ranks 0..np-1; indices from np up are dedicated hubs
	elastic bool // --hub-elastic

	exited, ok []bool
	failed     bool
	code       int
	failure    string
	stopping   syscall.Signal // the last signal sent to every rank, 0 if none
	lost       []int          // ranks the job went on without (elastic)
	lostCode   int
	dumping    bool // the Go ranks are writing goroutine dumps before the stop
}

// decision is what the supervisor does after an event.
type decision struct {
	// Signal, if not 0, goes to every rank of every host that is not done.
	Signal syscall.Signal
	// HardStop: arm the deadline after which agents still running are
	// killed (the grace period plus a margin).
	HardStop bool
	// Note is a line to print now ("" for none).
	Note string
}

func newPolicy(np, hubs int, elastic bool) *policy {
	return &policy{np: np, elastic: elastic, exited: make([]bool, np+hubs), ok: make([]bool, np+hubs)}
}

// exitCode is what a rank's exit counts as: its exit code, 128+N when
// signal N killed it, and 1 when its agent counts it as failed (a PMI
// error, MPI_Init without MPI_Finalize) although it exited with 0 or was
// killed by the agent.
func exitCode(ex *proto.Exit) int {
	if ex == nil {
		return 1
	}
	code := ex.Code
	if ex.Signal != 0 {
		code = 128 + ex.Signal
	}
	if ex.Failure != "" && (code == 0 || ex.Signal == int(syscall.SIGKILL)) {
		code = 1
	}
	return code
}

// fail records the first failure; later ones do not change the outcome.
func (p *policy) fail(code int, text string) {
	if !p.failed {
		p.failed, p.code, p.failure = true, code, text
	}
}

// stop sends sig to every rank unless it, or SIGKILL, was sent already.
func (p *policy) stop(sig syscall.Signal) decision {
	if p.stopping == syscall.SIGKILL || p.stopping == sig {
		return decision{HardStop: true}
	}
	p.stopping = sig
	return decision{Signal: sig, HardStop: true}
}

func (p *policy) workersDone() bool {
	for _, e := range p.exited[:p.np] {
		if !e {
			return false
		}
	}
	return true
}

// rankExited: rank (or hub) exited with code (128+N for signal N);
// describe is the summary of its exit, used if it ends the job.
func (p *policy) rankExited(rank, code int, describe string) decision {
	p.exited[rank], p.ok[rank] = true, code == 0
	var d decision
	switch {
	case code == 0 || p.stopping != 0 || p.dumping:
	case p.elastic && rank < p.np && !p.workersDone():
		// The hubs finish their rounds without it.
		p.lost = append(p.lost, rank)
		if p.lostCode == 0 {
			p.lostCode = code
		}
		d.Note = describe + "; --hub-elastic: the job goes on without it"
	default:
		p.fail(code, describe)
		return p.stop(syscall.SIGTERM)
	}
	if p.stopping == 0 && rank < p.np && p.workersDone() {
		// Every rank is done: the hubs have nothing left to serve.
		s := p.stop(syscall.SIGTERM)
		s.Note = d.Note
		return s
	}
	return d
}

// agentLost: a host's agent (its SSH session) ended; ranksExited says
// whether every rank of that host had already exited.
func (p *policy) agentLost(ranksExited bool, text string) decision {
	if ranksExited {
		return decision{}
	}
	p.fail(ExitAgentLost, text)
	return p.stop(syscall.SIGTERM)
}

// jobFailed: the job failed for a reason other than a rank's exit (a rank
// called MPI_Abort, the PMI barrier broke); code is the job's exit code.
func (p *policy) jobFailed(code int, text string) decision {
	p.fail(code, text)
	return p.stop(syscall.SIGTERM)
}

// beginDump: the job is to end with code (a timeout, a stall) once the Go
// ranks wrote their goroutine dumps; until endDump, ranks that exit (as
// Go programs do after a dump) do not stop the others.
func (p *policy) beginDump(code int, text string) decision {
	p.fail(code, text)
	p.dumping = true
	return decision{}
}

// endDump: the dumps had their time; stop every rank with sig.
func (p *policy) endDump(sig syscall.Signal) decision {
	p.dumping = false
	return p.stop(sig)
}

// agentError: an agent reported a failure of its own.
func (p *policy) agentError(text string) decision {
	p.fail(ExitAgentLost, text)
	return p.stop(syscall.SIGTERM)
}

// signal: gorun received sig. The first is forwarded; one that arrives
// while the ranks are already stopping escalates to SIGKILL.
func (p *policy) signal(sig syscall.Signal) decision {
	if p.stopping != 0 {
		return p.stop(syscall.SIGKILL)
	}
	p.fail(128+int(sig), fmt.Sprintf("gorun received %v; forwarded it to every rank", sig))
	return p.stop(sig)
}

// timedOut: --timeout ran out, or the caller's context ended.
func (p *policy) timedOut(text string) decision {
	p.fail(ExitTimeout, text)
	return p.stop(syscall.SIGTERM)
}

// result is the job's exit code and summary once every agent is done, and
// a closing note ("" for none).
func (p *policy) result() (code int, failure, note string) {
	if len(p.lost) > 0 && !p.failed {
		anyOK := false
		for _, ok := range p.ok[:p.np] {
			anyOK = anyOK || ok
		}
		if !anyOK {
			p.fail(p.lostCode, fmt.Sprintf("every rank was lost (elastic: %v)", p.lost))
		} else {
			note = fmt.Sprintf("finished without %d lost rank(s) %v (--hub-elastic)", len(p.lost), p.lost)
		}
	}
	return p.code, p.failure, note
}
