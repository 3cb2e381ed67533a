package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type is a frame's type.
type Type uint8

// ONLY APPEND TO THIS LIST: the values cross the wire. doc.go describes
// each frame's use and payload in full.
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

// HeaderSize is the size of an encoded Header.
const HeaderSize = 32

// magic starts every frame, to catch a stream that lost its framing.
const magic uint16 = 0x6772 // "gr" as a number; on the wire, little-endian: 0x72 0x67

// DefaultMaxPayload caps a frame's payload unless Config.MaxPayload says
// otherwise.
const DefaultMaxPayload = 64 << 20

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

// ErrFrame is the sentinel for a malformed frame or handshake.
var ErrFrame = errors.New("malformed frame")

// FrameError says what is wrong with a frame.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string        { return "transport: malformed frame: " + e.Msg }
func (e *FrameError) Is(target error) bool { return target == ErrFrame }

// PutHeader encodes h into b, which must hold HeaderSize bytes.
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], magic)
	b[2] = byte(h.Type)
	b[3] = h.DType
	b[4] = h.Op
	b[5] = h.Kind
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint32(b[8:], h.Seq)
	binary.LittleEndian.PutUint32(b[12:], h.Step)
	binary.LittleEndian.PutUint64(b[16:], h.Count)
	binary.LittleEndian.PutUint32(b[24:], h.Len)
	binary.LittleEndian.PutUint32(b[28:], h.Comm)
}

// parseHeader decodes and checks a header. A payload longer than
// maxPayload is an error, so a caller can size its buffer from Len safely.
func parseHeader(b []byte, maxPayload int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, &FrameError{fmt.Sprintf("header is %d bytes, want %d", len(b), HeaderSize)}
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != magic {
		return Header{}, &FrameError{fmt.Sprintf("bad magic %#04x", m)}
	}
	h := Header{
		Type:  Type(b[2]),
		DType: b[3],
		Op:    b[4],
		Kind:  b[5],
		Seq:   binary.LittleEndian.Uint32(b[8:]),
		Step:  binary.LittleEndian.Uint32(b[12:]),
		Count: binary.LittleEndian.Uint64(b[16:]),
		Len:   binary.LittleEndian.Uint32(b[24:]),
		Comm:  binary.LittleEndian.Uint32(b[28:]),
	}
	if h.Type == 0 || h.Type >= typeEnd {
		return Header{}, &FrameError{fmt.Sprintf("unknown frame type %d", h.Type)}
	}
	if r := binary.LittleEndian.Uint16(b[6:]); r != 0 {
		return Header{}, &FrameError{fmt.Sprintf("reserved bits set (%#04x)", r)}
	}
	if uint64(h.Len) > uint64(maxPayload) {
		return Header{}, &FrameError{fmt.Sprintf("payload of %d bytes exceeds the %d byte cap", h.Len, maxPayload)}
	}
	return h, nil
}

// Reader reads frames from a stream. It is not safe for concurrent use.
type Reader struct {
	r          io.Reader
	maxPayload int
	hdr        [HeaderSize]byte
}

// NewReader returns a Reader that refuses payloads over maxPayload bytes.
func NewReader(r io.Reader, maxPayload int) *Reader {
	return &Reader{r: r, maxPayload: maxPayload}
}

// Next reads one frame. alloc returns a buffer of exactly n bytes for the
// payload (nil alloc uses make); it is called only after the length has been
// checked against the cap. A clean end of stream before a header is io.EOF;
// an end inside a frame is io.ErrUnexpectedEOF.
func (fr *Reader) Next(alloc func(n int) []byte) (Header, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return Header{}, nil, err
	}
	h, err := parseHeader(fr.hdr[:], fr.maxPayload)
	if err != nil {
		return Header{}, nil, err
	}
	var p []byte
	if h.Len > 0 {
		if alloc != nil {
			p = alloc(int(h.Len))
		} else {
			p = make([]byte, h.Len)
		}
		if _, err := io.ReadFull(fr.r, p); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Header{}, nil, err
		}
	}
	return h, p, nil
}

// AppendFrame appends an encoded frame to b.
func AppendFrame(b []byte, h Header, payload []byte) []byte {
	h.Len = uint32(len(payload))
	var hb [HeaderSize]byte
	PutHeader(hb[:], h)
	return append(append(b, hb[:]...), payload...)
}
