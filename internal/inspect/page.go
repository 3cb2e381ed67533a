// Package inspect is how gorun sees what a job is doing: each rank that
// uses the collective package keeps a small status page (which collective
// it is in, since when, how many it finished) in a file its host's agent
// maps too; the launcher gathers the pages and decides, with pure
// functions of the ranks' states and the time, when the job is stalled,
// which ranks are behind, and what to print. It also picks the top frames
// out of a Go goroutine dump.
package inspect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// PageBytes is the size of a status file.
const PageBytes = 4096

// The page's layout: eight-byte little-endian words (the writer and the
// reader are on one host), then two names.
const (
	offMagic = 0   // pageMagic once the writer mapped it
	offPid   = 8   // the writer's pid
	offBegun = 16  // number of the last collective begun
	offEnded = 24  // number of the last collective ended
	offBytes = 32  // payload bytes of the current (or last) collective
	offSince = 40  // unix nanoseconds when the rank opened the page
	offTotal = 48  // payload bytes of every ended collective
	offKind  = 56  // 16 bytes: the current collective's name
	offDType = 72  // 8 bytes: its element type
	offBusy  = 80  // with timing: ticks spent inside ended collectives
	offWait  = 88  // with timing: ticks of those spent waiting for peers' data
	offRate  = 96  // with timing: nanoseconds per tick (float64 bits); 0 until measured
	offHubTx = 104 // payload bytes sent to ParamHub hubs
	offHubRx = 112 // payload bytes received from them
	pageUsed = 120
)

const pageMagic = 0x3147_4154_5352_4f47 // "GORSTAG1"

// Page is a rank's side: a mapped status file. Its methods are for one
// goroutine at a time (the collective package calls them inside its
// one-at-a-time section); a nil *Page does nothing. They read no clock
// (a clock read costs about as much as the rest of a 4 KiB all-reduce's
// bookkeeping): the agent, which reads the page twice a second, notes
// when what it says changed.
type Page struct {
	mem []byte
}

// OpenPage maps the status file path (created by the rank's agent) and
// declares the calling process in it.
func OpenPage(path string) (*Page, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("inspect: status page: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() < PageBytes {
		return nil, fmt.Errorf("inspect: status page %s: want a file of %d bytes", path, PageBytes)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, PageBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("inspect: status page %s: %w", path, err)
	}
	p := &Page{mem: mem}
	p.store(offPid, uint64(os.Getpid()))
	p.store(offSince, uint64(time.Now().UnixNano()))
	p.store(offMagic, pageMagic)
	return p, nil
}

func (p *Page) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&p.mem[off])) }

func (p *Page) store(off int, v uint64) { atomic.StoreUint64(p.word(off), v) }

func (p *Page) load(off int) uint64 { return atomic.LoadUint64(p.word(off)) }

// Begin records that collective number seq (kind, on elements of dtype,
// bytes of payload) started.
func (p *Page) Begin(seq uint64, kind, dtype string, bytes int) {
	if p == nil {
		return
	}
	putName(p.mem[offKind:offKind+16], kind)
	putName(p.mem[offDType:offDType+8], dtype)
	p.store(offBytes, uint64(bytes))
	p.store(offBegun, seq)
}

// End records that collective seq finished.
func (p *Page) End(seq uint64) {
	if p == nil {
		return
	}
	p.store(offTotal, p.load(offTotal)+p.load(offBytes))
	p.store(offEnded, seq)
}

// Time adds a collective's ticks inside it and waiting in it (gorun
// --metrics: the rank reads the clock only then).
func (p *Page) Time(busy, wait int64) {
	if p == nil {
		return
	}
	p.store(offBusy, p.load(offBusy)+uint64(busy))
	p.store(offWait, p.load(offWait)+uint64(wait))
}

// AddHub counts payload bytes this rank sent to and received from
// ParamHub hubs. Unlike the other methods it may be called from any
// goroutine at any time (the hub client's readers count as they read).
func (p *Page) AddHub(sent, received int64) {
	if p == nil {
		return
	}
	atomic.AddUint64(p.word(offHubTx), uint64(sent))
	atomic.AddUint64(p.word(offHubRx), uint64(received))
}

// SetTickRate records how many nanoseconds a tick of Time's clock lasts.
func (p *Page) SetTickRate(nsPerTick float64) {
	if p != nil {
		p.store(offRate, math.Float64bits(nsPerTick))
	}
}

// Close unmaps the page; it is idempotent.
func (p *Page) Close() error {
	if p == nil || p.mem == nil {
		return nil
	}
	err := syscall.Munmap(p.mem)
	p.mem = nil
	return err
}

func putName(dst []byte, s string) {
	n := copy(dst, s)
	clear(dst[n:])
}

func getName(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// State is what a page says about its rank.
type State struct {
	Declared bool // a process opened the page (a rank using the collective package)
	Pid      int
	In       bool   // inside collective Seq
	Seq      uint64 // the collective it is in, or the last it finished
	Kind     string
	DType    string
	Bytes    uint64
	Total    uint64 // payload bytes of every finished collective
	// Busy is the time spent inside finished collectives, Wait the part
	// of it spent waiting for peers' data (both 0 without timing, gorun
	// --metrics, or before the rank measured its clock).
	Busy, Wait time.Duration
	// HubSent and HubReceived are the payload bytes of pushes, pulls and
	// collective parts sent to and received from ParamHub hubs.
	HubSent, HubReceived uint64
	Since                time.Time // ParsePage: when the rank opened the page; the agent sets when it saw the state change
}

// ErrNoPage is returned by ParsePage for a page no rank declared.
var ErrNoPage = errors.New("inspect: no rank declared this page")

// ParsePage reads a status page's bytes (as the agent reads them from the
// file); a page too short is an error, one nobody declared ErrNoPage.
func ParsePage(b []byte) (State, error) {
	if len(b) < pageUsed {
		return State{}, fmt.Errorf("inspect: status page of %d bytes", len(b))
	}
	w := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if w(offMagic) != pageMagic {
		return State{}, ErrNoPage
	}
	s := State{Declared: true, Pid: int(w(offPid)), Bytes: w(offBytes), Total: w(offTotal),
		Since: time.Unix(0, int64(w(offSince))), Kind: getName(b[offKind : offKind+16]), DType: getName(b[offDType : offDType+8]),
		HubSent: w(offHubTx), HubReceived: w(offHubRx)}
	if rate := math.Float64frombits(w(offRate)); rate > 0 && !math.IsInf(rate, 0) && !math.IsNaN(rate) {
		s.Busy, s.Wait = time.Duration(float64(w(offBusy))*rate), time.Duration(float64(w(offWait))*rate)
	}
	begun, ended := w(offBegun), w(offEnded)
	s.In, s.Seq = begun > ended, ended
	if s.In {
		s.Seq = begun
	}
	return s, nil
}

// CreatePage makes an empty status file at path for a rank to open.
func CreatePage(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(PageBytes); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
