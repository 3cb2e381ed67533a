package inspect

import (
	"bytes"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// maxDump bounds the goroutine dump CatchQuit writes.
const maxDump = 64 << 20

var catchQuit sync.Once

// CatchQuit makes this process answer gorun's SIGQUIT (its request for a
// goroutine dump before it stops a stalled job) with a dump taken with
// the world stopped, written to stderr, before the Go runtime's own dump
// and exit. The runtime's own dump cannot show a goroutine that is
// running on another thread at that moment ("stack unavailable"), which
// on a loaded machine is often the very goroutine waiting in a
// collective; with every goroutine stopped, each stack can be read.
// The process still ends as SIGQUIT ends a Go program. Only gorun's
// collectives call it, and only in a rank gorun made a status page for.
func CatchQuit() {
	catchQuit.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGQUIT)
		go func() {
			<-ch
			buf := make([]byte, 1<<20)
			for {
				n := runtime.Stack(buf, true)
				if n < len(buf) || len(buf) >= maxDump {
					buf = buf[:n]
					break
				}
				buf = make([]byte, 2*len(buf))
			}
			// The first goroutine is this one, writing the dump: left out,
			// so that no reader takes it for the rank's.
			if i := bytes.Index(buf, []byte("\n\ngoroutine ")); i >= 0 {
				buf = buf[i+2:]
			}
			_, _ = os.Stderr.Write(append([]byte("SIGQUIT: quit (goroutines stopped by gorun's dump)\n\n"), buf...))
			signal.Reset(syscall.SIGQUIT)
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Signal(syscall.SIGQUIT)
			}
		}()
	})
}
