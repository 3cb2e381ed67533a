package ps

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gorun/gorun/reduce"
	"github.com/gorun/gorun/transport/wire"
)

// ParamHub messages travel as the payload of transport data frames, on a
// connection that starts with transport's authenticated handshake. Each
// payload is a fixed 96-byte header, the key padded to 8 bytes, and the
// data, so that the data of a frame read into a fresh buffer is aligned.

type msgType uint8

// ONLY APPEND TO THIS LIST: the values cross the wire.
const (
	msgDeclare  msgType = iota + 1 // create a key: Key, Count=len, Code=update mode, Stale=staleness, LR, Momentum, Data=init (float64)
	msgPush                        // Key, Clock, Samples, DType, Data
	msgPull                        // Key, Clock, DType (of the reply)
	msgPushPull                    // a push of Clock, then a pull of Clock+1
	msgRound                       // one partition of a collective (see roundSpec)
	msgShare                       // LB-BSP: Count=global batch, Samples and Nanos of the last iteration
	msgReply                       // ID; Data, Stale (staleness seen), Count (a share)
	msgError                       // ID; Code, Data=text
	msgLost                        // a worker reports that worker Root is lost; Data=reason
	// A sparse push (sparse_codec.go): Key, Clock, Samples, DType of the
	// values, Code=method, Kind=codec, Count=partition length, N=elements
	// sent, Data=payload.
	msgSparsePush
	msgSparsePushPull // a sparse push of Clock, then a pull of Clock+1
	// ID: the hub has applied the push of request ID, a sparse push-pull
	// that asked (askPushed); the pull's answer follows.
	msgPushed
	msgEnd
)

// Fields some types have taken on since (old peers leave them zero):
//   - msgDeclare: Kind=sparse method, WantOff=the sparse ratio's float64
//     bits, WantLen=the sparse seed.
//   - msgError: Kind, bits: errPushed when the request's push was applied
//     before it failed (a push-pull whose pull failed), so that a worker
//     with error feedback does not take back what the hub has;
//     errCorruptFlag when the error is ErrCorrupt.
//   - msgSparsePushPull: Part, bits: askPushed asks the hub to say
//     msgPushed as soon as it has applied the push, when the pull's answer
//     does not come with it (a BSP round still open), so that a worker
//     knows which partitions landed before every answer is in. A hub that
//     predates msgPushed ignores the bit (the worker then learns it from
//     the answer), and a worker that does not set it never gets one.

//   - msgRound and msgReply: the byte after the key length (reserved
//     before, so older peers refuse it loudly) is Wire, the reduce.Wire
//     a reduction round's float32 data travels in both ways: a worker's
//     part and the hub's answer carry N elements of Wire.Size() bytes.
//     Zero is the data as DType says. Only float32 reductions take one.

//   - msgReply to a msgShare: Kind, bits: shareRelaxed when no split met
//     the deadline and the round was split without it (ShareConfig.Miss).

// shareRelaxed is a share reply's Kind bit: the deadline was relaxed.
const shareRelaxed uint8 = 1

// errPushed is msgError's Kind for an error after the push was applied.
const errPushed uint8 = 1

// askPushed is msgSparsePushPull's Part bit that asks for msgPushed.
const askPushed uint32 = 1

var msgName = [...]string{"?", "declare", "push", "pull", "pushpull", "round", "share", "reply", "error", "lost", "sparsepush", "sparsepushpull", "pushed"}

func (t msgType) String() string {
	if t > 0 && t < msgEnd {
		return msgName[t]
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// Round kinds. ONLY APPEND.
const (
	kindReduce    uint8 = iota + 1 // fold every worker's part with Op
	kindGather                     // concatenate every worker's part in rank order
	kindBroadcast                  // the root's part
	kindEnd
)

const (
	msgHeaderSize = 96
	maxKeyLen     = 255
	// FrameSlack is what a hub message needs on top of its data (header
	// and key): a frame cap of payload+FrameSlack carries payload bytes of
	// tensor data.
	FrameSlack = 4096
)

// message is one decoded ParamHub message. Fields a type does not use are
// zero.
type message struct {
	Type    msgType
	DType   uint8
	Code    uint8 // msgError: error code; msgRound: reduce op; msgDeclare: update mode
	Kind    uint8 // msgRound: round kind
	Wire    uint8 // msgRound, msgReply: reduce.Wire of a float32 reduction's data (0: as DType says)
	ID      uint32
	Clock   uint32 // push and pull clock; msgRound: collective sequence number
	Samples uint32
	Root    uint32 // msgRound: broadcast root
	Part    uint32 // msgRound: partition number
	Stale   int32  // msgDeclare: staleness bound; msgReply: staleness seen
	Count   uint64 // msgRound: elements in each worker's buffer; msgDeclare: length; msgShare: batch
	Off, N  uint64 // msgRound: the partition [Off, Off+N) of the buffer
	WantOff uint64 // msgRound: the part of the partition's result wanted back
	WantLen uint64
	Nanos   int64 // msgShare: compute time of the last iteration
	LR      float64
	Mom     float64
	Key     string
	Data    []byte
	// buf, not on the wire, is the pooled frame payload (transport.GetBuf)
	// the message was decoded from, if any: whoever is done with Data
	// last may give it back.
	buf []byte
	// release, not on the wire, runs once Data has been written to the
	// connection (never if it is not): a hub's answers give a pooled
	// result back through it.
	release func()
}

func pad8(n int) int { return (n + 7) &^ 7 }

// size is the encoded size of m.
func (m *message) size() int { return msgHeaderSize + pad8(len(m.Key)) + len(m.Data) }

// appendHeader appends m's header and key (without the data) to b.
func (m *message) appendHeader(b []byte) []byte {
	b = append(b, byte(m.Type), m.DType, m.Code, m.Kind)
	le := binary.LittleEndian
	b = le.AppendUint32(b, m.ID)
	b = le.AppendUint32(b, m.Clock)
	b = le.AppendUint32(b, m.Samples)
	b = le.AppendUint32(b, m.Root)
	b = le.AppendUint32(b, m.Part)
	b = le.AppendUint32(b, uint32(m.Stale))
	b = le.AppendUint64(b, m.Count)
	b = le.AppendUint64(b, m.Off)
	b = le.AppendUint64(b, m.N)
	b = le.AppendUint64(b, m.WantOff)
	b = le.AppendUint64(b, m.WantLen)
	b = le.AppendUint64(b, uint64(m.Nanos))
	b = le.AppendUint64(b, math.Float64bits(m.LR))
	b = le.AppendUint64(b, math.Float64bits(m.Mom))
	b = le.AppendUint16(b, uint16(len(m.Key)))
	b = append(b, m.Wire, 0) // the wire format; reserved
	b = append(b, m.Key...)
	return append(b, make([]byte, pad8(len(m.Key))-len(m.Key))...)
}

// encode returns m as one payload (used for small messages and tests).
func (m *message) encode() []byte {
	return append(m.appendHeader(make([]byte, 0, m.size())), m.Data...)
}

// decodeMessage parses a payload. Data aliases p. Every length is checked
// before it is used.
func decodeMessage(p []byte) (message, error) {
	if len(p) < msgHeaderSize {
		return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub message of %d bytes is shorter than its %d byte header", len(p), msgHeaderSize)}
	}
	le := binary.LittleEndian
	m := message{
		Type: msgType(p[0]), DType: p[1], Code: p[2], Kind: p[3],
		ID:      le.Uint32(p[4:]),
		Clock:   le.Uint32(p[8:]),
		Samples: le.Uint32(p[12:]),
		Root:    le.Uint32(p[16:]),
		Part:    le.Uint32(p[20:]),
		Stale:   int32(le.Uint32(p[24:])),
		Count:   le.Uint64(p[28:]),
		Off:     le.Uint64(p[36:]),
		N:       le.Uint64(p[44:]),
		WantOff: le.Uint64(p[52:]),
		WantLen: le.Uint64(p[60:]),
		Nanos:   int64(le.Uint64(p[68:])),
		LR:      math.Float64frombits(le.Uint64(p[76:])),
		Mom:     math.Float64frombits(le.Uint64(p[84:])),
	}
	keyLen := int(le.Uint16(p[92:]))
	m.Wire = p[94]
	if p[95] != 0 {
		return message{}, &wire.FrameError{Msg: "paramhub message: reserved bytes set"}
	}
	if m.Type == 0 || m.Type >= msgEnd {
		return message{}, &wire.FrameError{Msg: fmt.Sprintf("unknown paramhub message type %d", m.Type)}
	}
	if keyLen > maxKeyLen {
		return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub key of %d bytes exceeds %d", keyLen, maxKeyLen)}
	}
	if len(p) < msgHeaderSize+pad8(keyLen) {
		return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub message of %d bytes cannot hold its %d byte key", len(p), keyLen)}
	}
	m.Key = string(p[msgHeaderSize : msgHeaderSize+keyLen])
	if data := p[msgHeaderSize+pad8(keyLen):]; len(data) > 0 {
		m.Data = data
	}
	if m.Type == msgRound && (m.Kind == 0 || m.Kind >= kindEnd) {
		return message{}, &wire.FrameError{Msg: fmt.Sprintf("unknown round kind %d", m.Kind)}
	}
	if m.Wire != 0 {
		if err := checkWireField(&m); err != nil {
			return message{}, err
		}
	}
	switch m.Type {
	case msgPush, msgPushPull, msgPull, msgRound, msgReply:
		if m.Data != nil || m.Type == msgPull || m.Type == msgRound {
			size := reduce.Size(m.DType)
			if m.Wire != 0 {
				size = reduce.Wire(m.Wire).Size()
			}
			if size == 0 {
				return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub %v: unknown element type %d", m.Type, m.DType)}
			}
			if len(m.Data)%size != 0 {
				what := reduce.DTypeName(m.DType)
				if m.Wire != 0 {
					what = fmt.Sprintf("%v (%s on the wire)", reduce.Wire(m.Wire), what)
				}
				return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub %v: %d data bytes are not whole %s elements", m.Type, len(m.Data), what)}
			}
		}
	case msgDeclare:
		if len(m.Data)%8 != 0 {
			return message{}, &wire.FrameError{Msg: fmt.Sprintf("paramhub declare: %d init bytes are not whole float64s", len(m.Data))}
		}
	}
	return m, nil
}

// checkWireField validates a message's Wire: a known 2-byte format, on a
// round or reply of float32 data, and for a round a reduction.
func checkWireField(m *message) error {
	w := reduce.Wire(m.Wire)
	switch {
	case !w.Valid() || w == reduce.WireFull:
		return &wire.FrameError{Msg: fmt.Sprintf("paramhub %v: unknown wire format %d", m.Type, m.Wire)}
	case m.Type != msgRound && m.Type != msgReply:
		return &wire.FrameError{Msg: fmt.Sprintf("paramhub %v: a wire format (%v) on a message that takes none", m.Type, w)}
	case m.DType != reduce.DTypeOf[float32]():
		return &wire.FrameError{Msg: fmt.Sprintf("paramhub %v: wire format %v for %s data (float32 only)", m.Type, w, reduce.DTypeName(m.DType))}
	case m.Type == msgRound && m.Kind != kindReduce:
		return &wire.FrameError{Msg: fmt.Sprintf("paramhub round: wire format %v on a round of kind %d (reductions only)", w, m.Kind)}
	}
	return nil
}
