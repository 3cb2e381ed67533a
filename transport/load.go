package transport

import (
	"runtime"
	"time"
)

// MaxConfirmScale caps how far an overloaded host stretches
// ConfirmTimeout (see TCP.confirmWindow).
const MaxConfirmScale = 120

// overloadPerCPU is the runnable tasks per CPU past which a host counts
// as overloaded: up to it, ranks get a core often enough to answer. (It
// was 4: at 10 runnable tasks on 2 cores, under the race detector, a rank
// answered no handshake for 2.5 s while alive.)
const overloadPerCPU = 2

// confirmWindow is how long a rank that gossip declared dead gets to
// answer: ConfirmTimeout, stretched by how overloaded this host is right
// now (runnable tasks per CPU over overloadPerCPU, from 1 to
// MaxConfirmScale). On an
// overloaded host every process, the suspect included, waits its turn
// for a core: 256 ranks on 2 cores missed gossip's probes and a 1 s
// confirmation while alive. A stopped or cut-off rank never answers, so a
// longer window only delays naming it; a killed one is named by its
// connection's end, not here.
func (t *TCP) confirmWindow() time.Duration {
	runnable, ok := runnableTasks()
	if !ok {
		return t.cfg.ConfirmTimeout
	}
	return scaledConfirm(t.cfg.ConfirmTimeout, runnable, runtime.NumCPU())
}

// scaledConfirm is base × runnable/(overloadPerCPU × cpus), the factor
// clamped to [1, MaxConfirmScale].
func scaledConfirm(base time.Duration, runnable, cpus int) time.Duration {
	if cpus < 1 || runnable <= overloadPerCPU*cpus {
		return base
	}
	scale := min(float64(runnable)/float64(overloadPerCPU*cpus), MaxConfirmScale)
	return time.Duration(float64(base) * scale)
}
