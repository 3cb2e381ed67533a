package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns a pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestStatusLine: with stderr on a terminal, a job that runs for a few
// seconds gets a status line redrawn in place on stderr, never in the
// ranks' output (stdout, here a pipe); --quiet and a redirected stderr
// have none.
func TestStatusLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tty   bool
		quiet bool
	}{{"terminal", true, false}, {"quiet", true, true}, {"redirected", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-np", "2", "sh", "-c", "echo start; sleep 4; echo end"}
			if tc.quiet {
				args = append([]string{"--quiet"}, args...)
			}
			cmd, out, errb := gorunCmd(t, args...)
			var term strings.Builder
			done := make(chan struct{})
			if tc.tty {
				m, s := openPTY(t)
				defer m.Close()
				cmd.Stderr = s
				go func() {
					defer close(done)
					b := make([]byte, 4096)
					for {
						n, err := m.Read(b)
						term.Write(b[:n])
						if err != nil {
							return
						}
					}
				}()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				s.Close()
			} else {
				close(done)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, errb)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the terminal did not close")
			}
			stderr := term.String() + errb.String()
			shown := strings.Contains(stderr, "\r\x1b[Kgorun: 2/2 ranks running (localhost 2)")
			if shown != (tc.tty && !tc.quiet) {
				t.Fatalf("status line shown %v:\n%q", shown, stderr)
			}
			if strings.Contains(out.String(), "ranks running") || strings.Count(out.String(), "\n") != 4 {
				t.Fatalf("stdout:\n%q", out)
			}
			if last := strings.LastIndex(stderr, "\r\x1b[Kgorun: 2/2"); shown && !strings.Contains(stderr[last+1:], "\r\x1b[K") {
				t.Fatalf("the line was not cleared at the end:\n%q", stderr)
			}
		})
	}
}
