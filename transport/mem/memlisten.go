package mem

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Listener is a net.Listener in memory: Dial returns one end of a
// net.Pipe and Accept the other. Servers written for net.Listener (a
// ParamHub hub, say) run on it in tests and in collective.NewLocal, with
// the same handshake and framing as over TCP.
type Listener struct {
	name   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

var _ net.Listener = (*Listener)(nil)

// NewListener returns a listener whose Addr is name.
func NewListener(name string) *Listener {
	return &Listener{name: name, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("accept on %s: %w", l.name, net.ErrClosed)
	}
}

// Dial connects to the listener; it waits for Accept, ctx, or Close.
func (l *Listener) Dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-l.closed:
	}
	client.Close()
	server.Close()
	return nil, fmt.Errorf("dial %s: connection refused (listener closed)", l.name)
}

// Close implements net.Listener; it is idempotent.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return memAddr(l.name) }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }
