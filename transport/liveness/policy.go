package liveness

import "time"

// MaxStretch caps how far DefaultPolicy stretches ConfirmTimeout on an
// overloaded host: no confirmation window is longer than MaxStretch ×
// ConfirmTimeout. A caller that waits for every verdict to be settled
// (ParamHub's report of lost ranks) waits that long.
const MaxStretch = 120

// overloadPerCPU is the runnable tasks per CPU past which a host counts as
// overloaded: up to it, ranks get a core often enough to answer. (It was
// 4: at 10 runnable tasks on 2 cores, under the race detector, a rank
// answered no handshake for 2.5 s while alive.)
const overloadPerCPU = 2

// Load is how busy this rank's host is: tasks that want a CPU (now or
// lately: the owner reads what it can, the TCP mesh the larger of the
// running count and the last minute's load average) and CPUs, as the
// owner last read them (HostLoad). The zero Load is "unknown".
type Load struct {
	Runnable, CPUs int
}

// Observation is everything a confirmation window may depend on, taken
// when the window opens. A Policy sees nothing else: no clock, no host.
type Observation struct {
	// Base is Config.ConfirmTimeout.
	Base time.Duration
	// Load is the host's load as last stepped (HostLoad); zero if unknown.
	Load Load
	// Connected is true when the check runs on the peer's data
	// connection (a ping, or its reader's progress), false when it runs
	// by connecting (a probe, or the dials of a doubted peer).
	Connected bool
	// Round counts the windows of this check already over (0: the
	// first). A peer that is still sending is asked again, window after
	// window.
	Round int
	// Elapsed is the time since the check began.
	Elapsed time.Duration
	// Reads is how many reads of the peer's connection returned data in
	// the window just over (0 in the first), and Stuck whether its reader
	// was waiting for room in this rank's inbox at the window's end.
	Reads uint64
	Stuck bool
	// Stall is the longest this rank itself was kept from running in the
	// window just over (0 in the first): its goroutines' longest wait for
	// a CPU, or how late the window's end was stepped, whichever is more.
	// For a doubted peer's dials, the longest during any failed dial
	// since the first, the first included.
	Stall time.Duration
	// ShortKnock is true when the window just over ended with its knock
	// unanswered after less than stallFactor times Stall (a knock has half
	// the window): its silence proved nothing, and the next window's knock
	// needs that much time.
	ShortKnock bool
	// RTT is the last round trip of a ping on the peer's connection (from
	// the Ping action to its Pong), 0 if none was measured.
	RTT time.Duration
}

// Policy gives the length of a confirmation window: how long a peer that
// gossip declared dead gets to show it is alive before it is lost. It
// must be a pure function of its Observation. A window of 0 or less is
// taken as Base for a ping or a probe; a doubted peer's dials fail it at
// the first failure.
//
// The rule that tells a starved rank from a dead one belongs here: the
// Observation carries what the machine saw (round trips, read progress,
// rounds, load, this rank's own stalls), so such a rule is one function
// with a table test.
type Policy func(Observation) time.Duration

// DefaultPolicy is Base, stretched by how overloaded the host is
// (runnable tasks per CPU over 2, the factor from 1 to MaxStretch), and at
// least stallFactor times the longest this rank itself stalled in the
// window before, or in a doubted peer's dials (twice that after a short
// knock, so that the next knock, half the window, has it), at most
// MaxStretch × Base. On an overloaded host every
// process, the suspect included, waits its turn for a core: 256 ranks on
// 2 cores missed gossip's probes and a 1 s confirmation while alive; a
// process of many ranks kept from its CPUs waits as long inside itself,
// which the host's count of runnable tasks does not show. A stopped or
// cut-off rank never answers, so a longer window only delays naming it.
func DefaultPolicy(o Observation) time.Duration {
	w := stretch(o.Base, o.Load)
	f := time.Duration(stallFactor)
	if o.ShortKnock {
		f *= 2
	}
	if s := min(f*o.Stall, MaxStretch*o.Base); s > w {
		w = s
	}
	return w
}

// stallFactor is how many times its own longest stall a rank waits, at
// least, in the window after one in which it stalled.
const stallFactor = 4

// starved reports whether a window of length w in which this rank itself
// stalled for stall proves nothing about a silent peer: this rank was kept
// from running for a quarter of it or more, so the peer's answer may wait
// unread in its socket, and a peer in the same process, or on a host as
// busy, was likely kept as long.
func starved(stall, w time.Duration) bool { return stall > 0 && 4*stall >= w }

// knockTooShort reports whether a knock in a window of length w (it has half
// of it) that went unanswered proves nothing: it had less than stallFactor
// times this rank's own stall to come back, so its answer may wait unread
// behind this rank's dial, and a peer in the same process, or on a host as
// busy, waited as long to answer. The bound is strict: after a window of
// 2 × stallFactor times the stall (Observation.ShortKnock) the knock is
// long enough, however steady the stall. A window starved as a whole
// (starved) proves nothing anyway, and the next one is stallFactor times
// the stall.
func knockTooShort(stall, w time.Duration) bool {
	return stallFactor*stall > w/2 && !starved(stall, w)
}

// maxConnectStretch bounds how far an overloaded host stretches
// ConnectTimeout.
const maxConnectStretch = 4

// connectWindow is how long a pair gets to connect: ConnectTimeout,
// stretched by the host's load as a confirmation window is, at most
// maxConnectStretch times.
func connectWindow(base time.Duration, l Load) time.Duration {
	return min(stretch(base, l), maxConnectStretch*base)
}

// stretch is base × runnable/(overloadPerCPU × cpus), the factor clamped
// to [1, MaxStretch]; base when the load is unknown.
func stretch(base time.Duration, l Load) time.Duration {
	if l.CPUs < 1 || l.Runnable <= overloadPerCPU*l.CPUs {
		return base
	}
	scale := min(float64(l.Runnable)/float64(overloadPerCPU*l.CPUs), MaxStretch)
	return time.Duration(float64(base) * scale)
}
