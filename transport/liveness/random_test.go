package liveness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// checker steps a machine and checks, after every step, what must hold
// whatever the events: a peer's generation ends at most once, lost or
// left and never both; a loss fails the job at most once and never in an
// elastic job; after a failure losses are only recorded; Lost and Status
// agree; the next deadline lies ahead; nothing comes after Closing; and
// every action names a peer of the job (pings and samples its current
// connection).
type checker struct {
	t        testing.TB
	m        *Machine
	cfg      Config
	terminal map[[2]int64]string // (peer, gen): "lost" or "left"
	failed   bool                // FailJob given, or Failed stepped
	closed   bool
	steps    int
}

func newChecker(t testing.TB, cfg Config) *checker {
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &checker{t: t, m: m, cfg: cfg, terminal: map[[2]int64]string{}}
}

func (c *checker) fail(format string, a ...any) {
	c.t.Helper()
	c.t.Fatalf("step %d: %s", c.steps, fmt.Sprintf(format, a...))
}

func (c *checker) step(now time.Time, ev Event) []Action {
	c.t.Helper()
	c.steps++
	switch ev.(type) {
	case Failed:
		c.failed = true
	case Closing:
		c.closed = true
	}
	acts := c.m.Step(now, ev)
	for _, a := range acts {
		if c.closed {
			c.fail("%v after Closing", a)
		}
		var peer int
		switch a := a.(type) {
		case DeclareLost:
			peer = a.Peer
			c.end(a.Peer, a.Gen, "lost", a)
			if a.Reason == "" {
				c.fail("%v names no reason", a)
			}
			switch {
			case c.failed && a.Then != RecordOnly:
				c.fail("%v after the job failed", a)
			case !c.failed && a.Then == RecordOnly:
				c.fail("%v while the job is healthy", a)
			case c.cfg.Elastic && a.Then == FailJob, !c.cfg.Elastic && a.Then == DropPeer:
				c.fail("%v in a job with Elastic %v", a, c.cfg.Elastic)
			}
			if a.Then == FailJob {
				c.failed = true
			}
		case DeclareLeft:
			peer = a.Peer
			c.end(a.Peer, a.Gen, "left", a)
		case Ping:
			peer = a.Peer
			c.current(a.Peer, a.Conn, a)
		case Sample:
			peer = a.Peer
			c.current(a.Peer, a.Conn, a)
		case Probe:
			peer = a.Peer
			if a.Timeout <= 0 {
				c.fail("%v", a)
			}
		case Kept:
			peer = a.Peer
		case AskAgain:
			peer = a.Peer
		case Doubt:
			peer = a.Peer
		default:
			c.fail("unknown action %T", a)
		}
		if peer < 0 || peer >= c.cfg.Size || peer == c.cfg.Rank {
			c.fail("%v names no peer of the job", a)
		}
	}
	for id, p := range c.m.peers {
		if _, ok := c.m.lost[id]; ok != (p.status == Lost) {
			c.fail("peer %d is %v, and in Lost: %v", id, p.status, ok)
		}
	}
	if at, ok := c.m.Deadline(); ok && !at.After(c.m.now) {
		c.fail("deadline %v is not after the step's time %v", at, c.m.now)
	}
	return acts
}

// end records that peer's generation gen ended as what.
func (c *checker) end(peer int, gen uint32, what string, a Action) {
	c.t.Helper()
	if g := c.m.Gen(peer); g != gen {
		c.fail("%v: the peer's generation is %d", a, g)
	}
	k := [2]int64{int64(peer), int64(gen)}
	if was, ok := c.terminal[k]; ok {
		c.fail("%v: generation %d of peer %d already %s", a, gen, peer, was)
	}
	c.terminal[k] = what
	if st := c.m.Status(peer); st.String() != what {
		c.fail("%v: status %v", a, st)
	}
}

func (c *checker) current(peer int, id ConnID, a Action) {
	c.t.Helper()
	p := c.m.peers[peer]
	if p == nil || p.conn == nil || p.conn.id != id {
		c.fail("%v: not the peer's current connection", a)
	}
}

// decodeEvents turns bytes into a stream of events at times: the input of
// the fuzz target and of TestRandomEvents. Peers run from -1 to Size,
// connections from 0 to 3, generations 0 to 2, and time moves by up to
// 2.5 s a step (sometimes back).
func decodeEvents(data []byte, size int) (evs []Event, at []time.Duration) {
	now := time.Duration(0)
	errs := []error{nil, errors.New("EOF"), errors.New("connection reset by peer")}
	for len(data) >= 4 {
		b := data[:4]
		data = data[4:]
		peer := int(b[1]%uint8(size+2)) - 1
		conn := ConnID(b[2] % 4)
		gen := uint32(b[2] >> 6 % 3)
		flag := b[3]&1 == 1
		err := errs[int(b[3]>>1)%len(errs)]
		d := time.Duration(b[3]>>2) * 40 * time.Millisecond
		if b[3]&2 == 2 && b[0]&0x80 == 0 {
			d = -d / 4
		}
		now += d
		var ev Event
		switch b[0] % 17 {
		case 0:
			ev = Tick{}
		case 1:
			ev = HostLoad{Load{Runnable: int(b[2]), CPUs: int(b[3] % 4)}}
		case 2:
			ev = Verdict{Peer: peer, Reason: gossipReason}
		case 3:
			ev = GossipLeft{Peer: peer}
		case 4:
			ev = Connected{Peer: peer, Gen: gen, Conn: conn}
		case 5:
			ev = Progress{Peer: peer, Conn: conn, Reads: uint64(b[3] % 5), Stuck: flag}
		case 6:
			ev = Pong{Peer: peer, Conn: conn}
		case 7:
			ev = Bye{Peer: peer, Conn: conn}
		case 8:
			ev = ReadEnded{Peer: peer, Conn: conn, Err: err, Malformed: flag}
		case 9:
			ev = SendFailed{Peer: peer, Conn: conn, Err: err}
		case 10:
			ev = PingFailed{Peer: peer, Conn: conn, Err: err}
		case 11:
			ev = ProbeDone{Peer: peer, Gen: gen, Answered: flag}
		case 12:
			ev = DialStarted{Peer: peer, Gen: gen}
		case 13:
			ev = DialFailed{Peer: peer, Gen: gen, Err: err, Kind: DialKind(b[3] % 6), Stall: time.Duration(b[3]/6) * 20 * time.Millisecond}
		case 14:
			switch b[0] % 3 {
			case 0:
				ev = Failed{}
			case 1:
				ev = GossipAlive{Peer: peer}
			default:
				ev = Tick{}
			}
		case 15:
			if b[0] == 15 {
				ev = Closing{}
			} else {
				ev = Tick{}
			}
		case 16:
			ev = Revive{Peer: peer, Keep: flag}
		}
		evs = append(evs, ev)
		at = append(at, now)
	}
	return evs, at
}

// configFrom picks a configuration from a byte.
func configFrom(b byte) Config {
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size = int(b%3), 4
	cfg.ConfirmTimeout = []time.Duration{0, 200 * time.Millisecond, time.Second}[b/3%3]
	cfg.ExplainWait = []time.Duration{0, 250 * time.Millisecond}[b/9%2]
	cfg.ConnectTimeout = []time.Duration{700 * time.Millisecond, 30 * time.Second}[b/18%2]
	cfg.Elastic = b&0x40 != 0
	cfg.WatchAll = b&0x80 != 0
	return cfg
}

// runEvents steps the decoded events through a checker; Sample actions
// are answered at once, as the owner must, with made-up counts.
func runEvents(t testing.TB, cfgByte byte, data []byte) {
	cfg := configFrom(cfgByte)
	c := newChecker(t, cfg)
	evs, at := decodeEvents(data, cfg.Size)
	for i, ev := range evs {
		now := t0.Add(at[i])
		queue := []Event{ev}
		for n := 0; len(queue) > 0; n++ {
			if n > 1000 {
				t.Fatalf("event %d (%T) does not settle", i, ev)
			}
			var e Event
			e, queue = queue[0], queue[1:]
			for _, a := range c.step(now, e) {
				if s, ok := a.(Sample); ok {
					queue = append(queue, Progress{Peer: s.Peer, Conn: s.Conn, Reads: uint64(i % 3), Stuck: i%5 == 0})
				}
			}
		}
	}
	// Then time runs out: everything pending fires, and settles.
	for range 1000 {
		d, ok := c.m.Deadline()
		if !ok {
			return
		}
		queue := []Event{Tick{}}
		for len(queue) > 0 {
			var e Event
			e, queue = queue[0], queue[1:]
			for _, a := range c.step(d, e) {
				if s, ok := a.(Sample); ok {
					queue = append(queue, Progress{Peer: s.Peer, Conn: s.Conn})
				}
			}
		}
	}
	t.Fatal("deadlines keep coming with every peer silent")
}

// TestRandomEvents: random event streams (peers outside the job, stale
// connections and generations, time going back) never panic and keep
// the checker's invariants; with every peer silent at the end, every
// deadline runs out.
func TestRandomEvents(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		data := make([]byte, 4*r.IntN(120))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		cfgByte := byte(r.Uint32())
		t.Run(fmt.Sprint(i), func(t *testing.T) { runEvents(t, cfgByte, data) })
		if t.Failed() {
			return
		}
	}
}

// FuzzStep fuzzes the event stream: whatever comes, Step does not panic
// and the checker's invariants hold.
func FuzzStep(f *testing.F) {
	f.Add(byte(0x03), []byte{4, 2, 1, 0, 2, 2, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0xff})
	f.Add(byte(0x43), []byte{4, 2, 1, 0, 8, 2, 1, 6, 16, 2, 0, 1, 4, 2, 0x41, 0, 2, 2, 0, 0, 6, 2, 1, 0})
	f.Add(byte(0x84), []byte{2, 3, 0, 0, 11, 3, 0, 1, 12, 3, 0, 0, 13, 3, 0, 3})
	f.Add(byte(0x0c), []byte{3, 1, 0, 0, 0, 0, 0, 0xfc, 15, 0, 0, 0, 8, 1, 1, 0})
	f.Fuzz(func(t *testing.T, cfgByte byte, data []byte) {
		if len(data) > 4*400 {
			data = data[:4*400]
		}
		runEvents(t, cfgByte, data)
	})
}

// The model: peers whose truth the test knows, and a transport that
// answers the machine's actions as such peers would. It checks what the
// machine promises about them:
//   - a peer that answers every ping (however long its frames wait on
//     this rank's full inbox, or its own reader on its own full inbox,
//     the ping unread, while its process answers a connection) is never
//     lost;
//   - a peer that goes silent (no frames, no answers, its connection
//     open) is lost within two windows of gossip's first verdict after it
//     fell silent, or, with gossip's only verdict before the silence
//     (kept), within recheckWindows + 2 windows of the silence;
//   - after Revive, nothing about the replaced process (its connection's
//     end, failures, goodbye, pongs; a dial or probe for it) loses the
//     successor, which answers.

type peerKind uint8

const (
	answering peerKind = iota
	silent
	replaced
)

type modelPeer struct {
	kind     peerKind
	conn     ConnID
	oldConn  ConnID        // replaced: the first process's connection
	silentAt time.Duration // silent: from then on
	quiet    bool          // silent: gossip's only verdict came before the silence, none after
	deathAt  time.Duration // replaced: the first process's connection ends
	reviveAt time.Duration // replaced: Revive, and the successor connects 10 ms later
	stuck    []spell
	behind   []spell // its own reader waits on its own full inbox: it sends nothing, reads no ping
	reads    uint64
	verdicts []time.Duration
	lostAt   time.Duration
	lostGen  []uint32
	late     bool // an answer to a knock came back past its window: this rank was kept from running
}

// spell is a time the peer's reader waits on this rank's full inbox;
// when it ends, what waited is read (counted once).
type spell struct {
	from, to time.Duration
	counted  bool
}

type timed struct {
	at time.Duration
	ev Event
}

type model struct {
	t      *testing.T
	r      *rand.Rand
	c      *checker
	peers  map[int]*modelPeer
	queue  []timed
	window time.Duration
	now    time.Duration
}

func (md *model) at(at time.Duration, ev Event) {
	i, _ := slices.BinarySearchFunc(md.queue, at, func(x timed, at time.Duration) int {
		if x.at <= at { // stable: after events at the same time
			return -1
		}
		return 1
	})
	md.queue = slices.Insert(md.queue, i, timed{at, ev})
}

func (p *modelPeer) stuckAt(t time.Duration) (bool, time.Duration) { return within(p.stuck, t) }

// within reports whether t falls in one of spells, and when that one ends.
func within(spells []spell, t time.Duration) (bool, time.Duration) {
	for _, s := range spells {
		if t >= s.from && t < s.to {
			return true, s.to
		}
	}
	return false, 0
}

// alive reports whether the process behind peer's current generation
// answers at t.
func (md *model) alive(p *modelPeer, t time.Duration) bool {
	switch p.kind {
	case silent:
		return t < p.silentAt
	case replaced:
		return t >= p.reviveAt
	}
	return true
}

func TestModel(t *testing.T) {
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
		if t.Failed() {
			return
		}
	}
}

func runModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	cfg := DefaultConfig()
	cfg.Rank, cfg.Size = 0, 5
	cfg.ConfirmTimeout = []time.Duration{200 * time.Millisecond, time.Second}[r.IntN(2)]
	cfg.ExplainWait = []time.Duration{0, 250 * time.Millisecond}[r.IntN(2)]
	cfg.Elastic, cfg.WatchAll = r.IntN(2) == 0, r.IntN(2) == 0
	load := []Load{{}, {Runnable: 6, CPUs: 2}, {Runnable: 11, CPUs: 2}}[r.IntN(3)]
	md := &model{t: t, r: r, c: newChecker(t, cfg), peers: map[int]*modelPeer{}}
	md.window = DefaultPolicy(Observation{Base: cfg.ConfirmTimeout, Load: load})
	const horizon = 60 * time.Second
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	md.at(0, HostLoad{load})
	next := ConnID(0)
	for id := 1; id < cfg.Size; id++ {
		p := &modelPeer{kind: peerKind(r.IntN(3))}
		if p.kind == replaced && !cfg.Elastic {
			p.kind = answering
		}
		md.peers[id] = p
		next++
		p.conn = next
		md.at(0, Connected{Peer: id, Conn: p.conn})
		// Stuck spells: the reader waits on this rank's full inbox, and
		// reads what waited (the pong among it) when it ends.
		for s := ms(0, 5000); s < 40*time.Second; s += ms(500, 10000) {
			e := s + ms(10, 5000)
			p.stuck = append(p.stuck, spell{from: s, to: e})
			s = e
		}
		// Behind spells: its own reader waits for its own collectives;
		// it sends nothing meanwhile, and reads this rank's ping when
		// the spell ends. Up to many windows long.
		for s := ms(0, 8000); s < 40*time.Second; s += ms(1000, 12000) {
			e := s + ms(10, 8000)
			p.behind = append(p.behind, spell{from: s, to: e})
			s = e
		}
		switch p.kind {
		case silent:
			p.silentAt = ms(0, 20000)
			p.behind = slices.DeleteFunc(p.behind, func(s spell) bool { return s.to > p.silentAt })
			// Spells end before the silence; the last verdict comes
			// after it.
			p.stuck = slices.DeleteFunc(p.stuck, func(s spell) bool { return s.to > p.silentAt })
			p.verdicts = append(p.verdicts, p.silentAt+ms(0, 3000))
		case replaced:
			// The first process's connection ends, or the process
			// freezes (its connection open, silent) and is fenced: then
			// Revive may come in the middle of a check.
			p.oldConn = p.conn
			p.deathAt = ms(0, 5000)
			p.reviveAt = p.deathAt + ms(100, 5000)
			p.stuck, p.behind = nil, nil
			if r.IntN(2) == 0 {
				md.at(p.deathAt, ReadEnded{Peer: id, Conn: p.oldConn, Err: errors.New("EOF")})
			} else {
				md.at(p.deathAt+ms(0, 1000), Verdict{Peer: id, Reason: gossipReason})
			}
			md.at(p.reviveAt, Revive{Peer: id})
			next++
			p.conn = next
			gap := ms(10, 3000) // the successor connects after this gap
			md.at(p.reviveAt+gap, Connected{Peer: id, Gen: 1, Conn: p.conn})
			md.at(p.reviveAt+gap/2, Verdict{Peer: id, Reason: gossipReason}) // on the successor, unconnected
			// What the old process leaves behind, late.
			for range 12 {
				at := p.reviveAt + ms(0, 5000)
				old := []Event{
					ReadEnded{Peer: id, Conn: p.oldConn, Err: errors.New("EOF")},
					SendFailed{Peer: id, Conn: p.oldConn, Err: errors.New("broken pipe")},
					PingFailed{Peer: id, Conn: p.oldConn, Err: errors.New("broken pipe")},
					Bye{Peer: id, Conn: p.oldConn},
					Pong{Peer: id, Conn: p.oldConn},
					Progress{Peer: id, Conn: p.oldConn, Reads: 7},
					DialFailed{Peer: id, Gen: 0, Kind: DialAuth, Err: errors.New("authentication failed")},
					DialFailed{Peer: id, Gen: 0, Kind: DialAnswered, Err: errors.New("reading status: EOF")},
					ProbeDone{Peer: id, Gen: 0},
					DialStarted{Peer: id, Gen: 0},
					Connected{Peer: id, Gen: 0, Conn: 1000 + ConnID(id)},
				}
				md.at(at, old[r.IntN(len(old))])
			}
		}
		for range r.IntN(6) {
			p.verdicts = append(p.verdicts, ms(0, 40000))
		}
		if p.kind == silent && r.IntN(2) == 0 {
			// Gossip's verdict came while it still ran, and none since
			// (gossip declares a node dead once): only the standing
			// verdict's checks can find it.
			p.quiet = true
			p.verdicts = slices.DeleteFunc(p.verdicts, func(v time.Duration) bool { return v >= p.silentAt })
			p.verdicts = append(p.verdicts, max(p.silentAt-ms(0, 3000), 0))
		}
		for _, v := range p.verdicts {
			md.at(v, Verdict{Peer: id, Reason: gossipReason})
		}
		for range r.IntN(4) { // gossip's word of a goodbye, wrong: ignored for a connected peer
			md.at(ms(100, 40000), GossipLeft{Peer: id})
		}
		for range 40 { // frames now and then
			md.at(ms(0, 40000), Tick{})
		}
	}
	if r.IntN(4) == 0 {
		md.at(ms(0, 30000), Failed{})
	}
	md.run(horizon)
	for id, p := range md.peers {
		switch p.kind {
		case answering:
			if len(p.lostGen) > 0 {
				t.Errorf("peer %d answers every ping and was lost at %v", id, p.lostAt)
			}
		case silent:
			var first time.Duration = -1
			for _, v := range p.verdicts {
				if v >= p.silentAt && (first < 0 || v < first) {
					first = v
				}
			}
			bound := first + 2*md.window
			if p.late { // this rank was, in effect, starved: MaxStretch windows' worth
				bound = first + MaxStretch*md.c.m.cfg.ConfirmTimeout
			}
			if p.quiet {
				// Kept (or being checked) when it fell silent: the next
				// check comes recheckWindows windows after it was kept.
				first = p.silentAt
				bound = first + (recheckWindows+2)*md.window
				if p.late {
					bound = first + (recheckWindows+MaxStretch)*md.c.m.cfg.ConfirmTimeout
				}
			}
			if len(p.lostGen) == 0 || p.lostAt > bound {
				t.Errorf("peer %d silent from %v, verdict at %v: lost %v at %v, want by %v (window %v)", id, p.silentAt, first, len(p.lostGen) > 0, p.lostAt, bound, md.window)
			}
		case replaced:
			for _, g := range p.lostGen {
				if g != 0 {
					t.Errorf("peer %d: its successor (generation %d) was lost at %v", id, g, p.lostAt)
				}
			}
		}
	}
}

// run steps the model's events and the machine's deadlines in time order
// until the horizon, performing the actions as the peers' truth says.
func (md *model) run(horizon time.Duration) {
	for {
		at := horizon
		if len(md.queue) > 0 && md.queue[0].at < at {
			at = md.queue[0].at
		}
		var ev Event = Tick{}
		if d, ok := md.c.m.Deadline(); ok && d.Sub(t0) < at {
			at = d.Sub(t0)
		} else if len(md.queue) > 0 && md.queue[0].at == at {
			ev = md.queue[0].ev
			md.queue = md.queue[1:]
		} else {
			return
		}
		md.now = at
		md.deliver(ev)
	}
}

// deliver steps ev at md.now, and what its actions call for.
func (md *model) deliver(ev Event) {
	queue := []Event{md.observe(ev)}
	for len(queue) > 0 {
		ev, queue = queue[0], queue[1:]
		if ev == nil {
			continue
		}
		for _, a := range md.c.step(t0.Add(md.now), ev) {
			switch a := a.(type) {
			case Sample:
				p := md.peers[a.Peer]
				st, _ := p.stuckAt(md.now)
				queue = append(queue, Progress{Peer: a.Peer, Conn: a.Conn, Reads: p.reads, Stuck: st})
			case Ping:
				p := md.peers[a.Peer]
				when := md.now
				if st, end := p.stuckAt(md.now); st {
					when = end // read once the inbox has room
				}
				if b, end := within(p.behind, when); b {
					when = end // the peer reads it once its own inbox has room
				}
				when += time.Duration(md.r.Int64N(int64(md.window) / 2))
				if md.alive(p, when) && a.Conn == p.conn {
					md.at(when, Pong(a))
				}
			case Probe:
				p := md.peers[a.Peer]
				// A process answers a hello whatever its readers do, at
				// once; a stopped one lets the probe run out; a replaced
				// peer's first process never answers. Now and then a
				// knock's answer comes late, past the window (this rank's
				// own goroutine kept from running).
				answered := md.alive(p, md.now) && (p.kind != replaced || a.Gen == 1)
				when := md.now + a.Timeout
				if answered {
					when = md.now + time.Duration(md.r.Int64N(int64(a.Timeout)/2+1))
				}
				if a.Knock && md.r.IntN(10) == 0 {
					when += md.window + time.Duration(md.r.Int64N(int64(md.window)))
					p.late = true
				}
				md.at(when, ProbeDone{Peer: a.Peer, Gen: a.Gen, Seq: a.Seq, Answered: answered})
			case DeclareLost:
				p := md.peers[a.Peer]
				p.lostGen = append(p.lostGen, a.Gen)
				p.lostAt = md.now
			}
		}
	}
}

// observe updates the peers' truth as time passes (frames read, stuck
// spells over) and drops what a silent peer would not send.
func (md *model) observe(ev Event) Event {
	for _, p := range md.peers {
		if !md.alive(p, md.now) {
			continue
		}
		if b, _ := within(p.behind, md.now); md.r.IntN(3) == 0 && !b {
			p.reads += uint64(md.r.IntN(3))
		}
		for i := range p.stuck {
			if s := &p.stuck[i]; s.to <= md.now && !s.counted {
				s.counted = true
				p.reads++ // the spell is over: what waited is read
			}
		}
	}
	if pong, ok := ev.(Pong); ok {
		p := md.peers[pong.Peer]
		if !md.alive(p, md.now) && pong.Conn == p.conn {
			return nil
		}
	}
	return ev
}
