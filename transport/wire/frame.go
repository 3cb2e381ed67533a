package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gorun/gorun/transport"
)

// HeaderSize is the size of an encoded Header.
const HeaderSize = 32

// magic starts every frame, to catch a stream that lost its framing.
const magic uint16 = 0x6772 // "gr" as a number; on the wire, little-endian: 0x72 0x67

// DefaultMaxPayload caps a frame's payload unless Config.MaxPayload says
// otherwise.
const DefaultMaxPayload = 64 << 20

// ErrFrame is the sentinel for a malformed frame or handshake.
var ErrFrame = errors.New("malformed frame")

// FrameError says what is wrong with a frame.
type FrameError struct{ Msg string }

func (e *FrameError) Error() string        { return "transport: malformed frame: " + e.Msg }
func (e *FrameError) Is(target error) bool { return target == ErrFrame }

// PutHeader encodes h into b, which must hold HeaderSize bytes.
func PutHeader(b []byte, h transport.Header) {
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

// ParseHeader decodes and checks a header. A payload longer than
// maxPayload is an error, so a caller can size its buffer from Len safely.
func ParseHeader(b []byte, maxPayload int) (transport.Header, error) {
	if len(b) < HeaderSize {
		return transport.Header{}, &FrameError{fmt.Sprintf("header is %d bytes, want %d", len(b), HeaderSize)}
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != magic {
		return transport.Header{}, &FrameError{fmt.Sprintf("bad magic %#04x", m)}
	}
	h := transport.Header{
		Type:  transport.Type(b[2]),
		DType: b[3],
		Op:    b[4],
		Kind:  b[5],
		Seq:   binary.LittleEndian.Uint32(b[8:]),
		Step:  binary.LittleEndian.Uint32(b[12:]),
		Count: binary.LittleEndian.Uint64(b[16:]),
		Len:   binary.LittleEndian.Uint32(b[24:]),
		Comm:  binary.LittleEndian.Uint32(b[28:]),
	}
	if !h.Type.Valid() {
		return transport.Header{}, &FrameError{fmt.Sprintf("unknown frame type %d", h.Type)}
	}
	if r := binary.LittleEndian.Uint16(b[6:]); r != 0 {
		return transport.Header{}, &FrameError{fmt.Sprintf("reserved bits set (%#04x)", r)}
	}
	if uint64(h.Len) > uint64(maxPayload) {
		return transport.Header{}, &FrameError{fmt.Sprintf("payload of %d bytes exceeds the %d byte cap", h.Len, maxPayload)}
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
func (fr *Reader) Next(alloc func(n int) []byte) (transport.Header, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return transport.Header{}, nil, err
	}
	h, err := ParseHeader(fr.hdr[:], fr.maxPayload)
	if err != nil {
		return transport.Header{}, nil, err
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
			return transport.Header{}, nil, err
		}
	}
	return h, p, nil
}

// AppendFrame appends an encoded frame to b.
func AppendFrame(b []byte, h transport.Header, payload []byte) []byte {
	h.Len = uint32(len(payload))
	var hb [HeaderSize]byte
	PutHeader(hb[:], h)
	return append(append(b, hb[:]...), payload...)
}
