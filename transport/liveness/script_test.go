package liveness

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The machine's rules as scripts (testdata/*.txt), after raft's
// datadriven tests: each directive is a command line, a "----" line and
// the output it must produce, one action a line, then a blank line. A
// "case" directive starts a fresh machine and names the situation the
// directives after it guard; each case runs as a subtest. Run with
// -rewrite to write the outputs the machine gives now (then read the
// diff: it is the change of behaviour).
//
// The harness stands in for the transport: it numbers connections,
// keeps each one's read count and inbox state (frames, stuck), this
// rank's stall to report (stall for=D, once) and whether its ping is still
// being written (writing on|off), and answers every Sample at
// once with a Progress, as the owner must. Pings are answered only by the
// script (pong), and so are probes of a peer with no connection
// (probe-done); a knock (a probe beside a ping) is answered at once as
// the case says (knocks=silent, the default: a stopped process;
// knocks=answered: a running one; knocks=manual: by the script).
//
// Commands (P is a peer; every event takes at=D, the time since the
// start, and keeps the last time without it):
//
//	case name="..." [confirm=D] [explain=D] [connect=D] [elastic] [watchall] [size=N] [knocks=K]
//	load runnable=N cpus=N           HostLoad
//	verdict P [reason="..."]         Verdict (default: membership's reason)
//	gossip-left P                    GossipLeft
//	gossip-alive P                   GossipAlive
//	connect P [conn=N] [gen=N]       Connected (a new connection by default)
//	frames P n=N                     the reader reads N frames (no event)
//	stuck P on|off                   the reader waits on a full inbox, or not (no event)
//	pong P | bye P                   Pong, Bye on the current connection (or conn=N)
//	end P [err="..."] [malformed]    ReadEnded
//	send-failed P [err="..."]        SendFailed
//	ping-failed P [err="..."]        PingFailed
//	probe-done P answered|unanswered ProbeDone [gen=N] [seq=N: the last probe's]
//	dial-started P                   DialStarted [gen=N]
//	dial-failed P [kind=K] [err=...] [stall=D] DialFailed (K: other, duplicate, shm, auth, answered) [gen=N]
//	failed | closing | tick          Failed, Closing, Tick
//	revive P [keep]                  Revive
//	status | lost | deadline         the machine's Status and Gen, Lost, Deadline
var rewrite = flag.Bool("rewrite", false, "rewrite the scripts' expected outputs with what the machine gives")

var t0 = time.Unix(1_000_000, 0)

const gossipReason = "declared dead by gossip (no answer to probes)"

func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScript(t, file) })
	}
}

// directive is one command of a script, the comments and blank lines
// before it, and its expected output.
type directive struct {
	pre  []string
	line int    // of the command
	cmd  string // the command line
	want []string
	got  []string
}

// parseScript reads a script's directives and the lines after the last.
func parseScript(t *testing.T, file string) (ds []*directive, tail []string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			tail = append(tail, l)
			i++
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", file, i+1, l)
		}
		d := &directive{pre: tail, line: i + 1, cmd: l}
		tail = nil
		for i += 2; i < len(lines) && lines[i] != ""; i++ {
			d.want = append(d.want, lines[i])
		}
		ds = append(ds, d)
	}
	return ds, tail
}

func runScript(t *testing.T, file string) {
	ds, tail := parseScript(t, file)
	var cases [][]*directive
	for _, d := range ds {
		if strings.HasPrefix(d.cmd, "case ") || len(cases) == 0 {
			cases = append(cases, nil)
		}
		cases[len(cases)-1] = append(cases[len(cases)-1], d)
	}
	for _, c := range cases {
		args := parseArgs(c[0].cmd)
		name := args.kv["name"]
		if args.cmd != "case" || name == "" {
			t.Fatalf("%s:%d: a script's cases start with case name=\"...\"", file, c[0].line)
		}
		t.Run(name, func(t *testing.T) {
			h := &harness{t: t, file: file}
			for _, d := range c {
				d.got = h.do(d)
				if !*rewrite && !slices.Equal(d.got, d.want) {
					t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, d.line, d.cmd, strings.Join(d.got, "\n"), strings.Join(d.want, "\n"))
				}
			}
		})
	}
	if *rewrite {
		var out []string
		for _, d := range ds {
			out = append(append(append(out, d.pre...), d.cmd, "----"), d.got...)
		}
		out = append(out, tail...)
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// args is a command line: the command, a peer (the first bare number),
// key=value pairs and bare flags.
type args struct {
	cmd   string
	peer  int
	kv    map[string]string
	flags map[string]bool
}

func parseArgs(line string) args {
	a := args{peer: -1, kv: map[string]string{}, flags: map[string]bool{}}
	var toks []string
	var cur strings.Builder
	quoted := false
	for _, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				toks = append(toks, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		toks = append(toks, cur.String())
	}
	if len(toks) == 0 {
		return a
	}
	a.cmd = toks[0]
	for _, tok := range toks[1:] {
		if k, v, ok := strings.Cut(tok, "="); ok {
			a.kv[k] = v
		} else if n, err := strconv.Atoi(tok); err == nil && a.peer < 0 {
			a.peer = n
		} else {
			a.flags[tok] = true
		}
	}
	return a
}

// harness runs one case: the machine and what the transport would hold.
type harness struct {
	t       *testing.T
	file    string
	m       *Machine
	at      time.Duration
	next    ConnID
	cur     map[int]ConnID // each peer's current connection, as the harness made it
	reads   map[ConnID]uint64
	stuck   map[ConnID]bool
	stall   map[ConnID]time.Duration // reported at the next Sample, then 0
	writing map[ConnID]bool          // a ping still being written
	// knocks is how a connected peer's process answers a knock (a Probe
	// beside the ping), at once: "silent" (a stopped process, the
	// default), "answered" (a running one), or "manual" (the script steps
	// probe-done itself).
	knocks string
	probed map[int]uint64 // each peer's last Probe's Seq, which probe-done answers by default
}

func (h *harness) fatalf(d *directive, format string, a ...any) {
	h.t.Helper()
	h.t.Fatalf("%s:%d: %s: %s", h.file, d.line, d.cmd, fmt.Sprintf(format, a...))
}

func (h *harness) dur(d *directive, a args, key string, def time.Duration) time.Duration {
	v, ok := a.kv[key]
	if !ok {
		return def
	}
	x, err := time.ParseDuration(v)
	if err != nil {
		h.fatalf(d, "%s: %v", key, err)
	}
	return x
}

func (h *harness) num(d *directive, a args, key string, def int) int {
	v, ok := a.kv[key]
	if !ok {
		return def
	}
	x, err := strconv.Atoi(v)
	if err != nil {
		h.fatalf(d, "%s: %v", key, err)
	}
	return x
}

func (h *harness) do(d *directive) []string {
	a := parseArgs(d.cmd)
	if a.cmd == "case" {
		cfg := DefaultConfig()
		cfg.Rank, cfg.Size = 0, h.num(d, a, "size", 8)
		cfg.ConfirmTimeout = h.dur(d, a, "confirm", cfg.ConfirmTimeout)
		cfg.ExplainWait = h.dur(d, a, "explain", cfg.ExplainWait)
		cfg.ConnectTimeout = h.dur(d, a, "connect", cfg.ConnectTimeout)
		cfg.Elastic, cfg.WatchAll = a.flags["elastic"], a.flags["watchall"]
		m, err := New(cfg)
		if err != nil {
			h.fatalf(d, "%v", err)
		}
		h.m, h.at, h.next = m, 0, 0
		h.cur, h.reads, h.stuck, h.stall = map[int]ConnID{}, map[ConnID]uint64{}, map[ConnID]bool{}, map[ConnID]time.Duration{}
		h.writing = map[ConnID]bool{}
		h.probed = map[int]uint64{}
		h.knocks = cmp.Or(a.kv["knocks"], "silent")
		if h.knocks != "silent" && h.knocks != "answered" && h.knocks != "manual" {
			h.fatalf(d, "knocks=%q", h.knocks)
		}
		return nil
	}
	if h.m == nil {
		h.fatalf(d, "no case yet")
	}
	if at := h.dur(d, a, "at", h.at); at < h.at {
		h.fatalf(d, "time goes back: at=%v after %v", at, h.at)
	} else {
		h.at = at
	}
	p := a.peer
	conn := ConnID(h.num(d, a, "conn", int(h.cur[p])))
	gen := uint32(h.num(d, a, "gen", int(h.m.Gen(p))))
	errOf := func(def string) error { return errors.New(cmp.Or(a.kv["err"], def)) }
	var ev Event
	switch a.cmd {
	case "load":
		ev = HostLoad{Load{Runnable: h.num(d, a, "runnable", 0), CPUs: h.num(d, a, "cpus", 0)}}
	case "verdict":
		ev = Verdict{Peer: p, Reason: cmp.Or(a.kv["reason"], gossipReason)}
	case "gossip-left":
		ev = GossipLeft{Peer: p}
	case "gossip-alive":
		ev = GossipAlive{Peer: p}
	case "connect":
		if _, ok := a.kv["conn"]; !ok {
			h.next++
			conn = h.next
		}
		h.cur[p] = conn
		ev = Connected{Peer: p, Gen: gen, Conn: conn}
	case "frames":
		h.reads[conn] += uint64(h.num(d, a, "n", 1))
		return nil
	case "stuck":
		h.stuck[conn] = a.flags["on"]
		return nil
	case "stall":
		h.stall[conn] = h.dur(d, a, "for", 0)
		return nil
	case "writing":
		h.writing[conn] = a.flags["on"]
		return nil
	case "pong":
		ev = Pong{Peer: p, Conn: conn}
	case "bye":
		ev = Bye{Peer: p, Conn: conn}
	case "end":
		ev = ReadEnded{Peer: p, Conn: conn, Err: errOf("EOF"), Malformed: a.flags["malformed"]}
	case "send-failed":
		ev = SendFailed{Peer: p, Conn: conn, Err: errOf("write: broken pipe")}
	case "ping-failed":
		ev = PingFailed{Peer: p, Conn: conn, Err: errOf("write: broken pipe")}
	case "probe-done":
		ev = ProbeDone{Peer: p, Gen: gen, Seq: uint64(h.num(d, a, "seq", int(h.probed[p]))), Answered: a.flags["answered"]}
	case "dial-started":
		ev = DialStarted{Peer: p, Gen: gen}
	case "dial-failed":
		kinds := map[string]DialKind{"other": DialOther, "duplicate": DialDuplicate, "shm": DialShmTimeout, "auth": DialAuth, "answered": DialAnswered}
		k, ok := kinds[cmp.Or(a.kv["kind"], "other")]
		if !ok {
			h.fatalf(d, "kind %q", a.kv["kind"])
		}
		ev = DialFailed{Peer: p, Gen: gen, Kind: k, Err: errOf("dial tcp: connection refused"), Stall: h.dur(d, a, "stall", 0)}
	case "failed":
		ev = Failed{}
	case "closing":
		ev = Closing{}
	case "tick":
		ev = Tick{}
	case "revive":
		ev = Revive{Peer: p, Keep: a.flags["keep"]}
	case "status":
		var out []string
		for _, id := range slices.Sorted(maps.Keys(h.m.peers)) {
			out = append(out, fmt.Sprintf("%d: %v gen=%d", id, h.m.Status(id), h.m.Gen(id)))
		}
		return out
	case "lost":
		var out []string
		lost := h.m.Lost()
		for _, id := range slices.Sorted(maps.Keys(lost)) {
			out = append(out, fmt.Sprintf("%d: %s", id, lost[id]))
		}
		return out
	case "deadline":
		at, ok := h.m.Deadline()
		if !ok {
			return []string{"none"}
		}
		return []string{"at " + at.Sub(t0).String()}
	default:
		h.fatalf(d, "unknown command %q", a.cmd)
	}
	return h.step(ev)
}

// step steps ev and performs the actions as the owner would: a Sample is
// answered at once with the harness's counts.
func (h *harness) step(ev Event) []string {
	var out []string
	queue := []Event{ev}
	for len(queue) > 0 {
		ev, queue = queue[0], queue[1:]
		for _, act := range h.m.Step(t0.Add(h.at), ev) {
			line := act.String()
			if s, ok := act.(Sample); ok {
				pr := Progress{Peer: s.Peer, Conn: s.Conn, Reads: h.reads[s.Conn], Stuck: h.stuck[s.Conn], Stall: h.stall[s.Conn], Writing: h.writing[s.Conn]}
				line += fmt.Sprintf(" -> reads=%d stuck=%v", pr.Reads, pr.Stuck)
				if pr.Stall > 0 {
					line += fmt.Sprintf(" stall=%v", pr.Stall)
				}
				if pr.Writing {
					line += " writing"
				}
				delete(h.stall, s.Conn)
				queue = append(queue, pr)
			}
			if pr, ok := act.(Probe); ok {
				h.probed[pr.Peer] = pr.Seq
				if pr.Knock && h.knocks != "manual" {
					line += " -> " + h.knocks
					queue = append(queue, ProbeDone{Peer: pr.Peer, Gen: pr.Gen, Seq: pr.Seq, Answered: h.knocks == "answered"})
				}
			}
			out = append(out, line)
		}
	}
	return out
}
