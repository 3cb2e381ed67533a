package shmem

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/wire"
)

// CtlMax caps the payload of a control frame (an offer, an answer, a
// ready) read while a connection is set up: a protocol bound, far above
// what an offer needs, not a tuning knob.
const CtlMax = 4 << 10

// ReadCtl reads one control frame from c, straight from the socket (no
// read-ahead: what follows belongs to whoever reads c next), within
// timeout and ctx.
func ReadCtl(ctx context.Context, c net.Conn, timeout time.Duration) (transport.Header, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	return wire.NewReader(c, CtlMax).Next(nil)
}

// WriteCtl writes one control frame within timeout (and ctx).
func WriteCtl(ctx context.Context, c net.Conn, timeout time.Duration, h transport.Header, payload []byte) (int, error) {
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	defer c.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	return c.Write(wire.AppendFrame(nil, h, payload))
}

// ExchangeCtl writes a control frame and reads the answer, of type want.
func ExchangeCtl(ctx context.Context, c net.Conn, timeout time.Duration, h transport.Header, payload []byte, want transport.Type) ([]byte, error) {
	if _, err := WriteCtl(ctx, c, timeout, h, payload); err != nil {
		return nil, err
	}
	ah, p, err := ReadCtl(ctx, c, timeout)
	if err != nil {
		return nil, err
	}
	if ah.Type != want {
		return nil, &wire.FrameError{Msg: fmt.Sprintf("frame type %d where type %d was due", ah.Type, want)}
	}
	return p, nil
}

func RingCapOf(bytes int) int {
	if bytes <= 0 {
		bytes = DefaultRingBytes
	}
	p := 4096
	for p < bytes {
		p *= 2
	}
	return p
}

// Bells are a connection's two FIFOs: in is read by this side's sleeper,
// out rung for the peer's. The raw conns write without waiting.
type Bells struct {
	In, Out     *os.File
	InRC, OutRC syscall.RawConn
}

func NewBells(in, out *os.File) (*Bells, error) {
	inRC, err := in.SyscallConn()
	var outRC syscall.RawConn
	if err == nil {
		outRC, err = out.SyscallConn()
	}
	if err != nil {
		_, _ = in.Close(), out.Close()
		return nil, err
	}
	return &Bells{In: in, Out: out, InRC: inRC, OutRC: outRC}, nil
}

// close closes both ends; nil does nothing.
func (b *Bells) Close() {
	if b != nil {
		_, _ = b.In.Close(), b.Out.Close()
	}
}

// BellPath names bell i of the segment at path: it matches the job's
// segment pattern, so the launcher's agents remove leftovers.
func BellPath(path string, i int) string { return fmt.Sprintf("%s-bell%d", path, i) }

// RemoveBells removes the bells' names (their opened ends stay).
func RemoveBells(path string) {
	for i := range 2 {
		_ = os.Remove(BellPath(path, i))
	}
}
