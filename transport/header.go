package transport

// Type is a frame's type.
type Type uint8

// ONLY APPEND TO THIS LIST: the values cross the wire. Package wire's
// documentation describes each frame's use and payload in full.
const (
	// TypeData is part of a collective.
	TypeData Type = iota + 1
	// TypeAbort: the sender gives up; payload: a Code byte and the text
	// of the error. Step is 0 if the sender is the rank that aborted,
	// else that rank + 1 (an abort passed on).
	TypeAbort
	// TypeBye: the sender is closing cleanly; no payload.
	TypeBye
	// TypePing asks whether the peer is alive; its reader (not the
	// application) answers with TypePong. No payload.
	TypePing
	// TypePong answers a ping; no payload.
	TypePong
	// TypeShmOffer: the dialing side of a connection offers a shared
	// memory segment, or declines to (see shmOffer.encode); rank pairs on
	// different hosts skip it.
	TypeShmOffer
	// TypeShmAnswer: the accepting side's answer to an offer, always
	// sent. Payload: byte 0 is 1 if it mapped the segment (the pair then
	// moves its data through it), else 0; byte 1 is 1 if the offer's host
	// key is its own (also when it did not map the segment), else 0; the
	// rest is why it did not map the segment ("" when it did). A payload
	// under 2 bytes counts as a refusal.
	TypeShmAnswer
	// TypeReady ends a rank pair's setup (after the answer, or alone):
	// the dialer uses the connection once it has sent this, the acceptor
	// once it has read it. No payload. Hub links do not send it.
	TypeReady
	typeEnd // one past the last valid type
)

// Valid reports whether t is one of the types above (a reader refuses a
// frame of any other).
func (t Type) Valid() bool { return t != 0 && t < typeEnd }

// Header is the fixed part of every frame. The fields that describe the
// collective (Kind, DType, Op, Count, Seq) let a receiver check that its
// peer is running the same call on a buffer of the same length.
type Header struct {
	Type  Type
	DType uint8  // element type of the collective
	Op    uint8  // reduction op
	Kind  uint8  // which collective
	Seq   uint32 // collective number on the Comm, the same on every rank
	Step  uint32 // step and segment within the collective
	Count uint64 // elements in the sender's buffer for this collective
	Len   uint32 // payload bytes that follow
	// Comm is the communicator the frame belongs to (0: the job's own;
	// collective.Comm.Split's children have their own), with ChanP2P set
	// for point-to-point messages, whose Seq is then the tag. A Mux
	// delivers frames by Comm and Seq.
	Comm uint32
}
