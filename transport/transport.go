package transport

import (
	"context"
)

// Transport is what collective algorithms need from the network.
//
// Frames between two ranks arrive in the order they were sent. Send may be
// called from several goroutines, but only one goroutine may Recv from a
// given peer at a time.
type Transport interface {
	Rank() int
	Size() int
	// Send writes one frame to rank to. The payload may be reused when Send
	// returns. If ctx ends after part of the frame went out, Send returns
	// ctx's error and the rest goes out ahead of the next frame, so the
	// peer gets the whole frame (a frame not begun is not sent).
	Send(ctx context.Context, to int, h Header, payload []byte) error
	// Recv returns the next data frame from rank from. The caller must call
	// Frame.Release when done with the payload, and release the frames of
	// one peer in the order it received them (a payload may lie in shared
	// memory until then). A Recv that ctx ends part way through a frame
	// loses nothing: the next Recv from that peer returns the frame.
	Recv(ctx context.Context, from int) (Frame, error)
	// Abort tells every peer that this rank gives up, with the reason, and
	// fails the transport locally with err.
	Abort(err error)
	// Err returns the error that failed the transport, or nil.
	Err() error
	// Failed is closed when the transport fails (Err is then set).
	Failed() <-chan struct{}
	// Losses returns the peers this transport itself found lost, and
	// why, even those found after it failed for another reason (another
	// rank's abort, say), and a channel of each loss it finds from now
	// on: between them every loss once. Elastic services use it to learn
	// exactly who is gone. cancel ends the subscription (news is then
	// closed, as it is when the transport closes); call it when done.
	Losses() (lost map[int]string, news <-chan Loss, cancel func())
	// LocalPeers returns the peers on this rank's host (whether or not
	// they share memory with it), in rank order.
	LocalPeers() []int
	Close() error
}

// TrySender is implemented by a Transport that can tell a frame that goes
// out at once from one that would wait. TrySend sends the frame, as Send
// does, if it can without waiting for the peer or for another send (a
// shared-memory ring with room for it whole), and reports true; otherwise
// it sends nothing and reports false, and the caller sends it with Send,
// which also reports any error. An executor that must receive while its
// sends are under way (two ranks that both send first) tries its frames
// in order and hands the first that does not go, and every later one, to
// a goroutine: a call whose frames all go needs no other goroutine.
type TrySender interface {
	TrySend(to int, h Header, payload []byte) bool
}

// Frame is a received data frame.
type Frame struct {
	Header
	Payload []byte
	release func([]byte)
}

// NewFrame is a received frame whose payload release gives back (nil:
// nothing to give back), for implementations of Transport.
func NewFrame(h Header, payload []byte, release func([]byte)) Frame {
	return Frame{Header: h, Payload: payload, release: release}
}

// Release returns the payload's buffer for reuse. The payload must not be
// used afterwards. Release on a zero Frame does nothing.
func (f *Frame) Release() {
	if f.release != nil && f.Payload != nil {
		f.release(f.Payload)
	}
	f.Payload, f.release = nil, nil
}
