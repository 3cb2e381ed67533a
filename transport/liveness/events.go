package liveness

import "time"

// An Event is one thing the owner saw happen. Step takes it with the time
// it happened. Events about a connection name it by Conn: an event about a
// connection that is not the peer's current one (replaced by Revive, or
// never Connected) changes nothing.
type Event interface{ isEvent() }

// ConnID names one connection to a peer. The owner numbers its
// connections (from 1; 0 is none), never reusing a number.
type ConnID uint64

// Tick: time passed. Step fires what is due at its time; the owner steps a
// Tick at Deadline (or on a regular beat).
type Tick struct{}

// HostLoad: the host's load was read (runnable tasks and CPUs). Windows
// opened from now on see it (Observation.Load), and so does ConnectTimeout
// at its end. The TCP mesh reads the load when a verdict comes, when a
// dial fails and at every Deadline: step a HostLoad just before those
// events to keep that.
type HostLoad struct{ Load Load }

// Verdict: gossip declared Peer dead, for Reason (membership's text,
// "declared dead by gossip (no answer to probes)"). The machine checks it
// before it believes it.
type Verdict struct {
	Peer   int
	Reason string
}

// GossipLeft: gossip says Peer left the job cleanly. Gossip travels apart
// from the data, so this only counts for a peer with no connection (see
// the package doc).
type GossipLeft struct{ Peer int }

// GossipAlive: gossip holds Peer alive again after a verdict (its process
// refuted the verdict, or rejoined). A verdict the data plane overruled
// stands until then (see the package doc, rule 9).
type GossipAlive struct{ Peer int }

// Connected: Conn is Peer's connection from now on (handshake done, set
// up, its reader started). Gen is the peer's generation the connection was
// made for (Machine.Gen when the dial began, or when it was accepted): a
// connection made for a process Revive has since replaced is ignored, and
// the owner should close it.
type Connected struct {
	Peer int
	Gen  uint32
	Conn ConnID
}

// Progress: the read side of Conn, sampled now. Reads counts the reads
// of it that returned data since it was made (the pieces of a long frame
// each count: a sender kept from running sends it slowly); Stuck says its
// reader is waiting for room in this rank's inbox from the peer (this
// rank's own work is behind). Stall is the longest this rank's process was
// kept from running since the last Progress for Conn (its goroutines'
// longest wait for a CPU; 0 if unknown). Writing says a ping this rank
// sent on Conn is still being written (its write waits for room in the
// connection, or for the write before it). The owner steps one for every
// Sample action, at once.
type Progress struct {
	Peer    int
	Conn    ConnID
	Reads   uint64
	Stuck   bool
	Stall   time.Duration
	Writing bool
}

// Pong: a pong was read on Conn.
type Pong struct {
	Peer int
	Conn ConnID
}

// Bye: a goodbye was read on Conn. Every frame the peer sent before it
// has been read.
type Bye struct {
	Peer int
	Conn ConnID
}

// ReadEnded: Conn's reader returned with Err (the end of the stream, a
// reset, a malformed frame: Malformed). Not stepped while the owner is
// closing (Closing), when ends are expected.
type ReadEnded struct {
	Peer      int
	Conn      ConnID
	Err       error
	Malformed bool
}

// SendFailed: writing a data frame on Conn failed with Err. Not stepped
// for a write cut short by its caller's context, nor after the job
// failed (the caller then gets the job's error).
type SendFailed struct {
	Peer int
	Conn ConnID
	Err  error
}

// PingFailed: writing a ping (the Ping action) on Conn failed with Err.
type PingFailed struct {
	Peer int
	Conn ConnID
	Err  error
}

// ProbeDone: the Probe action Seq for Peer's generation Gen is over.
// Answered: for a probe of a peer with no connection, any answer to the
// hello (a refusal too shows a live process); for a knock, the peer's
// refusal of the connection as a duplicate (its process runs and holds
// this rank's connection: an acceptance says it holds none).
type ProbeDone struct {
	Peer     int
	Gen      uint32
	Seq      uint64
	Answered bool
}

// DialStarted: this rank began connecting to Peer (generation Gen) and
// has no connection to it: Config.ConnectTimeout runs from here.
type DialStarted struct {
	Peer int
	Gen  uint32
}

// DialFailed: one attempt to connect to Peer (generation Gen) failed with
// Err, of the given Kind.
type DialFailed struct {
	Peer int
	Gen  uint32
	Err  error
	Kind DialKind
	// Stall is the longest this rank itself was kept from running during
	// the attempt (its goroutines' longest wait for a CPU), 0 if unknown:
	// a handshake that timed out while this rank waited for a CPU says
	// nothing of the peer.
	Stall time.Duration
}

// DialKind sorts the failures of a dial.
type DialKind uint8

const (
	// DialOther: no connection (refused, unreachable, timed out, a
	// handshake cut off). Retried; it counts against a doubted peer.
	DialOther DialKind = iota
	// DialDuplicate: the peer refused the hello because it is dialing
	// this rank too and wins; its own connection is on its way.
	DialDuplicate
	// DialShmTimeout: the shared memory offer timed out; the pair
	// redials over TCP.
	DialShmTimeout
	// DialAuth: the handshake failed its job or secret check (ErrAuth).
	DialAuth
	// DialAnswered: the peer answered the hello, its proof good, and the
	// handshake broke off after (cut, or timed out): the peer's process
	// ran during the attempt. Retried; for a doubted peer it is life,
	// and its window starts again from it.
	DialAnswered
)

// Failed: the job failed, for a reason the machine did not give itself
// (another rank's abort, Abort, a corrupt shared memory ring). A break not
// yet blamed is explained by it; confirmations go on, to say who else is
// gone (Lost).
type Failed struct{}

// Closing: Close began. Ends of connections are expected from now on, and
// nothing more is blamed on anyone.
type Closing struct{}

// Revive: Peer's restarted process takes its place (an elastic job's
// sequencer said so). Keep says the peer's current connection is already
// the new process's (it connected before this rank heard of it) and
// stays; otherwise the owner retires it. The peer starts afresh: a new
// generation, Live, no check, not in Lost.
type Revive struct {
	Peer int
	Keep bool
}

func (Tick) isEvent()        {}
func (HostLoad) isEvent()    {}
func (Verdict) isEvent()     {}
func (GossipLeft) isEvent()  {}
func (GossipAlive) isEvent() {}
func (Connected) isEvent()   {}
func (Progress) isEvent()    {}
func (Pong) isEvent()        {}
func (Bye) isEvent()         {}
func (ReadEnded) isEvent()   {}
func (SendFailed) isEvent()  {}
func (PingFailed) isEvent()  {}
func (ProbeDone) isEvent()   {}
func (DialStarted) isEvent() {}
func (DialFailed) isEvent()  {}
func (Failed) isEvent()      {}
func (Closing) isEvent()     {}
func (Revive) isEvent()      {}
