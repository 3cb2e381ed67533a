package shmem

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/wire"
)

// A shmRing is one direction of a shared-memory channel between two ranks
// on one host: a single-producer, single-consumer byte ring in memory both
// processes map. The producer copies a frame in (header and payload in one
// record); the consumer hands the payload to its caller where it lies and
// frees the record when the caller releases the frame, so a reduction
// reads a peer's data straight from shared memory.
//
// Layout: a control block of four cache lines, then the data area.
//
//	line 0: head  uint64  bytes the producer has published (monotonic)
//	        pseq  uint32  bumped after every publish: the consumer's futex
//	        pwait uint32  1 while the consumer is (about to be) asleep
//	        wcpu  uint32  the CPU the consumer's rank last waited on, plus 1
//	line 2: tail  uint64  bytes the consumer has freed (monotonic)
//	        cseq  uint32  bumped after every free: the producer's futex
//	        cwait uint32  1 while the producer is (about to be) asleep
//
// A record at position p starts at data[p mod cap], 8-byte aligned, and
// never wraps: [length uint32][kind uint32][frame header][payload], then
// padding to 8 bytes; length counts all but the padding.
// A pad record fills the end of the area when the next record would not
// fit there. Frames longer than half the window (below) go as a start
// record and continuation records, which the consumer copies into a buffer
// of its own.
//
// The producer keeps its records within the first window bytes of the
// area (2 MiB, or the whole area if smaller) while the consumer keeps up:
// a record that would cross the window's end goes back to the start, after
// a pad to the end of the area, when the start has room. While the host
// is contended (Wide: it has other work than the job, so that a peer is
// often not running), the producer goes back to the start only when the
// ring is empty, so that the whole area lies ahead of it: a sender then
// runs ahead of a peer that is not running by up to the whole ring. An
// idle pair's traffic thus stays in memory the caches hold. The consumer
// follows pads wherever they are and needs to know nothing of the window.
//
// Everything the consumer reads from the area is untrusted: positions,
// lengths and kinds are checked before use, and a bad one is an error
// naming the peer, never an out-of-bounds access.
type Ring struct {
	ctl    []byte // the control block
	data   []byte // the data area, cap bytes
	cap    uint64 // a power of two
	window uint64 // the producer's window: min(cap, WindowBytes)

	head, tail *atomic.Uint64
	PSeq, CSeq *atomic.Uint32
	PWait      *atomic.Uint32
	CWait      *atomic.Uint32
	// WCPU is the CPU, plus 1 (0: not known), where the consumer's rank
	// last began a wait that outlasted its first polls (Wait.Where).
	WCPU *atomic.Uint32

	// Wake wakes whoever sleeps on a futex word (futexWake); nil in tests
	// that poll.
	Wake func(*atomic.Uint32)
	// Wide reports whether the producer should keep the whole area ahead
	// of it rather than keep to the window (see Ring); nil: never.
	Wide func() bool

	// consumer side
	rpos uint64 // where the next record starts
	pmu  sync.Mutex
	pend []uint64 // under pmu: ends of records handed out and not yet released
	gone bool     // under pmu: unmapped; releases do nothing
	skip uint64   // under pmu: pads read past end here, freed with the last record held
	Relf func([]byte)
}

const (
	shmCtlSize = 256
	recHdrSize = 40 // 8 + HeaderSize, rounded up to 8

	RecFrame uint32 = 1 // a whole frame
	recPad   uint32 = 2 // filler up to the end of the area
	RecStart uint32 = 3 // the first piece of a long frame; header.Len is the whole payload
	RecMore  uint32 = 4 // a further piece of a long frame
)

// RingSize is the bytes one ring of capacity cap takes.
func RingSize(cap int) int { return shmCtlSize + cap }

// NewRing lays a ring over mem, which must be shmRingSize(cap) bytes,
// 8-byte aligned, with cap a power of two of at least 4 KiB. A new mapping
// is zero, which is an empty ring.
func NewRing(mem []byte, cap int) (*Ring, error) {
	if cap < 4096 || cap&(cap-1) != 0 || len(mem) != RingSize(cap) || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("transport: bad shared ring: %d bytes for capacity %d", len(mem), cap)
	}
	r := &Ring{ctl: mem[:shmCtlSize], data: mem[shmCtlSize:], cap: uint64(cap), window: uint64(min(cap, WindowBytes))}
	r.head = (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	r.PSeq = (*atomic.Uint32)(unsafe.Pointer(&mem[8]))
	r.PWait = (*atomic.Uint32)(unsafe.Pointer(&mem[12]))
	r.WCPU = (*atomic.Uint32)(unsafe.Pointer(&mem[16]))
	r.tail = (*atomic.Uint64)(unsafe.Pointer(&mem[128]))
	r.CSeq = (*atomic.Uint32)(unsafe.Pointer(&mem[136]))
	r.CWait = (*atomic.Uint32)(unsafe.Pointer(&mem[140]))
	r.Relf = func([]byte) { r.Release() }
	return r, nil
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// WindowBytes is the part of a ring's area its producer keeps to while
// the consumer keeps up (see Ring).
const WindowBytes = 2 << 20

// MaxPiece is the most payload one record carries: half the window.
func (r *Ring) MaxPiece() int { return int(r.window/2) - recHdrSize }

// --- producer ---

// Fits reports whether a record with n payload bytes fits now (with the
// pad record before it that the end of the area or of the window may
// need).
func (r *Ring) Fits(n int) bool {
	_, ok := r.place(recordSize(n))
	return ok
}

// place is where a record of need bytes goes now: after a pad of pad bytes
// to the end of the area (0: none), and whether it fits. Past the window it
// goes back to the start if that has room (if the ring is empty, when Wide
// says so), else on into the rest of the area. The consumer only frees
// space, so a record that fits stays fitting until the producer writes it,
// though where it goes may change (with Wide, too).
func (r *Ring) place(need uint64) (pad uint64, ok bool) {
	head := r.head.Load()
	free := r.cap - (head - r.tail.Load())
	off := head & (r.cap - 1)
	if off == 0 || off+need <= r.window {
		return 0, need <= free
	}
	if wrap := r.cap - off; wrap+need <= free && (free == r.cap || r.Wide == nil || !r.Wide()) {
		return wrap, true
	}
	if off+need <= r.cap {
		return 0, need <= free
	}
	return r.cap - off, false
}

// Put writes one record; the caller has checked space. It publishes it
// and wakes the consumer if it may be asleep.
func (r *Ring) Put(kind uint32, h transport.Header, pieces ...[]byte) {
	n := uint64(recHdrSize)
	for _, p := range pieces {
		n += uint64(len(p))
	}
	head := r.head.Load()
	off := head & (r.cap - 1)
	if pad, _ := r.place(align8(n)); pad > 0 {
		binary.LittleEndian.PutUint32(r.data[off:], uint32(pad))
		binary.LittleEndian.PutUint32(r.data[off+4:], recPad)
		head += pad
		off = 0
	}
	rec := r.data[off : off+n]
	binary.LittleEndian.PutUint32(rec, uint32(n))
	binary.LittleEndian.PutUint32(rec[4:], kind)
	wire.PutHeader(rec[8:], h)
	at := recHdrSize
	for _, p := range pieces {
		at += copy(rec[at:], p)
	}
	RaceRelease()
	r.head.Store(head + align8(n))
	r.PSeq.Add(1)
	if r.PWait.Load() != 0 && r.Wake != nil {
		r.Wake(r.PSeq)
	}
}

// recordSize is the space a record with n payload bytes takes.
func recordSize(n int) uint64 { return align8(uint64(recHdrSize + n)) }

// --- consumer ---

// Corrupt is the error for anything malformed in a peer's ring.
func Corrupt(format string, args ...any) error {
	return &wire.FrameError{Msg: "shared memory: " + fmt.Sprintf(format, args...)}
}

// Record is one record read from the ring.
type Record struct {
	Kind    uint32
	H       transport.Header
	Payload []byte // where it lies in the ring
	End     uint64 // position after it
}

// Next returns the next record, skipping pads, or ok=false if none is
// published. maxPayload bounds a frame's declared length.
func (r *Ring) Next(maxPayload int) (rec Record, ok bool, err error) {
	for {
		head := r.head.Load()
		if head == r.rpos {
			return Record{}, false, nil
		}
		if head-r.rpos > r.cap || head < r.rpos {
			return Record{}, false, Corrupt("producer position %d is more than the ring's %d bytes ahead of %d", head, r.cap, r.rpos)
		}
		avail := head - r.rpos
		off := r.rpos & (r.cap - 1)
		if avail < 8 {
			return Record{}, false, Corrupt("%d bytes published, less than a record", avail)
		}
		n := uint64(binary.LittleEndian.Uint32(r.data[off:]))
		kind := binary.LittleEndian.Uint32(r.data[off+4:])
		adv := align8(n)
		if n < 8 || adv > avail || off+adv > r.cap {
			return Record{}, false, Corrupt("record of %d bytes at %d (%d published, %d to the end)", n, off, avail, r.cap-off)
		}
		if kind == recPad {
			r.rpos += adv
			r.freeTo(r.rpos)
			continue
		}
		if kind != RecFrame && kind != RecStart && kind != RecMore {
			return Record{}, false, Corrupt("unknown record kind %d", kind)
		}
		if n < recHdrSize {
			return Record{}, false, Corrupt("record of %d bytes has no room for its header", n)
		}
		h, err := wire.ParseHeader(r.data[off+8:off+8+wire.HeaderSize], maxPayload)
		if err != nil {
			return Record{}, false, err
		}
		body := n - recHdrSize
		switch {
		case kind == RecFrame && body != uint64(h.Len):
			return Record{}, false, Corrupt("frame of %d bytes in a record of %d", h.Len, n)
		case kind == RecStart && (body == 0 || body > uint64(h.Len)):
			return Record{}, false, Corrupt("first piece of %d bytes of a %d byte frame", body, h.Len)
		case kind == RecMore && body == 0:
			return Record{}, false, Corrupt("empty piece of a frame")
		}
		start := off + recHdrSize
		r.rpos += adv
		RaceAcquire()
		return Record{Kind: kind, H: h, Payload: r.data[start : start+body : start+body], End: r.rpos}, true, nil
	}
}

// hold marks a record as handed out: it is freed by release, in order.
func (r *Ring) Hold(end uint64) {
	r.pmu.Lock()
	r.pend = append(r.pend, end)
	r.pmu.Unlock()
}

// release frees the oldest record handed out.
func (r *Ring) Release() {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if len(r.pend) == 0 || r.gone {
		return
	}
	end := r.pend[0]
	r.pend = r.pend[1:]
	if len(r.pend) == 0 {
		r.pend = r.pend[:0:0]
		end = max(end, r.skip)
	}
	r.publishTail(end)
}

// freeTo frees everything up to pos (pads read past) if no record is
// handed out.
func (r *Ring) freeTo(pos uint64) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	switch {
	case r.gone:
	case len(r.pend) == 0:
		r.publishTail(pos)
	default:
		r.skip = pos
	}
}

// unmapIfIdle marks the ring gone if no frame is handed out, and reports
// whether it did.
func (r *Ring) UnmapIfIdle() bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if len(r.pend) > 0 {
		return false
	}
	r.gone = true
	return true
}

// publishTail frees up to end and wakes the producer if it may be asleep.
func (r *Ring) publishTail(end uint64) {
	if end > r.tail.Load() {
		r.tail.Store(end)
		r.CSeq.Add(1)
		if r.CWait.Load() != 0 && r.Wake != nil {
			r.Wake(r.CSeq)
		}
	}
}

// Data and Head are the ring's bytes and its producer's position, for the
// transports' tests that scribble on a ring to check that a corrupt one
// fails the receiver rather than crashing it.
func (r *Ring) Data() []byte { return r.data }

// Head: see Data.
func (r *Ring) Head() *atomic.Uint64 { return r.head }
