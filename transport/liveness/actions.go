package liveness

import (
	"fmt"
	"time"
)

// An Action is what the owner must do, in the order Step returns them.
// Its String is how tests and logs show it.
type Action interface {
	isAction()
	String() string
}

// Ping: write a ping on Conn. Write it with no deadline (a write cut
// short leaves half a frame in the stream, and every later frame
// unreadable); step PingFailed if it fails. The peer's Pong is stepped
// when read.
type Ping struct {
	Peer int
	Conn ConnID
}

// Sample: step a Progress for Conn now, with its reader's count of frames
// and whether it waits on a full inbox. The machine decides what a window
// found only once that Progress comes.
type Sample struct {
	Peer int
	Conn ConnID
}

// Probe: dial Peer and run the handshake, within Timeout, and step
// ProbeDone with Gen; the connection is closed at once. For a peer with no
// connection (WatchAll) it is the check itself; for a connected one it is
// a knock beside the ping: whether its process answers at all, while its
// reader may be behind (a connected peer refuses the handshake as a
// duplicate, which is an answer).
type Probe struct {
	Peer    int
	Gen     uint32
	Seq     uint64 // step it back in ProbeDone: an answer to an earlier probe is ignored
	Timeout time.Duration
	Knock   bool // a knock on a connected peer (see ProbeDone for what answers it)
}

// DeclareLost: Peer (generation Gen) is lost, for Reason, the text its
// PeerLostError carries. Cause is the error behind it when there is one
// (a dial's: ErrAuth, say). The machine has recorded it (Lost); the owner
// tells whoever subscribes to losses, then does what Then says. It comes
// once per generation of a peer, and never for a peer that left.
type DeclareLost struct {
	Peer   int
	Gen    uint32
	Reason string
	Cause  error
	Then   Consequence
}

// Consequence is what a loss does beyond being recorded.
type Consequence uint8

const (
	// RecordOnly: the job had already failed; the loss is only recorded
	// and told.
	RecordOnly Consequence = iota
	// FailJob: tell every other connected peer (an abort with the
	// PeerLostError, within NoticeTimeout) and fail the job with it. The
	// machine counts the job failed from here.
	FailJob
	// DropPeer: an elastic job loses this peer only: calls that wait on it
	// or send to it fail with its PeerLostError, OnPeerLost is called, and
	// the job goes on.
	DropPeer
)

// DeclareLeft: Peer (generation Gen) left cleanly: a Recv from it fails
// once its frames are used up, and it is not lost. It comes once per
// generation, and never for a peer that was lost.
type DeclareLeft struct {
	Peer int
	Gen  uint32
}

// Kept: gossip declared Peer dead, but it showed it is alive By a pong or
// a handshake; the check is over. (Log it: gossip's verdict was wrong.)
type Kept struct {
	Peer int
	Gen  uint32
	By   Evidence
}

// Evidence is what showed a peer alive.
type Evidence uint8

const (
	ByPong      Evidence = iota // it answered a ping on its data connection
	ByHandshake                 // it answered a connection (a probe, a dial, or its own)
)

// AskAgain: Peer has not answered yet but frames came from it during the
// window (or wait for room in this rank's inbox): its answer may be
// behind its data, so it is asked again; or (Starved) this rank itself was
// kept from running for much of the window, which then proves nothing; or
// (Running) it sent nothing but its process answered a connection: its
// reader may wait for its own collectives, with the ping unread. Once per
// check for each of the three. (Log it.)
type AskAgain struct {
	Peer    int
	Gen     uint32
	Starved bool
	Running bool
}

// Doubt: gossip declared Peer, to which this rank has no connection, dead
// for Reason. Nothing fails now (a rank that finished and left is no
// reason to fail); the next dial to it is the check: it fails the peer
// within a confirmation window of failing, not ConnectTimeout. (Log it at
// debug level; wake callers waiting to connect to it.)
type Doubt struct {
	Peer   int
	Gen    uint32
	Reason string
}

func (Ping) isAction()        {}
func (Sample) isAction()      {}
func (Probe) isAction()       {}
func (DeclareLost) isAction() {}
func (DeclareLeft) isAction() {}
func (Kept) isAction()        {}
func (AskAgain) isAction()    {}
func (Doubt) isAction()       {}

func (a Ping) String() string   { return fmt.Sprintf("ping %d c%d", a.Peer, a.Conn) }
func (a Sample) String() string { return fmt.Sprintf("sample %d c%d", a.Peer, a.Conn) }
func (a Probe) String() string {
	if a.Knock {
		return fmt.Sprintf("knock %d gen=%d #%d within %v", a.Peer, a.Gen, a.Seq, a.Timeout)
	}
	return fmt.Sprintf("probe %d gen=%d #%d within %v", a.Peer, a.Gen, a.Seq, a.Timeout)
}
func (a DeclareLost) String() string {
	return fmt.Sprintf("lost %d gen=%d %v: %s", a.Peer, a.Gen, a.Then, a.Reason)
}
func (a DeclareLeft) String() string { return fmt.Sprintf("left %d gen=%d", a.Peer, a.Gen) }
func (a Kept) String() string        { return fmt.Sprintf("kept %d gen=%d %v", a.Peer, a.Gen, a.By) }
func (a AskAgain) String() string {
	switch {
	case a.Starved:
		return fmt.Sprintf("ask-again %d gen=%d starved", a.Peer, a.Gen)
	case a.Running:
		return fmt.Sprintf("ask-again %d gen=%d running", a.Peer, a.Gen)
	}
	return fmt.Sprintf("ask-again %d gen=%d", a.Peer, a.Gen)
}
func (a Doubt) String() string {
	return fmt.Sprintf("doubt %d gen=%d: %s", a.Peer, a.Gen, a.Reason)
}

func (c Consequence) String() string {
	switch c {
	case RecordOnly:
		return "record-only"
	case FailJob:
		return "fail-job"
	case DropPeer:
		return "drop-peer"
	}
	return fmt.Sprintf("Consequence(%d)", uint8(c))
}

func (e Evidence) String() string {
	switch e {
	case ByPong:
		return "by-pong"
	case ByHandshake:
		return "by-handshake"
	}
	return fmt.Sprintf("Evidence(%d)", uint8(e))
}

// LogMessage is the transport's log line for a Kept or an AskAgain (the
// wording today's logs use), "" for other actions.
func LogMessage(a Action) string {
	switch a := a.(type) {
	case Kept:
		if a.By == ByPong {
			return "gossip declared a rank dead, but it answered on the data plane; keeping it"
		}
		return "gossip declared a rank dead, but it answered a connection; keeping it"
	case AskAgain:
		switch {
		case a.Starved:
			return "gossip declared a rank dead, but this rank was itself kept from running while it waited for an answer; asking it again"
		case a.Running:
			return "gossip declared a rank dead, and it does not answer on the data plane, but its process answers a connection (its reader may wait for its own collectives); asking it again"
		}
		return "gossip declared a rank dead, but it is still sending on the data plane; asking it again"
	case Doubt:
		return "gossip declared an unconnected rank dead"
	}
	return ""
}
