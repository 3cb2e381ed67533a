package launcher

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/gorun/gorun/internal/inspect"
)

// The live status line: on a terminal, one line on stderr that gorun
// redraws in place every second once the job has run for statusAfter.
// Anything else gorun prints clears it first, so it never mixes with the
// ranks' output; the next tick draws it again.

const statusAfter = 3 * time.Second

type statusLine struct {
	w     io.Writer
	shown bool
	start time.Time
	prev  time.Time
	seq   uint64 // collectives finished by all ranks at prev
	bytes uint64
}

// clear erases the line if it is on the screen.
func (s *statusLine) clear() {
	if s != nil && s.shown {
		fmt.Fprint(s.w, "\r\033[K")
		s.shown = false
	}
}

// draw puts text on the line.
func (s *statusLine) draw(text string) {
	fmt.Fprint(s.w, "\r\033[K"+text)
	s.shown = true
}

// statusText is the line's text at now: ranks running per host,
// collectives and payload bytes per second since the last tick (over
// every rank that keeps a status page), and the rank furthest behind.
func statusText(ranks []rankState, views []inspect.RankView, s *statusLine, now time.Time) string {
	perHost := map[string]int{}
	running := 0
	for _, r := range ranks[:len(views)] {
		if r.started && !r.exited {
			perHost[r.host]++
			running++
		}
	}
	var hosts []string
	for h, n := range perHost {
		hosts = append(hosts, fmt.Sprintf("%s %d", h, n))
	}
	sort.Strings(hosts)
	text := fmt.Sprintf("gorun: %d/%d ranks running (%s)", running, len(views), strings.Join(hosts, ", "))
	var seq, bytes uint64
	slowest, declared := -1, 0
	for i, v := range views {
		if !v.State.Declared {
			continue
		}
		declared++
		seq += v.State.Seq
		bytes += v.State.Total
		if !v.Exited && (slowest < 0 || v.State.Seq < views[slowest].State.Seq) {
			slowest = i
		}
	}
	if declared > 0 {
		dt := now.Sub(s.prev).Seconds()
		if !s.prev.IsZero() && dt > 0 && seq >= s.seq && bytes >= s.bytes {
			text += fmt.Sprintf(" | %.0f collectives/s | %s/s", float64(seq-s.seq)/float64(declared)/dt, inspect.Bytes(uint64(float64(bytes-s.bytes)/dt)))
		}
		if slowest >= 0 {
			text += fmt.Sprintf(" | slowest: rank %d (#%d)", slowest, views[slowest].State.Seq)
		}
	}
	s.prev, s.seq, s.bytes = now, seq, bytes
	return text
}

// IsTerminal reports whether w is a terminal (gorun shows the status line
// only there).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return e == 0
}
