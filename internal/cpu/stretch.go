package cpu

import "time"

// OverloadPerCPU is the runnable tasks per CPU past which a host counts
// as overloaded for a deadline: up to it, a process gets a core often
// enough to answer in time. (At 4, with 10 runnable tasks on 2 cores under
// the race detector, a rank answered no handshake for 2.5 s while alive.)
const OverloadPerCPU = 2

// Stretch is a deadline of base on a host with runnable tasks (now or
// lately: Lately) and cpus CPUs: base × runnable/(OverloadPerCPU × cpus),
// the factor clamped to [1, most]; base when cpus < 1 (the load unknown).
// The deadlines it stretches are those a busy host makes a live process
// miss and a dead one never meets: a verdict's window, a connection's
// deadline, a restarted rank's join. A caller that must still name a dead
// process in bounded time caps most.
func Stretch(base time.Duration, runnable, cpus int, most float64) time.Duration {
	if cpus < 1 || runnable <= OverloadPerCPU*cpus {
		return base
	}
	scale := min(float64(runnable)/float64(OverloadPerCPU*cpus), max(most, 1))
	return time.Duration(float64(base) * scale)
}
