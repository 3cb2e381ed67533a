// Package control is the line protocol between an elastic rank and its
// host's agent (gorun --elastic with the ring strategy). The agent hands
// every rank one end of a unix stream socket pair and names its
// descriptor in GORUN_CONTROL_FD; the protocol is ASCII, one message a
// line ("\n"; a "\r" before it is dropped), at most MaxLine bytes a line.
//
//	rank  -> agent:  suspect <rank> <epoch> <reason to the end of the line>
//	rank  -> agent:  join <data address> <host key>
//	agent -> rank:   view <epoch> <live ranks, comma-separated, increasing> [+<rank> <data address> <host key>]...
//
// A rank sends suspect when it believes another rank is lost (frozen or
// unreachable), with the newest view epoch it has heard of; the launcher
// then kills that rank (fences it), unless it is gone already or it
// joined (restarted) in a newer view than the reporter had heard of:
// such a report is about its old process. Whenever a rank fails while the job goes on, the
// launcher, which sequences the job's membership, bumps the epoch and
// every rank still running gets the new view, e.g. "view 1 0,1,3". Epoch
// 0 is the start (every rank) and is never sent. Each view is the whole
// membership: a rank that does not read its channel may miss a view (the
// agent keeps the newest few) but never gets a stale one after a newer.
//
// With gorun --max-restarts a lost rank is started again. Before anything
// else the agent writes the restarted rank the current view (which does
// not hold it); the rank joins the job's gossip, starts its transport and
// says join with the address it listens on and its host key. The
// launcher then sends every running rank, the joiner too, the next view
// with the joiner in it, followed by "+<rank> <address> <host key>" for
// each rank that joins in this view: "view 4 0,1,2,3 +2 10.0.0.3:4021
// n2/5a1e". Addresses and host keys hold no white space.
//
// The parsers are pure and never allocate more than the line they are
// given; Reader caps a line before it buffers it.
package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MaxLine is the longest line either side accepts, without its newline.
const MaxLine = 64 << 10

var (
	// ErrLineTooLong: a line ran past MaxLine bytes; Reader skipped it.
	ErrLineTooLong = fmt.Errorf("control: line longer than %d bytes", MaxLine)
	// ErrMalformed: a line is not the message it should be.
	ErrMalformed = errors.New("control: malformed line")
)

// View is the job's membership after a change: its epoch (1 for the
// first change) and the live ranks, in increasing order; Joined are the
// ranks of Live that were restarted and join in this view.
type View struct {
	Epoch  int
	Live   []int
	Joined []Joiner
}

// Joiner is a restarted rank that joins a view: where its transport
// listens and its host key.
type Joiner struct {
	Rank       int
	Addr, Host string
}

// Join is a restarted rank's word that it is ready to join: where its
// transport listens and its host key.
type Join struct {
	Addr, Host string
}

// String is j's line, without the newline: "join 10.0.0.3:4021 n2/5a1e".
func (j Join) String() string { return "join " + j.Addr + " " + j.Host }

// ParseJoin parses a join line (without its newline): two words, neither
// holding a control character.
func ParseJoin(line string) (Join, error) {
	rest, ok := strings.CutPrefix(line, "join ")
	if !ok {
		return Join{}, malformed("want join ADDRESS HOST", line)
	}
	f := strings.Split(rest, " ")
	if len(f) != 2 || !word(f[0]) || !word(f[1]) {
		return Join{}, malformed("want join ADDRESS HOST", line)
	}
	return Join{Addr: f[0], Host: f[1]}, nil
}

// word: a non-empty token without spaces or control characters.
func word(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// String is v's line, without the newline: "view 1 0,1,3".
func (v View) String() string {
	var b strings.Builder
	b.WriteString("view ")
	b.WriteString(strconv.Itoa(v.Epoch))
	for i, r := range v.Live {
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
	for _, j := range v.Joined {
		b.WriteString(" +")
		b.WriteString(strconv.Itoa(j.Rank))
		b.WriteByte(' ')
		b.WriteString(j.Addr)
		b.WriteByte(' ')
		b.WriteString(j.Host)
	}
	return b.String()
}

// ParseView parses a view line (without its newline): an epoch of at
// least 1 and at least one rank, the ranks strictly increasing, then
// the joiners, each a rank of the view (once) with its address and host.
func ParseView(line string) (View, error) {
	rest, ok := strings.CutPrefix(line, "view ")
	if !ok {
		return View{}, malformed("want view EPOCH RANKS", line)
	}
	ep, list, ok := strings.Cut(rest, " ")
	list, joins, hasJoins := strings.Cut(list, " ")
	epoch, okE := number(ep)
	if !ok || !okE || epoch < 1 {
		return View{}, malformed("want view EPOCH RANKS, EPOCH from 1", line)
	}
	v := View{Epoch: epoch}
	for _, f := range strings.Split(list, ",") {
		r, ok := number(f)
		if !ok || len(v.Live) > 0 && r <= v.Live[len(v.Live)-1] {
			return View{}, malformed("want ranks in increasing order, comma-separated", line)
		}
		v.Live = append(v.Live, r)
	}
	if !hasJoins {
		return v, nil
	}
	f := strings.Split(joins, " ")
	if len(f)%3 != 0 {
		return View{}, malformed("want +RANK ADDRESS HOST after the ranks", line)
	}
	for i := 0; i < len(f); i += 3 {
		num, ok := strings.CutPrefix(f[i], "+")
		r, okR := number(num)
		if !ok || !okR || !word(f[i+1]) || !word(f[i+2]) {
			return View{}, malformed("want +RANK ADDRESS HOST after the ranks", line)
		}
		if _, in := slices.BinarySearch(v.Live, r); !in || slices.ContainsFunc(v.Joined, func(j Joiner) bool { return j.Rank == r }) {
			return View{}, malformed(fmt.Sprintf("joiner %d must be a rank of the view, once", r), line)
		}
		v.Joined = append(v.Joined, Joiner{Rank: r, Addr: f[i+1], Host: f[i+2]})
	}
	return v, nil
}

// Suspect is a rank's report that rank Rank is lost, and why. Epoch is
// the newest view the reporting rank had heard of: a report about a rank
// that joined (restarted) in a later view is about its old process.
type Suspect struct {
	Rank   int
	Epoch  int
	Reason string
}

// String is s's line, without the newline: "suspect 3 2 frozen". Control
// characters in the reason (a newline would end the line) become spaces.
func (s Suspect) String() string {
	line := "suspect " + strconv.Itoa(s.Rank) + " " + strconv.Itoa(s.Epoch)
	if s.Reason != "" {
		line += " " + clean(s.Reason)
	}
	return line
}

// ParseSuspect parses a suspect line (without its newline). The reason
// runs to the end of the line and may be empty; control characters in it
// become spaces.
func ParseSuspect(line string) (Suspect, error) {
	rest, ok := strings.CutPrefix(line, "suspect ")
	if !ok {
		return Suspect{}, malformed("want suspect RANK EPOCH REASON", line)
	}
	num, rest, _ := strings.Cut(rest, " ")
	ep, reason, _ := strings.Cut(rest, " ")
	r, ok := number(num)
	e, eok := number(ep)
	if !ok || !eok {
		return Suspect{}, malformed("want suspect RANK EPOCH REASON, RANK and EPOCH numbers", line)
	}
	return Suspect{Rank: r, Epoch: e, Reason: clean(reason)}, nil
}

// number parses a rank or an epoch: decimal digits only, at most 9 of
// them (no sign, no overflow).
func number(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// clean turns control characters (and DEL) into spaces.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func malformed(want, line string) error {
	const show = 80
	if len(line) > show {
		line = line[:show] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrMalformed, line, want)
}

// Reader reads lines of at most MaxLine bytes from a stream. Its buffer
// is allocated once, at MaxLine plus the newline.
type Reader struct {
	br *bufio.Reader
}

// NewReader reads lines from r.
func NewReader(r io.Reader) *Reader { return &Reader{br: bufio.NewReaderSize(r, MaxLine+1)} }

// Next returns the next line without its newline (and a "\r" before it);
// the slice is valid until the next call. A line longer than MaxLine is
// skipped to its end and reported as ErrLineTooLong; the next call reads
// the line after it. A last line without a newline is returned as a line;
// then Next returns the stream's error (io.EOF at its end).
func (r *Reader) Next() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		for err == bufio.ErrBufferFull {
			_, err = r.br.ReadSlice('\n')
		}
		if err != nil {
			return nil, err
		}
		return nil, ErrLineTooLong
	}
	if err != nil && len(line) == 0 {
		return nil, err
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}
