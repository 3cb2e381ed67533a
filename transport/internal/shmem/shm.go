// Package shmem is the shared memory the transports move data through
// between processes on one host: segments (a file in DefaultDir, made by
// the dialing side of a connection, mapped by the accepting side, named
// after the job so that the launcher's agents sweep leftovers), the two
// rings in each (shmring.go: their layout and protocol), the offer and
// answer exchanged over the authenticated connection (MakeOffer,
// AnswerOffer), the waits on a RingBell (Poll, Futex*), and the Bells of a
// connection's upgrade (Bells). Its users are the rank mesh
// (transport/tcp), whose pairs send frames through the rings, and
// transport/shm, which runs a byte stream (ParamHub's links) over them.
// It holds mechanism only: who waits on what, and what a failure means,
// is the caller's.
package shmem

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/internal/cpu"
	"github.com/gorun/gorun/internal/jobenv"
	"github.com/gorun/gorun/transport"
)

// DefaultDir is where segments are created unless configured otherwise
// (the launcher's agents look for leftovers there; internal/jobenv names
// a job's files).
const DefaultDir = jobenv.ShmDir

// DefaultRingBytes is the capacity of one direction of a channel whose
// size is not given: four 512 KiB ring segments in flight, the window
// (WindowBytes) of every ring.
const DefaultRingBytes = 2 << 20

// MaxRingBytes is the largest capacity of one direction of a rank pair's
// channel. Beyond the window the room is used only while the peer lags:
// on a busy host, where a peer is often not running, a sender can put a
// 16 MiB all-reduce's steps in the ring and go on, instead of waiting for
// the peer to run at every 2 MiB. Hosts with more ranks get smaller rings
// (see DefaultBudget).
const MaxRingBytes = 16 << 20

// DefaultBudget bounds the shared memory of one rank's pairs, counted
// as one ring of each (its half of the pair's segment), were it to talk
// to every rank on its host: 16 MiB rings at 2 ranks a host, 8 MiB at 3,
// 4 MiB up to 5, 2 MiB up to 9, 1 MiB up to 17, and so on (64 KiB at
// least). Every page is reserved when a pair connects.
const DefaultBudget = 16 << 20

// Peer is a pair's channel: out is written by this rank, in by the peer.
type Peer struct {
	Peer    int
	Out, In *Ring
	Mem     []byte
	SMu     sync.Mutex   // Send may be called from several goroutines
	Use     sync.RWMutex // held (read) by every Send and Recv; Close takes it to unmap
	Closed  bool         // under use: the mapping is gone
	Bells   *Bells       // a connection's (shmconn.go); nil for a rank pair

	// The waits' conditions, made once: a Recv or a Send per peer at a
	// time (Recv by the Transport contract, Send under smu).
	MaxPayload int
	Rec        Record // the record the last nextRec found
	Small      bool   // the last frame begun in In was at most SmallFrame bytes
	Want       int    // the payload the sender waits to fit
	NextRec    func() (bool, error)
	FitsWant   func() (bool, error)

	// A long frame cut short by a context stays whole: the sender keeps
	// the rest of one it began (sendRest, under smu) and writes it before
	// its next frame; the receiver keeps what it gathered (recvPart) and
	// the next Recv goes on with it.
	SendRest []byte
	SendH    transport.Header
	RecvPart []byte
	RecvN    int
	RecvH    transport.Header
}

// Drop unmaps a pair that will not be used; nil does nothing.
func (sp *Peer) Drop() {
	if sp != nil {
		sp.Bells.Close()
		_ = Unmap(sp.Mem)
	}
}

func (sp *Peer) Init(maxPayload int) {
	sp.MaxPayload = maxPayload
	sp.NextRec = func() (bool, error) {
		var ok bool
		var err error
		sp.Rec, ok, err = sp.In.Next(sp.MaxPayload)
		if ok && sp.Rec.Kind != RecMore {
			sp.Small = sp.Rec.H.Len <= SmallFrame
		}
		return ok, err
	}
	sp.FitsWant = func() (bool, error) { return sp.Out.Fits(sp.Want), nil }
	sp.Small = true
}

// SmallFrame is the largest frame after which a Recv's wait begins away
// from the CPU its peer waits on (Peer.Where). Small messages' waits are
// many and short, each a spin the peer's turn must follow; large ones
// copy through the caches, which two ranks on one CPU share: 2 ranks
// moving apart beside 4 busy processes took a 16 MiB all-reduce from
// 11.8-15.7 ms in its co-located runs to 14-44 ms (results/busy).
const SmallFrame = 64 << 10

// Where is where a Recv's wait for In begins its spin: away from the
// peer's CPU after a small frame, anywhere (the zero Where) after a large
// one.
func (sp *Peer) Where() Where {
	if !sp.Small {
		return Where{}
	}
	return Where{Mine: sp.In.WCPU, Peer: sp.Out.WCPU}
}

// Offer is what the dialing side of a connection offers; Path ""
// declines, and Reason says why.
type Offer struct {
	HostKey string
	Path    string
	RingCap uint32
	Reason  string
	Bells   bool // the segment has bells beside it (a connection's, shmconn.go)
}

// refusal says why an offer cannot be taken by a side whose host key is
// mine, or "": it declined itself, another host made it, or its ring or
// file is not what this job would create.
func (o Offer) refusal(mine, dir, jobID string) string {
	switch {
	case o.Path == "" && o.Reason == "":
		return "declined"
	case o.Path == "":
		return o.Reason
	case o.HostKey != mine:
		return "another host"
	case o.RingCap < 4096 || o.RingCap&(o.RingCap-1) != 0 || o.RingCap > 1<<30:
		return fmt.Sprintf("bad ring capacity %d", o.RingCap)
	case filepath.Dir(o.Path) != filepath.Clean(dir) || !strings.HasPrefix(filepath.Base(o.Path), jobenv.ShmName(jobID, "")):
		return fmt.Sprintf("segment %q is not one of this job's", o.Path)
	}
	return ""
}

// encode lays out an offer (TypeShmOffer's payload): HostKey, Path and
// Reason, each as a uint16 length (little-endian) and at most 32 KiB of
// bytes, then RingCap as a little-endian uint32, then, only if the
// segment has bells, one byte 1. (A version without bells rejects such an
// offer as malformed, which fails the connection loudly instead of
// leaving it asleep for want of a bell.)
func (o Offer) Encode() []byte {
	var b []byte
	for _, s := range []string{o.HostKey, o.Path, o.Reason} {
		b = binary.LittleEndian.AppendUint16(b, uint16(min(len(s), 1<<15)))
		b = append(b, s[:min(len(s), 1<<15)]...)
	}
	b = binary.LittleEndian.AppendUint32(b, o.RingCap)
	if o.Bells {
		b = append(b, 1)
	}
	return b
}

func DecodeOffer(b []byte) (Offer, error) {
	var f [3]string
	for i := range f {
		if len(b) < 2 {
			return Offer{}, Corrupt("short offer")
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return Offer{}, Corrupt("offer field of %d bytes in %d", n, len(b)-2)
		}
		f[i], b = string(b[2:2+n]), b[2+n:]
	}
	if len(b) != 4 && (len(b) != 5 || b[4] != 1) {
		return Offer{}, Corrupt("offer ends with %d bytes, want 4, or 5 with bells", len(b))
	}
	return Offer{HostKey: f[0], Path: f[1], Reason: f[2], RingCap: binary.LittleEndian.Uint32(b), Bells: len(b) == 5}, nil
}

// HostKey is what two ranks compare to decide that they share a host:
// Config.HostKey (or the hostname) and the kernel's boot id. Listen
// computes it once.
func HostKey(h string) string {
	if h == "" {
		h, _ = os.Hostname()
	}
	return h + "/" + bootID()
}

// Negotiation is one side's settings for the offer and answer that
// rank pairs and hub links (shmconn.go) exchange over their connection.
type Negotiation struct {
	HostKey  string
	RingCap  int
	Off      string // why not ("" = offer, or accept, if possible)
	Dir      string
	JobID    string
	Reserve  func(fd int, size int64) error
	Timeout  time.Duration
	Log      *slog.Logger
	WarnOnce *sync.Once // nil: warn every time
	Bells    bool       // with bells beside the segment (a connection's, shmconn.go)
}

func (n Negotiation) warn(msg string, args ...any) {
	if n.WarnOnce == nil {
		n.Log.Warn(msg, args...)
		return
	}
	n.WarnOnce.Do(func() { n.Log.Warn(msg, args...) })
}

// MakeOffer is the offering side: it creates a segment (unless n.off
// says why not), offers it over c and reads the answer. It returns the
// pair's rings if the peer mapped them, and the answer; an error if the
// exchange failed (c is then unusable: the caller closes it).
func MakeOffer(ctx context.Context, c net.Conn, n Negotiation, name string) (*Peer, Answer, error) {
	o, mem, err := OfferSegment(n.HostKey, n.RingCap, n.Off, n.Dir, n.JobID, name, n.Reserve)
	var bl *Bells
	if err == nil && mem != nil && n.Bells {
		if bl, err = makeBells(o.Path); err != nil {
			DropSegment(o.Path, mem)
			o.Path, o.Reason, mem = "", err.Error(), nil
		}
		o.Bells = bl != nil
	}
	if err != nil {
		n.warn("shared memory unavailable; TCP", "conn", name, "err", err)
	}
	p, err := ExchangeCtl(ctx, c, n.Timeout, transport.Header{Type: transport.TypeShmOffer}, o.Encode(), transport.TypeShmAnswer)
	if bl != nil {
		RemoveBells(o.Path)
	}
	if err != nil {
		DropSegment(o.Path, mem)
		bl.Close()
		return nil, Answer{}, err
	}
	if o.Path != "" {
		_ = os.Remove(o.Path)
	}
	a := DecodeAnswer(p)
	if mem == nil {
		return nil, a, nil
	}
	if !a.Attached {
		n.Log.Debug("shared memory declined; TCP", "conn", name, "reason", a.Reason)
		_ = Unmap(mem)
		bl.Close()
		return nil, a, nil
	}
	sp := PairOver(-1, mem, int(o.RingCap), true)
	sp.Bells = bl
	return sp, a, nil
}

// AnswerOffer is the answering side, given the offer's payload: it maps
// the segment (and opens its bells, if n says so) if it can and answers
// over c. It returns the pair's rings if it mapped them, and whether the
// two share a host.
func AnswerOffer(ctx context.Context, c net.Conn, payload []byte, n Negotiation, name string) (*Peer, bool, error) {
	o, err := DecodeOffer(payload)
	if err != nil {
		return nil, false, err
	}
	var sp *Peer
	reason := n.Off
	if reason == "" {
		reason = o.refusal(n.HostKey, n.Dir, n.JobID)
	}
	if reason == "" && n.Bells != o.Bells {
		// A connection needs bells, a rank pair has none: another
		// version of gorun, or a mix-up of the two.
		reason = fmt.Sprintf("the offer has bells %v, want %v (another version of gorun?)", o.Bells, n.Bells)
		n.warn("shared memory refused; TCP", "conn", name, "reason", reason)
	}
	if reason == "" {
		mem, err := mapOffer(o)
		var bl *Bells
		if err == nil && n.Bells {
			bl, err = openBells(o.Path, false)
			RemoveBells(o.Path)
			if err != nil {
				_ = Unmap(mem)
			}
		}
		if err != nil {
			n.Log.Warn("could not attach a peer's shared memory; TCP", "conn", name, "err", err)
			reason = err.Error()
		} else {
			sp = PairOver(-1, mem, int(o.RingCap), false)
			sp.Bells = bl
		}
	}
	a := Answer{Attached: sp != nil, SameHost: o.HostKey == n.HostKey, Reason: reason}
	if _, err := WriteCtl(ctx, c, n.Timeout, transport.Header{Type: transport.TypeShmAnswer}, a.Encode()); err != nil {
		sp.Drop()
		return nil, false, err
	}
	return sp, a.SameHost, nil
}

// Answer is the accepting side's answer to an offer: whether it
// mapped the segment, whether the two share a host (also when they share
// no memory), and why not. On the wire (TypeShmAnswer): an attached byte
// (1 or 0), a same-host byte (1 or 0), then the reason's bytes.
type Answer struct {
	Attached, SameHost bool
	Reason             string
}

func (a Answer) Encode() []byte {
	b := []byte{0, 0}
	if a.Attached {
		b[0] = 1
	}
	if a.SameHost {
		b[1] = 1
	}
	return append(b, a.Reason...)
}

// DecodeAnswer reads an answer; anything malformed is a refusal.
func DecodeAnswer(b []byte) Answer {
	if len(b) < 2 {
		return Answer{Reason: "malformed answer"}
	}
	return Answer{Attached: b[0] == 1, SameHost: b[1] == 1, Reason: string(b[2:])}
}

// PairOver lays a pair's two rings over its segment: the first is the
// creator's out ring and the other rank's in ring.
func PairOver(peer int, mem []byte, ringCap int, creator bool) *Peer {
	rc := RingSize(ringCap)
	first, _ := NewRing(mem[:rc], ringCap)
	second, _ := NewRing(mem[rc:], ringCap)
	if creator {
		return &Peer{Peer: peer, Out: first, In: second, Mem: mem}
	}
	return &Peer{Peer: peer, Out: second, In: first, Mem: mem}
}

// OfferSegment makes the dialing side's offer: a new segment for two rings
// of ringCap in dir, named after the job and name (the pair) with 128
// random bits, unless off gives the reason not to. If the segment cannot
// be made the offer declines with the reason, and err says it for the
// caller's warning.
func OfferSegment(hostKey string, ringCap int, off, dir, jobID, name string, reserve func(fd int, size int64) error) (o Offer, mem []byte, err error) {
	o = Offer{HostKey: hostKey, RingCap: uint32(ringCap), Reason: off}
	switch {
	case off != "":
	case !Supported:
		o.Reason = errNoShm.Error()
	default:
		var nonce [16]byte
		_, _ = rand.Read(nonce[:])
		o.Path = filepath.Join(dir, jobenv.ShmName(jobID, jobenv.FileSafe(name)+"-"+hex.EncodeToString(nonce[:])))
		if mem, err = createSegment(o.Path, 2*RingSize(ringCap), reserve); err != nil {
			o.Path, o.Reason = "", err.Error()
		}
	}
	return o, mem, err
}

// mapOffer maps the segment of an offer that refusal accepted and
// removes its name: from now on only the two mappings hold it.
func mapOffer(o Offer) ([]byte, error) {
	mem, err := attachSegment(o.Path, 2*RingSize(int(o.RingCap)))
	_ = os.Remove(o.Path)
	return mem, err
}

// DropSegment removes an offered segment that will not be used.
func DropSegment(path string, mem []byte) {
	if path != "" {
		_ = os.Remove(path)
	}
	if mem != nil {
		_ = Unmap(mem)
	}
}

// Sleep is the longest one futex sleep (or, on a connection upgraded
// to shared memory, one wait for a bell) lasts before the waiter looks at
// its context, the world and its deadline again. Failures and
// cancellations wake it at once, so this only bounds how late a waiter
// sees what does not wake it (a peer's goodbye, a passed deadline, a lost
// wake-up): a safety net of the ring protocol, not a tuning knob.
const Sleep = 20 * time.Millisecond

// LockedYield is how often a wait on a goroutine locked to its OS thread
// lets the process's other goroutines run while it spins (Poll): a writer
// goroutine of the same call may wait for the P.
const LockedYield = 20 * time.Microsecond

// IsClosed reports whether ch is closed (or has a value ready); false for
// a nil channel.
func IsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Wait is how a Poll spends its wait.
type Wait struct {
	Spin   time.Duration // how long to poll before sleeping
	Yield  bool          // give the core away between polls too
	Ranks  int           // the job's ranks on this host, for cpu.Now (0 where unknown)
	Locked bool          // the caller is locked to its OS thread
	Where  Where         // where this rank and its peer wait (zero: not known)
}

// Where says on which CPU two ranks on one host last began a wait that
// outlasted its first polls, each CPU plus 1 (0: not known): Mine where
// this rank's waits publish theirs (the In ring's Ring.WCPU, whose
// consumer it is), Peer where the peer's do (the Out ring's).
//
// A rank that begins to spin on the CPU where its peer last waited moves
// to another CPU its affinity allows (Apart): the data it waits for comes
// only once the peer runs, and on one CPU the spin holds the core the peer
// needs. Beside other work the scheduler leaves two ranks that way (two
// ranks on one CPU and two busy processes on the other are as balanced as
// one of each on each): 2 ranks beside 4 busy processes of their session
// took 150-240 us for a 4 KiB all-reduce in runs where their threads
// shared a CPU in 89-98 % of samples, 4-25 us in runs where they shared it
// in 34-82 %. Giving the core away instead (a yield hands it to the busy
// processes for a whole slice) took 700 us, and sleeping at once 25-29 us
// in half the runs. Only a Recv's wait after small frames moves
// (Peer.Where): large ones copy faster through one CPU's caches
// (results/busy/2026-11-30-colocation.md).
type Where struct {
	Mine, Peer *atomic.Uint32
}

// currentCPU and moveOff are cpu.Current and cpu.MoveOff; tests replace
// them.
var currentCPU, moveOff = cpu.Current, cpu.MoveOff

// Apart publishes the CPU this thread runs on as this rank's and, if the
// peer last waited there too, moves the thread off it (where its affinity
// allows another CPU) and publishes where it went.
func (w Where) Apart() {
	if w.Mine == nil || w.Peer == nil {
		return
	}
	c, ok := currentCPU()
	if !ok {
		return
	}
	if w.Peer.Load() == uint32(c)+1 && moveOff(c) {
		c, ok = currentCPU()
		if !ok {
			return
		}
	}
	if here := uint32(c) + 1; w.Mine.Load() != here {
		w.Mine.Store(here)
	}
}

// Mode is cpu.Now for this wait: the job's ranks on the host count (the
// gauge) only for a wait that yields.
func (w Wait) Mode() cpu.Mode {
	if !w.Yield {
		return cpu.Now(0)
	}
	return cpu.Now(w.Ranks)
}

// Poll waits until ready reports true: first polling (for w.Spin, letting
// the process's other goroutines run between polls, and giving the core
// away too when w.Yield; not at all when cpu.Now says park; a spin that
// does not yield begins away from the CPU its peer waits on, w.Where),
// then asleep with sleeping raised: sleep(seq) returns when word may have
// moved past seq, or after at most Sleep, or when stop has something to
// say. Before each poll it asks stop, and gives up with stop's error
// (unless ready is true by then). A caller locked to its OS thread
// (w.Locked) lets the other goroutines run only every LockedYield of its
// spin, and before it sleeps (its futex sleep keeps the P until the
// runtime's monitor takes it): for it a runtime.Gosched is two thread
// switches.
func Poll(word, sleeping *atomic.Uint32, w Wait, ready func() (bool, error), stop func() error, sleep func(seq uint32)) error {
	spin, yield, locked := w.Spin, w.Yield, w.Locked
	var start, gosched time.Time
	for i := 0; ; i++ {
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		if err := stop(); err != nil {
			if ok, rerr := ready(); ok || rerr != nil {
				return rerr
			}
			return err
		}
		if i < 64 {
			continue // a few plain polls first: the data is often on its way
		}
		if start.IsZero() {
			start = time.Now()
			gosched = start
			if spin > 0 && w.Mode() == cpu.Park {
				spin = 0 // this wait parks at once
			}
			if !yield && spin > 0 {
				w.Where.Apart() // spin where the peer is not waiting
			}
		}
		if now := time.Now(); now.Sub(start) < spin {
			if !locked {
				runtime.Gosched()
			} else if now.Sub(gosched) >= LockedYield {
				runtime.Gosched()
				gosched = time.Now()
			}
			if yield {
				cpu.Yield()
			}
			continue
		}
		if locked {
			runtime.Gosched() // what waits for the P runs before the sleep holds it
		}
		seq := word.Load()
		sleeping.Store(1)
		if ok, err := ready(); ok || err != nil {
			sleeping.Store(0)
			return err
		}
		sleep(seq)
		sleeping.Store(0)
		start = time.Time{}
		i = 0
	}
}

var errNoShm = errors.New("shared memory is not supported on this platform")
