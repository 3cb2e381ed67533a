package wire

import (
	"errors"
	"net"
	"sync"
	"time"
)

// AcceptLoop accepts connections from ln and serves each in a goroutine
// of its own, counted in wg, until closing is closed or ln is. A
// transient failure (out of file descriptors, a connection reset before
// it was accepted) is told to warn and the loop goes on after pause, as
// net/http and memberlist do: one bad moment must not end every later
// connection. The caller adds the loop itself to wg.
func AcceptLoop(ln net.Listener, closing <-chan struct{}, pause time.Duration, wg *sync.WaitGroup, warn func(error), serve func(net.Conn)) {
	defer wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			warn(err)
			select {
			case <-closing:
				return
			case <-time.After(pause):
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(c)
		}()
	}
}
