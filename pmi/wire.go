package pmi

import (
	"errors"
	"fmt"
	"strings"
)

// Limits announced to every rank (get_maxes), as mpiexec.hydra announces
// them, and the longest request line accepted.
const (
	MaxKVSName = 256
	MaxKey     = 64
	MaxValue   = 1024
	MaxLine    = 4096
)

// ErrMalformed is returned (wrapped) for a line that is not PMI-1.
var ErrMalformed = errors.New("pmi: malformed request")

// Request is one parsed line: its command (the value of cmd=, or of mcmd=
// for the multi-line spawn form) and its other key=value pairs.
type Request struct {
	Cmd   string
	Multi bool // mcmd=: the lines up to "endcmd" belong to it
	Args  map[string]string
}

// ParseLine parses one request line, without its newline: space-separated
// key=value tokens, the first of which is cmd= or mcmd=. Keys are unique
// and non-empty, values may be empty, and the line holds no control
// characters. The value of a put and the message of an abort (msg=, or
// message= as MPICH 4.2 names it) run to the
// end of the line, spaces included: they are the last field of their
// line in every PMI-1 client, and Open MPI's encoded values hold spaces.
func ParseLine(line string) (Request, error) {
	if len(line) > MaxLine {
		return Request{}, fmt.Errorf("%w: line of %d bytes (the limit is %d)", ErrMalformed, len(line), MaxLine)
	}
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < ' ' && c != '\t' || c == 0x7f {
			return Request{}, fmt.Errorf("%w: control character %#x at byte %d", ErrMalformed, c, i)
		}
	}
	first, rest := nextToken(line)
	if first == "" {
		return Request{}, fmt.Errorf("%w: empty line", ErrMalformed)
	}
	var r Request
	k, v, ok := strings.Cut(first, "=")
	switch {
	case ok && k == "cmd":
	case ok && k == "mcmd":
		r.Multi = true
	default:
		return Request{}, fmt.Errorf("%w: %q does not start with cmd=", ErrMalformed, clip(line))
	}
	if v == "" {
		return Request{}, fmt.Errorf("%w: empty command in %q", ErrMalformed, clip(line))
	}
	r.Cmd = v
	r.Args = make(map[string]string, 4)
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return r, nil
		}
		var t string
		t, rest = nextToken(rest)
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			return Request{}, fmt.Errorf("%w: token %q is not key=value", ErrMalformed, clip(t))
		}
		if _, dup := r.Args[k]; dup || k == "cmd" || k == "mcmd" {
			return Request{}, fmt.Errorf("%w: key %q given twice", ErrMalformed, clip(k))
		}
		if restOfLine(r, k) {
			v, rest = v+rest, ""
		}
		r.Args[k] = v
	}
}

// restOfLine reports whether key's value in r runs to the end of the line.
func restOfLine(r Request, key string) bool {
	return !r.Multi && (r.Cmd == "put" && key == "value" || r.Cmd == "abort" && (key == "msg" || key == "message"))
}

// nextToken splits s, which starts with a token, at the first space or tab
// after it (leading blanks are skipped).
func nextToken(s string) (tok, rest string) {
	s = strings.TrimLeft(s, " \t")
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// Format is the answer line "cmd=CMD k1=v1 k2=v2 ...\n" for the pairs kv
// (key, value, key, value, ...).
func Format(cmd string, kv ...string) []byte {
	b := append(make([]byte, 0, 64), "cmd="...)
	b = append(b, cmd...)
	for i := 0; i+1 < len(kv); i += 2 {
		b = append(b, ' ')
		b = append(b, kv[i]...)
		b = append(b, '=')
		b = append(b, kv[i+1]...)
	}
	return append(b, '\n')
}

// clip shortens what an error quotes.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
