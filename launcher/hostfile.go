package launcher

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// Host is one machine that ranks can be placed on.
type Host struct {
	// Name is the address gorun reaches the host by: a hostname, an IPv4
	// address or an IPv6 address (without brackets).
	Name string
	// Slots is how many ranks the host takes before it is full.
	Slots int
	// MaxSlots is a hard cap that even --oversubscribe does not pass;
	// 0 means no cap.
	MaxSlots int
	// Speed is how fast the host runs a rank's work relative to the
	// others (hostfile `speed=2.5`); 0 means 1. Only --map-by speed reads
	// it.
	Speed float64
}

// ParseError is a hostfile problem with the place it was found.
type ParseError struct {
	File string // file name, or "-H" for the command-line list
	Line int    // 1-based line (or list item) number
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// maxSlots bounds a slot count so that placement arithmetic never overflows.
const maxSlotCount = 1 << 20

// ParseHostfile reads an Open MPI style ("host slots=N max_slots=M") or
// MPICH style ("host:N") hostfile. name is used only in error messages.
// Comments start with '#'. A host named twice gets the sum of its slots.
// Hosts come back in the order they first appear.
func ParseHostfile(name string, r io.Reader) ([]Host, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var hosts []Host
	index := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h, err := parseEntry(fields)
		if err != nil {
			return nil, &ParseError{File: name, Line: line, Msg: err.Error()}
		}
		hosts = merge(hosts, index, h)
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{File: name, Line: line + 1, Msg: err.Error()}
	}
	if len(hosts) == 0 {
		return nil, &ParseError{File: name, Line: line, Msg: "no hosts"}
	}
	return hosts, nil
}

// ParseHostList parses the -H form: "host1:4,host2,[::1]:2".
func ParseHostList(list string) ([]Host, error) {
	var hosts []Host
	index := map[string]int{}
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, &ParseError{File: "-H", Line: i + 1, Msg: "empty host"}
		}
		h, err := parseEntry([]string{item})
		if err != nil {
			return nil, &ParseError{File: "-H", Line: i + 1, Msg: err.Error()}
		}
		hosts = merge(hosts, index, h)
	}
	return hosts, nil
}

func merge(hosts []Host, index map[string]int, h Host) []Host {
	if i, ok := index[h.Name]; ok {
		hosts[i].Slots = min(hosts[i].Slots+h.Slots, maxSlotCount)
		if h.MaxSlots > 0 && (hosts[i].MaxSlots == 0 || h.MaxSlots > hosts[i].MaxSlots) {
			hosts[i].MaxSlots = h.MaxSlots
		}
		if hosts[i].Speed == 0 {
			hosts[i].Speed = h.Speed
		}
		return hosts
	}
	index[h.Name] = len(hosts)
	return append(hosts, h)
}

// parseEntry parses one line's fields: the host (possibly "host:N") and
// optional key=value settings.
func parseEntry(fields []string) (Host, error) {
	name, slots, hasSlots, err := splitHost(fields[0])
	if err != nil {
		return Host{}, err
	}
	h := Host{Name: name, Slots: 1}
	if hasSlots {
		h.Slots = slots
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return Host{}, fmt.Errorf("expected key=value, got %q", f)
		}
		key = strings.ReplaceAll(strings.ToLower(key), "-", "_")
		if seen[key] {
			return Host{}, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		switch key {
		case "speed":
			v, err := strconv.ParseFloat(val, 64)
			if err != nil || v <= 0 || v > 1e6 || v != v {
				return Host{}, fmt.Errorf("speed: want a positive number up to 1e6, not %q", val)
			}
			h.Speed = v
		case "slots", "max_slots":
			n, err := parseCount(key, val)
			if err != nil {
				return Host{}, err
			}
			if key == "slots" {
				if hasSlots {
					return Host{}, fmt.Errorf("slots given twice (host:N and slots=)")
				}
				h.Slots = n
			} else {
				h.MaxSlots = n
			}
		default:
			return Host{}, fmt.Errorf("unknown setting %q (want slots=, max_slots= or speed=)", key)
		}
	}
	if h.MaxSlots > 0 && h.MaxSlots < h.Slots {
		return Host{}, fmt.Errorf("max_slots %d is less than slots %d", h.MaxSlots, h.Slots)
	}
	return h, nil
}

func parseCount(key, val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil {
		return 0, fmt.Errorf("%s: not a number %q", key, val)
	}
	if n < 1 {
		return 0, fmt.Errorf("%s: must be at least 1, got %d", key, n)
	}
	if n > maxSlotCount {
		return 0, fmt.Errorf("%s: %d is too large (at most %d)", key, n, maxSlotCount)
	}
	return n, nil
}

// splitHost splits "host", "host:N", "[v6]" or "[v6]:N".
func splitHost(s string) (name string, slots int, hasSlots bool, err error) {
	rest := ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, false, fmt.Errorf("unclosed '[' in %q", s)
		}
		name, rest = s[1:end], s[end+1:]
		if ip := net.ParseIP(name); ip == nil || ip.To4() != nil {
			return "", 0, false, fmt.Errorf("%q in brackets is not an IPv6 address", name)
		}
	} else {
		name = s
		if i := strings.IndexByte(s, ':'); i >= 0 {
			name, rest = s[:i], s[i:]
			if strings.Contains(rest[1:], ":") {
				return "", 0, false, fmt.Errorf("IPv6 address %q must be in brackets, like [%s]", s, s)
			}
		}
		if err := checkHostname(name); err != nil {
			return "", 0, false, err
		}
	}
	if rest == "" {
		return name, 0, false, nil
	}
	if rest[0] != ':' {
		return "", 0, false, fmt.Errorf("unexpected %q after host %q", rest, name)
	}
	n, err := parseCount("slots", rest[1:])
	if err != nil {
		return "", 0, false, err
	}
	return name, n, true, nil
}

func checkHostname(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if len(name) > 253 {
		return fmt.Errorf("host name too long (%d characters)", len(name))
	}
	for _, c := range name {
		ok := c == '-' || c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			return fmt.Errorf("bad character %q in host name %q", c, name)
		}
	}
	if name[0] == '-' {
		return fmt.Errorf("host name %q starts with '-'", name)
	}
	return nil
}
