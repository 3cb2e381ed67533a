package liveness

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Config is what the machine needs from the transport's configuration.
type Config struct {
	// Rank and Size are this rank's and the job's: events about a peer
	// outside [0, Size), or about Rank itself, are ignored.
	Rank, Size int
	// ConfirmTimeout is the base of a confirmation window (see Policy): how
	// long a peer gossip declared dead gets to answer; 0 trusts gossip at
	// once. It is also how long an unconnected peer that gossip says left
	// may take to show a connection before it counts as gone.
	ConfirmTimeout time.Duration
	// ExplainWait is how long a connection that ended or failed without a
	// goodbye waits for a better explanation (the job failing otherwise)
	// before its peer is blamed; 0 blames it at once.
	ExplainWait time.Duration
	// ConnectTimeout bounds all the attempts to connect to one peer; past
	// it the peer is lost.
	ConnectTimeout time.Duration
	// WatchAll checks gossip's verdict on a peer with no connection by
	// probing it, and loses it if it does not answer; without it such a
	// verdict only makes the next dial to it the check (Doubt).
	WatchAll bool
	// Elastic makes a loss the peer's alone (DropPeer), not the job's.
	Elastic bool
	// Policy gives confirmation windows; nil is DefaultPolicy.
	Policy Policy
}

// DefaultConfig returns the transport's default timings (Rank and Size
// are the caller's to set).
func DefaultConfig() Config {
	return Config{
		ConfirmTimeout: time.Second,
		ExplainWait:    250 * time.Millisecond,
		ConnectTimeout: 30 * time.Second,
		Policy:         DefaultPolicy,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("liveness: rank %d out of range for size %d", c.Rank, c.Size)
	case c.ConfirmTimeout < 0 || c.ExplainWait < 0:
		return errors.New("liveness: ConfirmTimeout and ExplainWait must not be negative")
	case c.ConnectTimeout <= 0:
		return errors.New("liveness: ConnectTimeout must be positive")
	}
	return nil
}

// Status is where a peer's current process stands.
type Status uint8

const (
	Live Status = iota // not known to be gone
	Left               // said goodbye (or gossip said so, and no connection came)
	Lost               // declared lost
)

func (s Status) String() string {
	switch s {
	case Live:
		return "live"
	case Left:
		return "left"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Machine is one rank's view of its peers' liveness. It is not safe for
// concurrent use: the owner steps it under its own lock, and performs the
// actions after (Step is not re-entrant).
type Machine struct {
	cfg     Config
	now     time.Time
	load    Load
	failed  bool // the job failed (FailJob, or Failed)
	closing bool

	peers   map[int]*peer
	pending map[int]*peer // peers with a deadline
	lost    map[int]string
	acts    []Action
	probes  uint64 // Probe actions emitted (their Seq)
}

// peer is what the machine knows of one peer. Made on first mention: a
// rank pays for the peers it hears of, not for the job's size.
type peer struct {
	id     int
	gen    uint32
	status Status
	conn   *conn // the current connection; nil: none in this generation

	chk check

	// A break: the current connection ended or failed without a goodbye.
	breakDue    time.Time
	breakReason string

	// Gossip said it left while it had no connection.
	leftDue time.Time

	// Connecting: the first dial; since when the clock runs (that dial,
	// or the peer's last refusal of one as a duplicate); ConnectTimeout's
	// end as last stretched; and the last failure.
	connectFirst time.Time
	connectSince time.Time
	connectDue   time.Time
	lastDial     error

	// Gossip declared it dead while it had no connection (Doubt).
	doubted    bool
	doubt      string
	doubtSince time.Time     // the first failed dial since
	doubtStall time.Duration // the longest this rank stalled in a dial failed since

	// Gossip holds it dead (the verdict's reason) until gossip holds it
	// alive again; once the data plane kept it, it is checked again at
	// recheckAt (rule 9).
	standing  string
	recheckAt time.Time
}

// conn is one connection as the machine sees it.
type conn struct {
	id     ConnID
	bye    bool // a goodbye was read
	ended  bool // its reader returned
	broken bool // its reader returned, or a write on it failed
	pings  uint64
	pongs  uint64
	pingAt time.Time // the last ping
	rtt    time.Duration
	reads  uint64 // as of the last Progress
	stuck  bool
}

// phase is what a check of gossip's verdict is doing.
type phase uint8

const (
	idle     phase = iota
	pinging        // pinged the connection; waiting for a pong, window by window
	draining       // the connection is broken: waiting while its reader makes progress
	probing        // no connection: probing by a connection (WatchAll)
)

// check is the confirmation of one verdict.
type check struct {
	phase    phase
	reason   string // the verdict's
	started  time.Time
	round    int
	window   time.Duration
	due      time.Time     // the window's end
	pongBase uint64        // pongs beyond this answer this check
	base     uint64        // reads at the window's start
	baseSet  bool          // base came (the Progress after the window's Sample)
	waitEnd  bool          // the window ended: a Sample is out, its Progress decides
	said     uint8         // the reasons an AskAgain was given for (askWhy)
	late     time.Duration // how late the window's end was stepped
	knock    knock         // the knock beside the ping (pinging)
	knockDue time.Time     // when to knock, if no pong has come (pinging)
	probe    uint64        // the Seq of the probe or knock whose answer counts
	heard    time.Time     // the check's start, or the last window with frames
}

// knock is where the knock on a connected peer stands: a Probe beside the
// ping, asking whether its process answers at all.
type knock uint8

const (
	knockNone     knock = iota // none out, or its answer used
	knockOut                   // a Probe is out
	knockAnswered              // its process answered
	knockSilent                // no answer within its timeout
)

// New returns a machine for cfg, or why cfg is not valid.
func New(cfg Config) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Policy == nil {
		cfg.Policy = DefaultPolicy
	}
	return &Machine{cfg: cfg, peers: map[int]*peer{}, pending: map[int]*peer{}, lost: map[int]string{}}, nil
}

// Status returns where peer's current process stands (Live for a peer
// never heard of).
func (m *Machine) Status(peer int) Status {
	if p := m.peers[peer]; p != nil {
		return p.status
	}
	return Live
}

// Gen returns peer's generation: how many times Revive gave it a new
// process.
func (m *Machine) Gen(peer int) uint32 {
	if p := m.peers[peer]; p != nil {
		return p.gen
	}
	return 0
}

// Lost returns the peers found lost and why (the first reason), also
// those found after the job failed for another reason; a peer leaves it
// when Revive gives it a new process.
func (m *Machine) Lost() map[int]string { return maps.Clone(m.lost) }

// Deadline returns the earliest time a Tick would fire something, and
// false if nothing is waiting for time. After every Step it is later than
// that Step's time.
func (m *Machine) Deadline() (time.Time, bool) {
	var at time.Time
	for _, p := range m.pending {
		for _, d := range p.deadlines() {
			if !d.IsZero() && (at.IsZero() || d.Before(at)) {
				at = d
			}
		}
	}
	return at, !at.IsZero()
}

// deadlines lists p's timers (zero: unset).
func (p *peer) deadlines() [6]time.Time {
	var due time.Time
	if p.chk.phase != idle && !p.chk.waitEnd {
		due = p.chk.due
	}
	var knock time.Time
	if p.chk.phase == pinging {
		knock = p.chk.knockDue
	}
	return [6]time.Time{p.breakDue, p.leftDue, p.connectDue, due, knock, p.recheckAt}
}

// Step takes one event that happened at now and returns the actions it
// calls for, then fires whatever is due at now. Time never goes back: a
// now before the last one is taken as the last one.
func (m *Machine) Step(now time.Time, ev Event) []Action {
	if now.IsZero() {
		now = time.Unix(0, 0) // the zero Time marks an unset deadline
	}
	if now.After(m.now) {
		m.now = now
	}
	m.acts = nil
	if m.closing {
		return nil
	}
	switch ev := ev.(type) {
	case Tick:
	case HostLoad:
		m.load = ev.Load
	case Verdict:
		if p := m.peer(ev.Peer); p != nil {
			if p.status == Live {
				p.standing = ev.Reason // until gossip holds it alive again
			}
			m.verdict(p, ev.Reason)
		}
	case GossipAlive:
		if p := m.peers[ev.Peer]; p != nil {
			p.standing, p.recheckAt = "", time.Time{}
		}
	case GossipLeft:
		if p := m.peer(ev.Peer); p != nil && p.status == Live && p.conn == nil && p.leftDue.IsZero() {
			p.leftDue = m.now.Add(m.cfg.ConfirmTimeout)
			m.pend(p)
		}
	case Connected:
		if p := m.peer(ev.Peer); p != nil && ev.Gen == p.gen && ev.Conn != 0 {
			m.connected(p, ev.Conn)
		}
	case Progress:
		if p, c := m.current(ev.Peer, ev.Conn); c != nil {
			c.reads, c.stuck = ev.Reads, ev.Stuck
			m.progress(p, c, ev.Stall, ev.Writing)
		}
	case Pong:
		m.pong(ev)
	case Bye:
		if p, c := m.current(ev.Peer, ev.Conn); c != nil {
			c.bye = true
			m.leave(p)
		}
	case ReadEnded:
		m.readEnded(ev)
	case SendFailed:
		if p, c := m.current(ev.Peer, ev.Conn); c != nil {
			c.broken = true
			if p.status == Live && !c.bye {
				m.brk(p, "send failed: "+errText(ev.Err))
			}
		}
	case PingFailed:
		if p, c := m.current(ev.Peer, ev.Conn); c != nil {
			c.broken = true
			if p.chk.phase == pinging {
				m.drain(p, c)
			}
		}
	case ProbeDone:
		p := m.peer(ev.Peer)
		switch {
		case p == nil || ev.Gen != p.gen || ev.Seq != p.chk.probe:
		case p.chk.phase == probing && ev.Answered:
			m.keep(p, ByHandshake)
		case p.chk.phase == probing:
			m.lose(p, p.chk.reason+", and it did not answer a connection for "+roundMS(p.chk.window), nil)
		case p.chk.phase == pinging && p.chk.knock == knockOut && ev.Answered:
			p.chk.knock = knockAnswered
		case p.chk.phase == pinging && p.chk.knock == knockOut:
			p.chk.knock = knockSilent
		}
	case DialStarted:
		if p := m.peer(ev.Peer); p != nil && ev.Gen == p.gen && p.status == Live && p.conn == nil && !m.failed && p.connectDue.IsZero() {
			p.connectFirst, p.connectSince, p.connectDue = m.now, m.now, m.now.Add(m.cfg.ConnectTimeout)
			m.pend(p)
		}
	case DialFailed:
		if p := m.peer(ev.Peer); p != nil && ev.Gen == p.gen && p.status == Live && p.conn == nil {
			m.dialFailed(p, ev)
		}
	case Failed:
		m.fail()
	case Closing:
		m.close()
		return nil
	case Revive:
		if p := m.peer(ev.Peer); p != nil {
			m.revive(p, ev.Keep)
		}
	}
	m.fire()
	return m.acts
}

// pong: a peer answered a ping on its current connection; an answer to
// a ping sent after a check began keeps the peer.
func (m *Machine) pong(ev Pong) {
	p, c := m.current(ev.Peer, ev.Conn)
	if c == nil {
		return
	}
	c.pongs++
	if c.pongs == c.pings {
		c.rtt = m.now.Sub(c.pingAt)
	}
	if p.chk.phase != idle && c.pongs > p.chk.pongBase {
		m.keep(p, ByPong)
	}
}

// readEnded: a peer's current connection ended. After its goodbye, or
// once the peer is no longer live, that says nothing; during a check of
// gossip's verdict it is the second witness and the peer is lost; else
// the connection is broken and the break rule runs.
func (m *Machine) readEnded(ev ReadEnded) {
	p, c := m.current(ev.Peer, ev.Conn)
	if c == nil {
		return
	}
	c.ended, c.broken = true, true
	if c.bye || p.status != Live {
		return
	}
	if p.chk.phase == pinging || p.chk.phase == draining {
		// Gossip's verdict and a connection that ended without a
		// goodbye: two witnesses.
		m.lose(p, p.chk.reason+", and its data connection is broken", nil)
		return
	}
	reason := "connection lost: " + errText(ev.Err)
	if ev.Malformed {
		reason = "sent a malformed frame: " + errText(ev.Err)
	}
	m.brk(p, reason)
}

// close: the transport is closing; no check or deadline runs from now on.
func (m *Machine) close() {
	m.closing = true
	clear(m.pending)
	for _, p := range m.peers {
		p.chk = check{}
		p.breakDue, p.leftDue, p.connectDue = time.Time{}, time.Time{}, time.Time{}
	}
}

// peer returns id's state, making it; nil for an id that is no peer.
func (m *Machine) peer(id int) *peer {
	if id < 0 || id >= m.cfg.Size || id == m.cfg.Rank {
		return nil
	}
	p := m.peers[id]
	if p == nil {
		p = &peer{id: id}
		m.peers[id] = p
	}
	return p
}

// current returns peer's state and its connection if id is its current
// one; a nil conn otherwise.
func (m *Machine) current(peer int, id ConnID) (*peer, *conn) {
	p := m.peers[peer]
	if p == nil || p.conn == nil || p.conn.id != id || id == 0 {
		return nil, nil
	}
	return p, p.conn
}

func (m *Machine) emit(a Action) { m.acts = append(m.acts, a) }

func (m *Machine) pend(p *peer) { m.pending[p.id] = p }

// window asks the policy for the next window of p's check, given what
// the caller saw of the window just over (o's Connected, Reads, Stuck,
// Stall, ShortKnock); the machine fills in the rest.
func (m *Machine) window(p *peer, o Observation) time.Duration {
	o.Base, o.Load, o.Round = m.cfg.ConfirmTimeout, m.load, p.chk.round
	if !p.chk.started.IsZero() {
		o.Elapsed = m.now.Sub(p.chk.started)
	}
	if p.conn != nil {
		o.RTT = p.conn.rtt
	}
	w := m.cfg.Policy(o)
	if w <= 0 {
		w = m.cfg.ConfirmTimeout
	}
	return w
}

// verdict begins checking gossip's verdict on p.
func (m *Machine) verdict(p *peer, reason string) {
	if p.status != Live || p.chk.phase != idle {
		return // gone already, or a check is running
	}
	if p.conn == nil && !m.cfg.WatchAll {
		// Not a peer this rank talks to: remembered, so that connecting
		// to it is the check.
		if !p.doubted {
			p.doubted, p.doubt, p.doubtSince, p.doubtStall = true, reason, time.Time{}, 0
			m.emit(Doubt{Peer: p.id, Gen: p.gen, Reason: reason})
		}
		return
	}
	if m.cfg.ConfirmTimeout <= 0 {
		m.lose(p, reason, nil)
		return
	}
	p.chk = check{reason: reason, started: m.now, heard: m.now}
	c := p.conn
	switch {
	case c == nil:
		p.chk.phase = probing
		p.chk.window = m.window(p, Observation{})
		p.chk.due = m.now.Add(p.chk.window)
		m.probes++
		p.chk.probe = m.probes
		m.emit(Probe{Peer: p.id, Gen: p.gen, Seq: p.chk.probe, Timeout: p.chk.window})
		m.pend(p)
	case c.ended:
		m.lose(p, reason+", and its data connection is broken", nil)
	case c.broken:
		m.drain(p, c)
	default:
		p.chk.phase = pinging
		p.chk.pongBase = max(c.pings, c.pongs) // a pong beyond both answers this check
		p.chk.window = m.window(p, Observation{Connected: true, Stuck: c.stuck})
		m.ping(p, c)
		m.emit(Sample{Peer: p.id, Conn: c.id})
	}
}

// ping sends a ping and opens a window, in which a quarter of the way
// through, unless the pong came first, the peer is knocked on.
func (m *Machine) ping(p *peer, c *conn) {
	c.pings++
	c.pingAt = m.now
	p.chk.due = m.now.Add(p.chk.window)
	if p.chk.knock != knockOut {
		p.chk.knockDue = m.now.Add(p.chk.window / 4)
	}
	m.emit(Ping{Peer: p.id, Conn: c.id})
	m.pend(p)
}

// drain turns p's check to its broken connection's reader: a peer that
// said goodbye and exited breaks the ping too, and its last frames, the
// goodbye last, may still wait to be read here (this rank behind, on a
// busy host). The reader reaches them as long as it makes progress or
// waits for room in a full inbox.
func (m *Machine) drain(p *peer, c *conn) {
	p.chk.phase = draining
	if c.ended {
		m.lose(p, p.chk.reason+", and its data connection is broken", nil)
		return
	}
	p.chk.waitEnd = false
	p.chk.window = m.window(p, Observation{Connected: true, Stuck: c.stuck})
	p.chk.due = m.now.Add(p.chk.window)
	if !p.chk.baseSet {
		m.emit(Sample{Peer: p.id, Conn: c.id})
	}
	m.pend(p)
}

// progress takes a Progress into p's check; stall and writing are the
// Progress's.
func (m *Machine) progress(p *peer, c *conn, stall time.Duration, writing bool) {
	if p.chk.phase != pinging && p.chk.phase != draining {
		return
	}
	if !p.chk.baseSet {
		p.chk.base, p.chk.baseSet = c.reads, true
		if !p.chk.waitEnd {
			return
		}
	}
	if !p.chk.waitEnd {
		return
	}
	p.chk.waitEnd = false
	var reads uint64
	if c.reads > p.chk.base {
		reads = c.reads - p.chk.base
	}
	sending := c.reads != p.chk.base || c.stuck
	stall = max(stall, p.chk.late)
	// A window in which this rank itself was kept from running for long
	// proves nothing either (the answer may wait unread in its socket,
	// and a peer in this process, or on a host as busy, waited as long),
	// until MaxStretch windows' worth of time has passed.
	// So does a window whose ping this rank could not even write (its
	// write waits behind another, or for room the peer has not read), or
	// whose knock has not come back (this rank's dial waits for a CPU).
	knocked := p.chk.knock
	if p.chk.phase == pinging && knocked != knockOut {
		p.chk.knock = knockNone
	}
	if sending {
		p.chk.heard = m.now
	}
	// Whatever proves nothing either way proves it for MaxStretch windows'
	// worth of time since the peer last sent anything (or the check
	// began), no longer.
	patience := m.now.Sub(p.chk.heard) < MaxStretch*m.cfg.ConfirmTimeout
	// A peer that sent nothing but whose process answered the knock runs:
	// its own reader may wait for room in its inbox (its collectives
	// behind), with the ping unread behind what it waits to deliver. A
	// stopped process answers nothing.
	running := !sending && patience && p.chk.phase == pinging && knocked == knockAnswered
	// A silent knock too short for this rank's own stall proves nothing;
	// the next window is long enough for its knock (knockTooShort).
	shortKnock := knocked == knockSilent && knockTooShort(stall, p.chk.window)
	// A ping still being written proves nothing while the peer's process
	// may be running (the write may wait behind another, or for a reader
	// behind its own inbox); once its knock went unanswered it proves
	// only that the peer reads nothing, as a stopped process does.
	blocked := !sending && !running && (starved(stall, p.chk.window) || shortKnock || p.chk.phase == pinging && (writing && knocked != knockSilent || knocked == knockOut))
	unproven := blocked && patience
	if !sending && !unproven && !running {
		switch {
		case p.chk.phase == draining:
			m.lose(p, p.chk.reason+", and its data connection is broken", nil)
		case knocked == knockSilent:
			m.lose(p, p.chk.reason+", and no answer on its data connection for "+roundMS(p.chk.window)+", nor to a connection"+ownState(stall, writing, false), nil)
		default:
			m.lose(p, p.chk.reason+", and no answer on its data connection for "+roundMS(p.chk.window)+ownState(stall, writing, knocked == knockOut), nil)
		}
		return
	}
	// Frames came during the window, or wait to be read: its answer may
	// be behind them (in this rank's socket, while its inbox from the
	// peer is full, or in the peer's, behind what it sends now). A
	// stopped or cut-off process sends nothing.
	p.chk.round++
	p.chk.base = c.reads
	if why := askWhy(unproven, running); p.chk.phase == pinging && p.chk.said&why == 0 {
		p.chk.said |= why
		m.emit(AskAgain{Peer: p.id, Gen: p.gen, Starved: unproven, Running: running})
	}
	p.chk.window = m.window(p, Observation{Connected: true, Reads: reads, Stuck: c.stuck, Stall: stall, ShortKnock: shortKnock})
	if p.chk.phase == draining || c.broken {
		p.chk.phase = draining
		p.chk.due = m.now.Add(p.chk.window)
		m.pend(p)
		return
	}
	m.ping(p, c)
}

// askWhy is the bit of said for an AskAgain's reason: each is given once
// a check.
func askWhy(starved, running bool) uint8 {
	switch {
	case starved:
		return 2
	case running:
		return 4
	}
	return 1
}

// knock sends a Probe beside p's ping, which has had a quarter of the
// window to be answered: whether its process answers at all, within half
// the window, so that the answer is in when the window ends.
func (m *Machine) knock(p *peer) {
	p.chk.knockDue = time.Time{}
	if p.chk.knock == knockOut {
		return
	}
	p.chk.knock = knockOut
	m.probes++
	p.chk.probe = m.probes
	m.emit(Probe{Peer: p.id, Gen: p.gen, Seq: p.chk.probe, Timeout: p.chk.window / 2, Knock: true})
}

// ownState is what a loss's reason adds about this rank's own part in the
// last window: how long it stalled, whether its ping was still being
// written, and whether its knock had not come back ("" when none).
func ownState(stall time.Duration, writing, knockOut bool) string {
	var parts []string
	if stall >= time.Millisecond {
		parts = append(parts, "this rank stalled up to "+stall.Round(time.Millisecond).String())
	}
	if writing {
		parts = append(parts, "its ping still being written")
	}
	if knockOut {
		parts = append(parts, "its knock not back")
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// keep ends p's check: it showed it is alive. Gossip's verdict stands
// (gossip does not declare a peer dead twice): p is checked again after
// recheckWindows of the check's windows (ConfirmTimeout for a doubted
// peer that connected), until gossip holds it alive again.
func (m *Machine) keep(p *peer, by Evidence) {
	w := cmp.Or(p.chk.window, m.cfg.ConfirmTimeout)
	p.chk = check{}
	p.doubted, p.doubt = false, ""
	if p.standing != "" {
		p.recheckAt = m.now.Add(recheckWindows * w)
		m.pend(p)
	}
	m.emit(Kept{Peer: p.id, Gen: p.gen, By: by})
}

// recheckWindows is how many windows after a peer is kept against a
// verdict that still stands it is checked again: a process that stopped
// just after it answered (before its gossip refuted the verdict, say) is
// found within five windows, and a live one costs a ping a few seconds.
const recheckWindows = 4

// connected makes c p's current connection.
func (m *Machine) connected(p *peer, id ConnID) {
	if p.conn != nil && p.conn.id == id {
		return
	}
	p.conn = &conn{id: id}
	p.breakDue, p.breakReason = time.Time{}, "" // the old connection's, if any
	p.connectDue, p.lastDial = time.Time{}, nil
	p.leftDue = time.Time{} // its own goodbye decides now
	if p.status != Live {
		return
	}
	if p.doubted || p.chk.phase != idle {
		m.keep(p, ByHandshake)
	}
}

// brk starts a break: p's connection ended or failed without a goodbye. A
// peer that exits because the job already failed tells everyone why
// before it goes (an abort); that explanation is preferred to blaming the
// peer, if it comes within ExplainWait.
func (m *Machine) brk(p *peer, reason string) {
	if m.cfg.ExplainWait <= 0 {
		m.lose(p, reason, nil)
		return
	}
	if m.failed || !p.breakDue.IsZero() {
		return // explained already, or a break is pending
	}
	p.breakDue, p.breakReason = m.now.Add(m.cfg.ExplainWait), reason
	m.pend(p)
}

// dialFailed takes one failed attempt to connect to p.
func (m *Machine) dialFailed(p *peer, ev DialFailed) {
	if p.doubted && ev.Kind == DialAnswered {
		// Its process answered the hello within this attempt: it ran
		// after gossip's verdict, however the handshake ended. The window
		// (stretched by this rank's stalls so far) starts again from the
		// answer: a peer that died since is refused from then on, and
		// lost one window later. ConnectTimeout's clock still bounds a
		// peer that answers and never connects.
		p.doubtSince, p.doubtStall, p.lastDial = m.now, max(p.doubtStall, ev.Stall), ev.Err
		return
	}
	if p.doubted && (ev.Kind == DialOther || ev.Kind == DialAuth) {
		// Gossip says it is dead and it does not answer: retried only
		// within a confirmation window, not ConnectTimeout. The window
		// stretches with this rank's own stalls in the attempts, as a
		// connected peer's does (Observation.Stall): a handshake that
		// timed out while this rank waited for a CPU says nothing of the
		// peer, and a peer in the same process, or on a host as busy,
		// waited as long.
		if p.doubtSince.IsZero() {
			p.doubtSince = m.now
		}
		p.doubtStall = max(p.doubtStall, ev.Stall)
		o := Observation{Base: m.cfg.ConfirmTimeout, Load: m.load, Elapsed: m.now.Sub(p.doubtSince), Stall: p.doubtStall}
		if w := m.cfg.Policy(o); m.now.Sub(p.doubtSince) >= w {
			m.lose(p, fmt.Sprintf("%s, and connecting to it failed for %v: %v%s", p.doubt, roundMS(w), errText(ev.Err), ownState(p.doubtStall, false, false)), ev.Err)
			return
		}
	}
	switch ev.Kind {
	case DialAuth:
		m.lose(p, "refused this rank's connection: "+errText(ev.Err), ev.Err)
	case DialOther, DialAnswered:
		p.lastDial = ev.Err
	case DialDuplicate:
		// The peer answered: it is dialing this rank itself, under its
		// own clock. This rank's starts again, within connectBound of the
		// first dial (a peer that refuses for another reason, holding a
		// stale connection say, has no clock running).
		p.lastDial = ev.Err
		if !p.connectDue.IsZero() {
			p.connectSince = m.now
			p.connectDue = minTime(m.now.Add(m.cfg.ConnectTimeout), p.connectFirst.Add(m.connectBound()))
			m.pend(p)
		}
	}
}

// revive gives p a new process.
func (m *Machine) revive(p *peer, keep bool) {
	p.gen++
	p.status = Live
	p.chk = check{}
	p.breakDue, p.breakReason = time.Time{}, ""
	p.leftDue = time.Time{}
	p.connectDue, p.lastDial = time.Time{}, nil
	p.doubted, p.doubt, p.doubtSince, p.doubtStall = false, "", time.Time{}, 0
	p.standing, p.recheckAt = "", time.Time{}
	delete(m.lost, p.id) // the old process's loss
	if !keep || p.conn == nil || p.conn.broken {
		p.conn = nil
		return
	}
	if p.conn.bye {
		m.leave(p) // the new process said goodbye already
	}
}

// lose declares p lost, once per generation, unless it left.
func (m *Machine) lose(p *peer, reason string, cause error) {
	if p.status != Live {
		return
	}
	p.status = Lost
	p.stop()
	if _, seen := m.lost[p.id]; !seen {
		m.lost[p.id] = reason
	}
	then := RecordOnly
	switch {
	case m.failed:
	case m.cfg.Elastic:
		then = DropPeer
	default:
		then = FailJob
	}
	m.emit(DeclareLost{Peer: p.id, Gen: p.gen, Reason: reason, Cause: cause, Then: then})
	if then == FailJob {
		m.fail()
	}
}

// leave declares p left, once per generation, unless it was lost.
func (m *Machine) leave(p *peer) {
	if p.status != Live {
		return
	}
	p.status = Left
	p.stop()
	m.emit(DeclareLeft{Peer: p.id, Gen: p.gen})
}

// stop ends everything p waits for.
func (p *peer) stop() {
	p.chk = check{}
	p.breakDue, p.leftDue, p.connectDue = time.Time{}, time.Time{}, time.Time{}
	p.doubted = false
}

// fail records that the job failed: breaks not yet blamed are explained,
// and connecting is over. Checks of verdicts go on (Lost says who else is
// gone).
func (m *Machine) fail() {
	if m.failed {
		return
	}
	m.failed = true
	for _, p := range m.pending {
		p.breakDue, p.breakReason = time.Time{}, ""
		p.connectDue = time.Time{}
	}
}

// fire does what is due at m.now, peer by peer in rank order.
func (m *Machine) fire() {
	ids := slices.Sorted(maps.Keys(m.pending))
	for _, id := range ids {
		p := m.pending[id]
		now := m.now
		if due(p.breakDue, now) {
			p.breakDue = time.Time{}
			m.lose(p, p.breakReason, nil)
		}
		if due(p.leftDue, now) {
			p.leftDue = time.Time{}
			if p.conn == nil {
				m.leave(p)
			}
		}
		if due(p.connectDue, now) {
			p.connectDue = time.Time{}
			end := minTime(p.connectSince.Add(connectWindow(m.cfg.ConnectTimeout, m.load)), p.connectFirst.Add(m.connectBound()))
			if p.conn == nil && now.Before(end) {
				p.connectDue = end // the host got busier
			} else if p.conn == nil {
				m.lose(p, fmt.Sprintf("no connection to it within %v (last error: %v)", roundMS(now.Sub(p.connectFirst)), p.lastDial), nil)
			}
		}
		if p.chk.phase == pinging && due(p.chk.knockDue, now) {
			m.knock(p)
		}
		if p.chk.phase != pinging {
			p.chk.knockDue = time.Time{}
		}
		if p.chk.phase != idle && !p.chk.waitEnd && due(p.chk.due, now) {
			switch p.chk.phase {
			case probing:
				m.lose(p, p.chk.reason+", and it did not answer a connection for "+roundMS(p.chk.window), nil)
			case pinging, draining:
				if p.conn == nil {
					p.chk = check{} // cannot happen: a new connection ends a check
					break
				}
				p.chk.waitEnd = true
				p.chk.late = max(now.Sub(p.chk.due), 0)
				m.emit(Sample{Peer: p.id, Conn: p.conn.id})
			}
		}
		if due(p.recheckAt, now) {
			p.recheckAt = time.Time{}
			if p.standing != "" && p.status == Live {
				m.verdict(p, p.standing)
			}
		}
		if d := p.deadlines(); d == [6]time.Time{} {
			delete(m.pending, id)
		}
	}
}

func due(t, now time.Time) bool { return !t.IsZero() && !t.After(now) }

// roundMS is a window as today's messages print it.
// connectBound is the longest a pair gets to connect, from its first
// dial, however busy the host and however often the peer refuses a dial
// as a duplicate.
func (m *Machine) connectBound() time.Duration { return maxConnectStretch * m.cfg.ConnectTimeout }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func roundMS(d time.Duration) string { return d.Round(time.Millisecond).String() }

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
