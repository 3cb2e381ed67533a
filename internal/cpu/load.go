// Package cpu tells the transports' waits how to spend a wait on this
// host (Now: keep the core and poll, poll and give the core away between
// polls, or park at once), from how many tasks are runnable against its
// CPUs, and how to give the core away (Yield). The rule (ModeFor) is a
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
	// Spin: poll, keeping the core (every runnable task has a CPU).
	Spin Mode = iota
	// SpinYield: poll, and give the core away between polls
	// (sched_yield): tasks wait for a CPU, and one of them may be the
	// peer whose data this rank waits for. Open MPI's shared memory does
	// the same when a host is oversubscribed.
	SpinYield
	// Park: do not poll at all; sleep until woken (past
	// spinOverloadPerCPU, every poll takes a core that work needs).
	Park
)

func (m Mode) String() string {
	switch m {
	case Spin:
		return "spin"
	case SpinYield:
		return "spin-yield"
	case Park:
		return "park"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ModeFor is the rule, from the host's runnable tasks (running or
// waiting for a CPU, the reader of the count among them) and its CPUs:
// Park past spinOverloadPerCPU per CPU; SpinYield when more tasks are
// runnable than there are CPUs plus the one reading the count; else Spin.
func ModeFor(runnable, cpus int) Mode {
	cpus = max(cpus, 1)
	switch {
	case runnable > spinOverloadPerCPU*cpus:
		return Park
	case runnable > cpus+1:
		return SpinYield
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
