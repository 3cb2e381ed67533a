package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gorun/gorun/internal/backoff"
	"github.com/gorun/gorun/transport"
)

// Ends identifies the two ends of a connection in a handshake: the dialer
// From, the acceptor To, in a job of Size ranks. Services beside the rank
// mesh (ParamHub) use their own numbering for To.
type Ends struct {
	From, To, Size int
	// Port is the port the dialer listens on for its peers (0: none).
	Port uint16
}

// DialHandshake runs the dialer's side of the handshake on c within
// timeout: both sides prove they know secret, and the acceptor checks the
// protocol version, job and ends.
func DialHandshake(c net.Conn, jobID string, secret []byte, e Ends, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	h := Hello{Version: ProtocolVersion, From: uint32(e.From), To: uint32(e.To), Size: uint32(e.Size), Port: e.Port, JobID: jobID}
	return dialHello(c, secret, h)
}

// AcceptHandshake runs the acceptor's side on c within timeout. ok says
// whether the dialer's ends are acceptable; the version and job are
// checked here.
func AcceptHandshake(c net.Conn, jobID string, secret []byte, ok func(Ends) bool, timeout time.Duration) (Ends, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	h, err := AcceptHello(c, secret, func(h *Hello) byte {
		switch {
		case h.Version != ProtocolVersion:
			return StatusVersion
		case h.JobID != jobID:
			return StatusJob
		case !ok(Ends{From: int(h.From), To: int(h.To), Size: int(h.Size)}):
			return StatusRanks
		}
		return StatusOK
	})
	if err != nil {
		return Ends{}, fmt.Errorf("transport: from %s: %w", c.RemoteAddr(), err)
	}
	return Ends{From: int(h.From), To: int(h.To), Size: int(h.Size), Port: h.Port}, nil
}

// DialFunc opens a connection to addr.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// DialAuth dials addr until it connects and passes the handshake, or ctx
// ends; a peer that is not listening yet is retried with a growing pause
// (as DefaultConfig's RetryPause and MaxRetryPause pace the rank mesh).
// A refused handshake (ErrAuth) is final. On ctx's end the error names
// the cause and the last failure.
// dial, if not nil, replaces TCP (an in-memory listener's Dial, say).
func DialAuth(ctx context.Context, dial DialFunc, addr, jobID string, secret []byte, e Ends, dialTimeout, handshakeTimeout time.Duration) (net.Conn, error) {
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: dialTimeout}
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	var last error
	for attempt := 0; ; attempt++ {
		c, err := dial(ctx, addr)
		if err == nil {
			if err = DialHandshake(c, jobID, secret, e, handshakeTimeout); err == nil {
				return c, nil
			}
			c.Close()
			if errors.Is(err, transport.ErrAuth) {
				return nil, err
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to %s: %w (last error: %v)", addr, context.Cause(ctx), last)
		case <-time.After(backoff.Pause(attempt, backoff.DefaultPause, backoff.DefaultMaxPause)):
		}
	}
}
