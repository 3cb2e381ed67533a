// Package cpu tells the transports' waits how to spend a wait on this
// host (Now: poll keeping the core, or park at once), from how many tasks
// are runnable against its CPUs, and how to give the core away (Yield,
// for ranks that outnumber their host's cores). The rule (ModeFor) is a
// pure function of the count; Now reads the count at most every
// loadRefresh. Lately says how busy the host has been, and a StallMeter
// how long this process itself was kept from running. WithLockedThread
// marks a call whose goroutine is locked to its OS thread (a call from C),
// whose waits hand the thread away seldom: each hand-off there is a switch
// of OS threads.
package cpu

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// spinOverloadPerCPU is the runnable tasks per CPU past which a waiting
// receive does not spin at all and parks at once: each spinner holds a
// core, or with SpinYield a stream of yields, that the ranks with work
// need. Up to it spinning pays (16 ranks on 2 cores: a 4 KiB all-reduce
// in 135-145 us either way, 900 us parked; at 8 per CPU it parked too
// often there and took 330-430 us); past it, it does not (64 ranks on 2
// cores as 16 test hosts of 4, each thinking itself oversubscribed only
// 2 to 1: a whole small job took 18-30 s spinning, 3.6-3.9 s parked,
// with 62 % of the CPU in the kernel while it spun).
const spinOverloadPerCPU = 16

// Mode is how a waiting receive spends the spinning part of its wait.
type Mode uint8

const (
	// Spin: poll, keeping the core, for the wait's spin time (giving it
	// away between polls only where the job's own ranks outnumber the
	// cores: the caller's choice, Config.SpinYield).
	Spin Mode = iota
	// Park: do not poll at all; sleep until woken (past
	// spinOverloadPerCPU, every poll takes a core that work needs).
	Park
)

func (m Mode) String() string {
	switch m {
	case Spin:
		return "spin"
	case Park:
		return "park"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ModeFor is the rule, from the host's runnable tasks (running or
// waiting for a CPU, the reader of the count among them) and its CPUs:
// Park past spinOverloadPerCPU per CPU, else Spin.
//
// Other work beside the ranks is no reason to give the core away between
// polls: the task that takes it is then most likely that work, for a
// whole time slice (Linux's EEVDF scheduler runs a task that yields again
// only after the others' slices), while the peer's data waits. Beside 2,
// 4 and 8 spinning processes on 2 cores, 2 ranks' 4 KiB all-reduce took
// 0.7-4 ms a call when the wait yielded there, 1-240 us (mostly under
// 20) when it kept the core, against Open MPI's 1-52 us (2 ms once);
// results/busy says more. A wait that runs out of spin sleeps, and the
// scheduler runs a woken sleeper before the busy work it preempts.
func ModeFor(runnable, cpus int) Mode {
	if runnable > spinOverloadPerCPU*max(cpus, 1) {
		return Park
	}
	return Spin
}

// loadCache holds the mode of the host's load when last looked at, and
// when that was (unix nanoseconds).
var loadCache struct {
	at   atomic.Int64
	mode atomic.Uint32
}

// loadRefresh is how long a look at the host's load holds.
const loadRefresh = 50 * time.Millisecond

// Now is ModeFor the host's load as of at most loadRefresh ago (Spin
// where the count cannot be read).
func Now() Mode {
	now := time.Now().UnixNano()
	at := loadCache.at.Load()
	if now-at < int64(loadRefresh) {
		return Mode(loadCache.mode.Load())
	}
	if !loadCache.at.CompareAndSwap(at, now) {
		return Mode(loadCache.mode.Load()) // another goroutine is looking
	}
	m := Spin
	if runnable, ok := Runnable(); ok {
		m = ModeFor(runnable, runtime.NumCPU())
	}
	loadCache.mode.Store(uint32(m))
	return m
}

// Host is this host's load as a liveness window reads it: the tasks that
// want a CPU now or lately (Lately) and the CPUs there are; both zero
// where the load cannot be read.
func Host() (runnable, cpus int) {
	n, ok := Lately()
	if !ok {
		return 0, 0
	}
	return n, runtime.NumCPU()
}
