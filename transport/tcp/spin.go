package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/transport/internal/shmem"
)

// A blocking receive parks its thread, and waking an idle CPU for the next
// message costs tens of microseconds on a VM; spinning on the socket costs
// a few. So while a Recv waits on a peer, that peer's reader polls its
// socket without blocking for up to SpinTime before it parks; at other
// times it parks at once and burns nothing.
//
// With more ranks than cores a plain spin would hold a core the sender
// needs, and a park costs a sleep and a wake-up per message. There the
// reader gives its core away between polls (Config.SpinYield, as MPI
// libraries do when oversubscribed): a rank with nothing to read lets the
// others run, and is running again as soon as they yield or block. Where
// the host has other work besides the ranks (cpu.Gauge, weighing the
// host's runnable tasks against Config.HostRanks) a yield would hand the
// core to that work instead, and the reader parks at once.

// spinState is the part of a peer connection the spinning reader and Recv
// share.
type spinState struct {
	hot    atomic.Int32 // Recv calls waiting on this peer
	parked atomic.Bool  // the reader is (about to be) parked in the poller
}

// spinReader reads from a TCP connection, spinning while the peer is hot.
type spinReader struct {
	c     net.Conn
	rc    syscall.RawConn
	st    *spinState
	w     shmem.Wait  // how long to spin, and how (its Locked is unused)
	alive func() bool // false once the transport failed or is closing
}

// wait is how this mesh's waits poll (Config.SpinTime, SpinYield and
// HostRanks): its TCP receives', and on shared memory its receives' and
// its sends' for room in the ring.
func (t *Mesh) wait() shmem.Wait {
	return shmem.Wait{Spin: t.cfg.SpinTime, Yield: t.cfg.SpinYield, Ranks: t.cfg.HostRanks}
}

func newSpinReader(c net.Conn, st *spinState, w shmem.Wait, alive func() bool) io.Reader {
	sc, ok := c.(syscall.Conn)
	if !ok || w.Spin <= 0 {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &spinReader{c: c, rc: rc, st: st, w: w, alive: alive}
}

func (s *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		var n int
		var rerr error
		err := s.rc.Read(func(fd uintptr) bool {
			s.st.parked.Store(false)
			var start time.Time
			for {
				n, rerr = syscall.Read(int(fd), p)
				if rerr == syscall.EINTR {
					continue
				}
				if rerr != syscall.EAGAIN {
					return true
				}
				// Announce the park before the last look at hot, so that a
				// Recv that turns the peer hot either is seen here or sees
				// parked and kicks.
				s.st.parked.Store(true)
				if s.st.hot.Load() == 0 {
					return false
				}
				if start.IsZero() {
					start = time.Now()
					if s.w.Mode() == cpu.Park {
						return false // park at once
					}
				} else if time.Since(start) > s.w.Spin {
					return false
				}
				s.st.parked.Store(false)
				// Let the rank's other goroutines (its sender above all)
				// run between polls: with one P a spin that kept it would
				// starve them until sysmon took the P back, up to 10 ms.
				runtime.Gosched()
				if s.w.Yield {
					cpu.Yield()
				}
			}
		})
		if err != nil {
			// While the transport is alive the only read deadline is a
			// kick's (warm; Close sets its own after the transport has
			// failed): go back to reading. (A flag that paired each kick
			// with its deadline raced: a warm that lost its CPU between
			// the two found its flag taken for an earlier kick, and its
			// deadline ended a live connection.)
			if errors.Is(err, os.ErrDeadlineExceeded) && s.alive() {
				_ = s.c.SetReadDeadline(time.Time{})
				continue
			}
			return 0, err
		}
		if rerr != nil {
			return 0, rerr
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// warm marks peer hot for a Recv and wakes its reader if it is parked, so
// that it spins for the coming frame. The returned func undoes it.
func (st *spinState) warm(c net.Conn) func() {
	st.hot.Add(1)
	if st.parked.Load() {
		_ = c.SetReadDeadline(time.Now())
	}
	return func() { st.hot.Add(-1) }
}
