package transport

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

	"github.com/gorun/gorun/internal/jobenv"
)

// Shared memory between ranks on one host.
//
// When a pair of ranks on one host connects (connect.go), the dialer
// creates a segment holding one ring each way (a file in ShmDir, mode
// 0600, named with 128 random bits, every page reserved up front) and
// offers its name and host key over the authenticated connection; the
// acceptor maps it if the host keys match and the file checks out,
// removes the name, and answers. From then on that pair's data frames go
// through the rings, read and written by the calling goroutines (no
// reader goroutine, no hand-off); the TCP connection stays for
// liveness, aborts and goodbyes, so a dead or frozen peer is found as
// before and wakes every waiter. Any refusal (another host, shared memory
// off, a full ShmDir) leaves the pair on TCP, with one warning naming the
// reason when it is a failure rather than a choice.

// ShmPrefix starts the name of every segment gorun creates; a job's
// segments are named as its other files in shared memory are
// (jobenv.ShmName), and the launcher's agents remove a job's leftovers (a
// rank killed between creating a segment and its peer attaching) when its
// ranks are gone.
const ShmPrefix = jobenv.ShmPrefix

// DefaultShmDir is where segments are created unless Config.ShmDir says
// otherwise (the launcher's agents look for leftovers there).
const DefaultShmDir = jobenv.ShmDir

// DefaultShmRingBytes is the largest capacity of one direction of a
// pair's channel: four 512 KiB ring segments in flight. Hosts with many
// ranks get smaller rings (see DefaultShmBudget).
const DefaultShmRingBytes = 2 << 20

// DefaultShmBudget bounds the shared memory of one rank's pairs, counted
// as one ring of each (its half of the pair's segment), were it to talk
// to every rank on its host: 2 MiB rings up to 9 ranks a host, 1 MiB up
// to 17, 512 KiB up to 33, and so on (64 KiB at least).
const DefaultShmBudget = 16 << 20

// ShmSegmentPattern is the glob of a job's segment files in dir.
func ShmSegmentPattern(dir, jobID string) string {
	return filepath.Join(dir, jobenv.ShmName(jobID, "*"))
}

// shmPeer is a pair's channel: out is written by this rank, in by the peer.
type shmPeer struct {
	peer    int
	out, in *shmRing
	mem     []byte
	smu     sync.Mutex   // Send may be called from several goroutines
	use     sync.RWMutex // held (read) by every Send and Recv; Close takes it to unmap
	closed  bool         // under use: the mapping is gone
	bells   *bells       // a connection's (shmconn.go); nil for a rank pair

	// The waits' conditions, made once: a Recv or a Send per peer at a
	// time (Recv by the Transport contract, Send under smu).
	maxPayload int
	rec        record // the record the last nextRec found
	want       int    // the payload the sender waits to fit
	nextRec    func() (bool, error)
	fitsWant   func() (bool, error)

	// A long frame cut short by a context stays whole: the sender keeps
	// the rest of one it began (sendRest, under smu) and writes it before
	// its next frame; the receiver keeps what it gathered (recvPart) and
	// the next Recv goes on with it.
	sendRest []byte
	sendH    Header
	recvPart []byte
	recvN    int
	recvH    Header
}

// drop unmaps a pair that will not be used; nil does nothing.
func (sp *shmPeer) drop() {
	if sp != nil {
		sp.bells.close()
		_ = unmapSegment(sp.mem)
	}
}

func (sp *shmPeer) init(maxPayload int) {
	sp.maxPayload = maxPayload
	sp.nextRec = func() (bool, error) {
		var ok bool
		var err error
		sp.rec, ok, err = sp.in.next(sp.maxPayload)
		return ok, err
	}
	sp.fitsWant = func() (bool, error) { return sp.out.fits(sp.want), nil }
}

// shmOffer is what the dialing side of a connection offers; Path ""
// declines, and Reason says why.
type shmOffer struct {
	HostKey string
	Path    string
	RingCap uint32
	Reason  string
	Bells   bool // the segment has bells beside it (a connection's, shmconn.go)
}

// refusal says why an offer cannot be taken by a side whose host key is
// mine, or "": it declined itself, another host made it, or its ring or
// file is not what this job would create.
func (o shmOffer) refusal(mine, dir, jobID string) string {
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
func (o shmOffer) encode() []byte {
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

func decodeShmOffer(b []byte) (shmOffer, error) {
	var f [3]string
	for i := range f {
		if len(b) < 2 {
			return shmOffer{}, shmCorrupt("short offer")
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return shmOffer{}, shmCorrupt("offer field of %d bytes in %d", n, len(b)-2)
		}
		f[i], b = string(b[2:2+n]), b[2+n:]
	}
	if len(b) != 4 && (len(b) != 5 || b[4] != 1) {
		return shmOffer{}, shmCorrupt("offer ends with %d bytes, want 4, or 5 with bells", len(b))
	}
	return shmOffer{HostKey: f[0], Path: f[1], Reason: f[2], RingCap: binary.LittleEndian.Uint32(b), Bells: len(b) == 5}, nil
}

// hostKey is what two ranks compare to decide that they share a host:
// Config.HostKey (or the hostname) and the kernel's boot id. Listen
// computes it once.
func hostKey(cfg Config) string {
	h := cfg.HostKey
	if h == "" {
		h, _ = os.Hostname()
	}
	return h + "/" + bootID()
}

func (t *TCP) shmDir() string {
	if t.cfg.ShmDir != "" {
		return t.cfg.ShmDir
	}
	return DefaultShmDir
}

// shmCfg is this rank's side of one pair's negotiation; off, if not "",
// is why it offers or accepts no shared memory.
func (t *TCP) shmCfg(off string) shmNegotiation {
	t.mu.Lock()
	ringBytes := t.ringBytes // 0 (the default) if SetPeers has not run: an acceptor's offers are never made
	t.mu.Unlock()
	return shmNegotiation{
		hostKey: t.hostKey, ringCap: ringCapOf(ringBytes), off: off, dir: t.shmDir(), jobID: t.cfg.JobID,
		reserve: t.cfg.shmReserve, timeout: t.cfg.HandshakeTimeout, log: t.log, warnOnce: &t.shmWarn,
	}
}

// shmNegotiation is one side's settings for the offer and answer that
// rank pairs and hub links (shmconn.go) exchange over their connection.
type shmNegotiation struct {
	hostKey  string
	ringCap  int
	off      string // why not ("" = offer, or accept, if possible)
	dir      string
	jobID    string
	reserve  func(fd int, size int64) error
	timeout  time.Duration
	log      *slog.Logger
	warnOnce *sync.Once // nil: warn every time
	bells    bool       // with bells beside the segment (a connection's, shmconn.go)
}

func (n shmNegotiation) warn(msg string, args ...any) {
	if n.warnOnce == nil {
		n.log.Warn(msg, args...)
		return
	}
	n.warnOnce.Do(func() { n.log.Warn(msg, args...) })
}

// makeOffer is the offering side: it creates a segment (unless n.off
// says why not), offers it over c and reads the answer. It returns the
// pair's rings if the peer mapped them, and the answer; an error if the
// exchange failed (c is then unusable: the caller closes it).
func makeOffer(ctx context.Context, c net.Conn, n shmNegotiation, name string) (*shmPeer, shmAnswer, error) {
	o, mem, err := offerSegment(n.hostKey, n.ringCap, n.off, n.dir, n.jobID, name, n.reserve)
	var bl *bells
	if err == nil && mem != nil && n.bells {
		if bl, err = makeBells(o.Path); err != nil {
			dropSegment(o.Path, mem)
			o.Path, o.Reason, mem = "", err.Error(), nil
		}
		o.Bells = bl != nil
	}
	if err != nil {
		n.warn("shared memory unavailable; TCP", "conn", name, "err", err)
	}
	p, err := exchangeCtl(ctx, c, n.timeout, Header{Type: TypeShmOffer}, o.encode(), TypeShmAnswer)
	if bl != nil {
		removeBells(o.Path)
	}
	if err != nil {
		dropSegment(o.Path, mem)
		bl.close()
		return nil, shmAnswer{}, err
	}
	if o.Path != "" {
		_ = os.Remove(o.Path)
	}
	a := decodeShmAnswer(p)
	if mem == nil {
		return nil, a, nil
	}
	if !a.Attached {
		n.log.Debug("shared memory declined; TCP", "conn", name, "reason", a.Reason)
		_ = unmapSegment(mem)
		bl.close()
		return nil, a, nil
	}
	sp := pairOver(-1, mem, int(o.RingCap), true)
	sp.bells = bl
	return sp, a, nil
}

// answerOffer is the answering side, given the offer's payload: it maps
// the segment (and opens its bells, if n says so) if it can and answers
// over c. It returns the pair's rings if it mapped them, and whether the
// two share a host.
func answerOffer(ctx context.Context, c net.Conn, payload []byte, n shmNegotiation, name string) (*shmPeer, bool, error) {
	o, err := decodeShmOffer(payload)
	if err != nil {
		return nil, false, err
	}
	var sp *shmPeer
	reason := n.off
	if reason == "" {
		reason = o.refusal(n.hostKey, n.dir, n.jobID)
	}
	if reason == "" && n.bells != o.Bells {
		// A connection needs bells, a rank pair has none: another
		// version of gorun, or a mix-up of the two.
		reason = fmt.Sprintf("the offer has bells %v, want %v (another version of gorun?)", o.Bells, n.bells)
		n.warn("shared memory refused; TCP", "conn", name, "reason", reason)
	}
	if reason == "" {
		mem, err := mapOffer(o)
		var bl *bells
		if err == nil && n.bells {
			bl, err = openBells(o.Path, false)
			removeBells(o.Path)
			if err != nil {
				_ = unmapSegment(mem)
			}
		}
		if err != nil {
			n.log.Warn("could not attach a peer's shared memory; TCP", "conn", name, "err", err)
			reason = err.Error()
		} else {
			sp = pairOver(-1, mem, int(o.RingCap), false)
			sp.bells = bl
		}
	}
	a := shmAnswer{Attached: sp != nil, SameHost: o.HostKey == n.hostKey, Reason: reason}
	if _, err := writeCtl(ctx, c, n.timeout, Header{Type: TypeShmAnswer}, a.encode()); err != nil {
		sp.drop()
		return nil, false, err
	}
	return sp, a.SameHost, nil
}

// shmAnswer is the accepting side's answer to an offer: whether it
// mapped the segment, whether the two share a host (also when they share
// no memory), and why not. On the wire (TypeShmAnswer): an attached byte
// (1 or 0), a same-host byte (1 or 0), then the reason's bytes.
type shmAnswer struct {
	Attached, SameHost bool
	Reason             string
}

func (a shmAnswer) encode() []byte {
	b := []byte{0, 0}
	if a.Attached {
		b[0] = 1
	}
	if a.SameHost {
		b[1] = 1
	}
	return append(b, a.Reason...)
}

// decodeShmAnswer reads an answer; anything malformed is a refusal.
func decodeShmAnswer(b []byte) shmAnswer {
	if len(b) < 2 {
		return shmAnswer{Reason: "malformed answer"}
	}
	return shmAnswer{Attached: b[0] == 1, SameHost: b[1] == 1, Reason: string(b[2:])}
}

// pairOver lays a pair's two rings over its segment: the first is the
// creator's out ring and the other rank's in ring.
func pairOver(peer int, mem []byte, ringCap int, creator bool) *shmPeer {
	rc := shmRingSize(ringCap)
	first, _ := newShmRing(mem[:rc], ringCap)
	second, _ := newShmRing(mem[rc:], ringCap)
	if creator {
		return &shmPeer{peer: peer, out: first, in: second, mem: mem}
	}
	return &shmPeer{peer: peer, out: second, in: first, mem: mem}
}

// offerSegment makes the dialing side's offer: a new segment for two rings
// of ringCap in dir, named after the job and name (the pair) with 128
// random bits, unless off gives the reason not to. If the segment cannot
// be made the offer declines with the reason, and err says it for the
// caller's warning.
func offerSegment(hostKey string, ringCap int, off, dir, jobID, name string, reserve func(fd int, size int64) error) (o shmOffer, mem []byte, err error) {
	o = shmOffer{HostKey: hostKey, RingCap: uint32(ringCap), Reason: off}
	switch {
	case off != "":
	case !shmSupported:
		o.Reason = errNoShm.Error()
	default:
		var nonce [16]byte
		_, _ = rand.Read(nonce[:])
		o.Path = filepath.Join(dir, jobenv.ShmName(jobID, jobenv.FileSafe(name)+"-"+hex.EncodeToString(nonce[:])))
		if mem, err = createSegment(o.Path, 2*shmRingSize(ringCap), reserve); err != nil {
			o.Path, o.Reason = "", err.Error()
		}
	}
	return o, mem, err
}

// mapOffer maps the segment of an offer that refusal accepted and
// removes its name: from now on only the two mappings hold it.
func mapOffer(o shmOffer) ([]byte, error) {
	mem, err := attachSegment(o.Path, 2*shmRingSize(int(o.RingCap)))
	_ = os.Remove(o.Path)
	return mem, err
}

// dropSegment removes an offered segment that will not be used.
func dropSegment(path string, mem []byte) {
	if path != "" {
		_ = os.Remove(path)
	}
	if mem != nil {
		_ = unmapSegment(mem)
	}
}

// LocalPeers implements Transport: the peers whose host key is this
// rank's, from SetPeers, or, where it gave no hosts, learned while
// connecting (so only among connected peers).
func (t *TCP) LocalPeers() []int {
	t.mu.Lock()
	if t.hostsKnown {
		var out []int
		for r, p := range t.peerList {
			if r != t.cfg.Rank && p.Host == t.hostKey {
				out = append(out, r)
			}
		}
		t.mu.Unlock()
		return out
	}
	t.mu.Unlock()
	return t.peersWhere(func(pc *peerConn) bool { return pc.sameHost })
}

// peersWhere lists, in rank order, the connected peers keep accepts.
func (t *TCP) peersWhere(keep func(*peerConn) bool) []int {
	t.mu.Lock() // sameHost is written under it
	defer t.mu.Unlock()
	var out []int
	for _, pc := range t.peers() {
		if keep(pc) {
			out = append(out, pc.peer)
		}
	}
	return out
}

func (t *TCP) attach(pc *peerConn, sp *shmPeer) {
	sp.peer = pc.peer
	sp.out.wake, sp.in.wake = futexWake, futexWake
	sp.init(t.cfg.MaxPayload)
	pc.shm.Store(sp)
}

// sharedMemoryPeers lists the peers this rank reaches through shared
// memory.
func (t *TCP) sharedMemoryPeers() []int {
	return t.peersWhere(func(pc *peerConn) bool { return pc.shm.Load() != nil })
}

// shmWakeAll wakes every goroutine asleep on a ring, after a failure.
func (t *TCP) shmWakeAll() {
	for _, pc := range t.peers() {
		if sp := pc.shm.Load(); sp != nil {
			sp.in.pseq.Add(1)
			futexWake(sp.in.pseq)
			sp.out.cseq.Add(1)
			futexWake(sp.out.cseq)
		}
	}
}

// shmSleep is the longest one futex sleep (or, on a connection upgraded
// to shared memory, one wait for a bell) lasts before the waiter looks at
// its context, the world and its deadline again. Failures and
// cancellations wake it at once, so this only bounds how late a waiter
// sees what does not wake it (a peer's goodbye, a passed deadline, a lost
// wake-up): a safety net of the ring protocol, not a tuning knob.
const shmSleep = 20 * time.Millisecond

// shmWait waits until ready reports true, as shmPoll does, asleep on the
// futex word, and returns early with the world's failure, ctx's error, or
// (if left is not nil and closes) errLeft.
func (t *TCP) shmWait(ctx context.Context, word, sleeping *atomic.Uint32, left <-chan struct{}, ready func() (bool, error)) error {
	sleep := func(seq uint32) {
		wake := context.AfterFunc(ctx, func() { word.Add(1); futexWake(word) })
		futexWait(word, seq, shmSleep)
		wake()
	}
	done := ctx.Done()
	return shmPoll(word, sleeping, t.cfg.SpinTime, t.cfg.SpinYield, ready, func() error {
		// One channel at a time: a non-blocking receive from one open
		// channel reads no lock, where a select over three locks all
		// three, and this runs between every two polls.
		switch {
		case isClosed(t.w.failed):
			return t.w.Err()
		case isClosed(done):
			if isClosed(t.w.failed) { // a failure explains more than the cancellation it caused
				return t.w.Err()
			}
			return ctxErr(ctx)
		case isClosed(left):
			return errLeft
		}
		return nil
	}, sleep)
}

// isClosed reports whether ch is closed (or has a value ready); false for
// a nil channel.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// shmPoll waits until ready reports true: first polling (for spin, giving
// the core away between polls when yield), then asleep with sleeping
// raised: sleep(seq) returns when word may have moved past seq, or after
// at most shmSleep, or when stop has something to say. Before each poll
// it asks stop, and gives up with stop's error (unless ready is true by
// then).
func shmPoll(word, sleeping *atomic.Uint32, spin time.Duration, yield bool, ready func() (bool, error), stop func() error, sleep func(seq uint32)) error {
	var start time.Time
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
			if spin > 0 && tooBusyToSpin() {
				spin = 0 // this wait parks at once (see spinOverloadPerCPU)
			}
		}
		if time.Since(start) < spin {
			runtime.Gosched()
			if yield {
				osYield()
			}
			continue
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

var (
	errLeft  = errors.New("left")
	errNoShm = errors.New("shared memory is not supported on this platform")
)

// shmSend writes one frame to sp, in pieces if it is long. If ctx ends
// after the first piece of a long frame, the rest is copied and written
// before the next frame (the receiver waits for it).
func (t *TCP) shmSend(ctx context.Context, sp *shmPeer, h Header, payload []byte) error {
	sp.use.RLock()
	defer sp.use.RUnlock()
	if sp.closed {
		return t.closedErr()
	}
	sp.smu.Lock()
	defer sp.smu.Unlock()
	if len(sp.sendRest) > 0 {
		off, err := t.shmPieces(ctx, sp, sp.sendH, sp.sendRest, recMore)
		sp.sendRest = sp.sendRest[off:]
		if err != nil {
			return err
		}
		sp.sendRest = nil
	}
	h.Type, h.Len = TypeData, uint32(len(payload))
	kind := recFrame
	if len(payload) > sp.out.maxPiece() {
		kind = recStart
	}
	off, err := t.shmPieces(ctx, sp, h, payload, kind)
	if err != nil && off > 0 && off < len(payload) {
		sp.sendRest, sp.sendH = append([]byte(nil), payload[off:]...), h
	}
	return err
}

// shmPieces writes payload to sp's ring in pieces, the first of kind
// first and the rest recMore, and returns how much of it went out.
func (t *TCP) shmPieces(ctx context.Context, sp *shmPeer, h Header, payload []byte, first uint32) (int, error) {
	r := sp.out
	piece := r.maxPiece()
	kind := first
	for off := 0; ; {
		p := payload[off:min(off+piece, len(payload))]
		sp.want = len(p)
		if err := t.shmWait(ctx, r.cseq, r.cwait, nil, sp.fitsWant); err != nil {
			return off, err
		}
		r.put(kind, h, p)
		kind = recMore
		if off += len(p); off >= len(payload) {
			return off, nil
		}
	}
}

// shmRecv reads the next frame from sp. A whole frame's payload is where
// it lies in shared memory until Release; a long one is gathered into a
// buffer of its own.
func (t *TCP) shmRecv(ctx context.Context, sp *shmPeer) (Frame, error) {
	sp.use.RLock()
	defer sp.use.RUnlock()
	if sp.closed {
		return Frame{}, t.closedErr()
	}
	r := sp.in
	next := sp.nextRec
	if sp.recvPart == nil {
		if err := t.shmRecvWait(ctx, sp, next); err != nil {
			return Frame{}, err
		}
		rec := sp.rec
		switch rec.kind {
		case recFrame:
			r.hold(rec.end)
			return Frame{Header: rec.h, Payload: rec.payload, release: r.relf}, nil
		case recMore:
			return Frame{}, t.shmBroken(sp.peer, shmCorrupt("a piece of a frame with no start"))
		}
		sp.recvPart, sp.recvH = getBuf(int(rec.h.Len)), rec.h
		sp.recvN = copy(sp.recvPart, rec.payload)
		r.hold(rec.end)
		r.release()
	}
	// A long frame: gather its pieces. If ctx ends first, what is
	// gathered stays in sp for the next Recv.
	buf, total := sp.recvPart, len(sp.recvPart)
	for sp.recvN < total {
		if err := t.shmRecvWait(ctx, sp, next); err != nil {
			return Frame{}, err
		}
		rec := sp.rec
		if rec.kind != recMore || len(rec.payload) > total-sp.recvN {
			sp.recvPart = nil
			putBuf(buf)
			return Frame{}, t.shmBroken(sp.peer, shmCorrupt("piece of %d bytes (kind %d) where %d of a frame are due", len(rec.payload), rec.kind, total-sp.recvN))
		}
		sp.recvN += copy(buf[sp.recvN:], rec.payload)
		r.hold(rec.end)
		r.release()
	}
	sp.recvPart = nil
	return Frame{Header: sp.recvH, Payload: buf, release: putBuf}, nil
}

func (t *TCP) shmRecvWait(ctx context.Context, sp *shmPeer, next func() (bool, error)) error {
	r := sp.in
	var err error
	if m := t.w.meter.Load(); m != nil {
		// Metered: time the wait only if the data is not here yet.
		var ok bool
		if ok, err = next(); !ok && err == nil {
			t0 := m.Now()
			err = t.shmWait(ctx, r.pseq, r.pwait, t.w.peer(sp.peer).left, next)
			m.addSince(t0)
		}
	} else {
		err = t.shmWait(ctx, r.pseq, r.pwait, t.w.peer(sp.peer).left, next)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errLeft):
		return t.w.goneErr(sp.peer)
	case errors.Is(err, ErrFrame):
		return t.shmBroken(sp.peer, err)
	}
	return err
}

// shmBroken fails the world over a corrupt ring, naming the peer.
func (t *TCP) shmBroken(peer int, err error) error {
	lost := &PeerLostError{Rank: peer, Reason: "its shared memory is corrupt: " + err.Error()}
	t.w.fail(lost)
	return lost
}

func (t *TCP) closedErr() error {
	if err := t.w.Err(); err != nil {
		return err
	}
	return fmt.Errorf("transport: rank %d: %w", t.cfg.Rank, ErrClosed)
}

// closeShm unmaps every segment once no Send or Recv is using it. A
// segment whose frames the caller still holds (not released) stays mapped:
// unmapping it would pull the payload from under the caller.
func (t *TCP) closeShm() {
	t.mu.Lock()
	retired := t.retired
	t.mu.Unlock()
	for _, pc := range append(t.peers(), retired...) {
		sp := pc.shm.Load()
		if sp == nil {
			continue
		}
		sp.use.Lock()
		if !sp.closed && sp.in.unmapIfIdle() {
			sp.closed = true
			_ = unmapSegment(sp.mem)
		}
		sp.use.Unlock()
	}
}
