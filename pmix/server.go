package pmix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client commands (pmix_cmd_t) this server answers.
const (
	cmdReq        = 0
	cmdAbort      = 1
	cmdCommit     = 2
	cmdFence      = 3
	cmdGet        = 4
	cmdFinalize   = 5
	cmdNotify     = 12
	cmdRegEvents  = 13
	cmdDeregEvent = 14
	cmdLog        = 16
	cmdJobControl = 18
)

var cmdNames = map[byte]string{
	6: "publish", 7: "lookup", 8: "unpublish", 9: "spawn", 10: "connect", 11: "disconnect",
	15: "query", 16: "log", 17: "allocate", 18: "job control", 19: "monitor",
	20: "get credential", 21: "validate credential", 22: "IOF pull", 23: "IOF push",
	24: "group construct", 25: "group join", 26: "group invite", 27: "group leave",
	28: "group destruct", 29: "IOF deregister", 30: "fabric register", 31: "fabric update",
	32: "device distances", 33: "refresh cache", 37: "resolve peers", 38: "resolve node",
}

// stranding are the commands that one rank of a collective MPI call makes
// for all (MPI_Comm_spawn, MPI_Comm_connect and accept, and the name
// service they use): refused, that rank fails and the others wait for it
// forever.
var stranding = map[byte]bool{6: true, 7: true, 9: true, 10: true}

// Refusal is a request a Server refused.
type Refusal struct {
	Rank int
	What string // what was asked, for a person ("PMIx spawn")
	// Strands: the rank asked on behalf of others (a spawn, a connect, a
	// lookup) that wait for its answer and will not hear of the refusal;
	// only ending the job frees them.
	Strands bool
}

// ErrClosed is returned by Serve and Release once the Server is closed.
var ErrClosed = errors.New("pmix: server closed")

// Host is one host of the job: its name and its ranks, ascending.
type Host struct {
	Name  string
	Ranks []int
}

// Config describes one host's part of a job.
type Config struct {
	Nspace string // the job's namespace (PMIX_NAMESPACE), at most MaxNspace bytes
	Hosts  []Host // every host of the job, in node-id order
	Host   int    // this host: an index into Hosts
	// Hostname is this machine's own name (os.Hostname): a client keys
	// its node's data by it. "" uses Hosts[Host].Name.
	Hostname string
	TmpDir   string // this host's directory of the job's session files ("" leaves the keys out)
	UID, GID uint32 // whom native credentials must name
	// Relay hands this host's data of fence epoch (1, 2, ...) on to the
	// job's fence, once every local rank entered it: for each local rank
	// that committed since the last fence, its packed remote and global
	// puts. It must not block on Release. An error fails the fence for
	// every local rank.
	Relay func(epoch int, data map[int][]byte) error
	// Abort is called when a rank calls PMIx_Abort, before its reply.
	Abort func(rank, status int, msg string)
	// Refused is called when a rank asks for what this server does not
	// serve (spawn, publish, groups, ...), before the rank gets
	// PMIX_ERR_NOT_SUPPORTED: the caller may say so, and should end the
	// job when the refusal strands other ranks. Optional.
	Refused func(Refusal)
	// Cleanup is called when a rank registers files (dirs false) or
	// directories (dirs true) to remove when the job ends (PMIx job
	// control with PMIX_REGISTER_CLEANUP, as Open MPI 5 does for its
	// shared-memory segment). Without it such a request is refused.
	Cleanup func(rank int, paths []string, dirs bool)
	// Topology returns this host's hardware topology as hwloc XML (v2),
	// which the ranks' PMIx clients and Open MPI then load instead of
	// discovering it (PMIX_HWLOC_XML_V2 in the job data; see
	// LocalTopology). It is called once, when the first local rank asks
	// for its job data, and that rank waits for it; "" (or an XML over
	// MaxTopology) serves none, and the ranks discover the topology
	// themselves. Optional.
	Topology func() string
}

// DefaultConfig is a one-host, one-rank job.
func DefaultConfig() Config {
	return Config{Nspace: "gorun", Hosts: []Host{{Name: "localhost", Ranks: []int{0}}}}
}

// Result is how a rank's PMIx session ended.
type Result struct {
	Init      bool // the handshake succeeded (the rank called PMIx_Init)
	Finalized bool // it called PMIx_Finalize
	Aborted   bool // it called PMIx_Abort
	Status    int  // the abort's status
}

// rankData is what one rank committed, by scope.
type rankData struct {
	local kvs // PMIX_LOCAL and PMIX_GLOBAL: for ranks of this host
	// PMIX_REMOTE and PMIX_GLOBAL puts since the last fence, for the
	// other hosts: a fence sends only these, and every host appends
	// them to what earlier fences brought (the later of a key wins in
	// the client, as in its own store).
	remote kvs
}

// kvs is an ordered set of puts, the later of one key winning.
type kvs struct {
	keys []string
	vals map[string]Value
}

func (k *kvs) put(key string, v Value) {
	if k.vals == nil {
		k.vals = map[string]Value{}
	}
	if _, ok := k.vals[key]; !ok {
		k.keys = append(k.keys, key)
	}
	k.vals[key] = v
}

// pack is the puts as PMIx packs them: one kval per pack.
func (k *kvs) pack(e *encoder) {
	for _, key := range k.keys {
		e.kval(key, k.vals[key])
	}
}

// Server serves one host's ranks. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	size    int
	local   map[int]bool
	jobData []byte // the job data but the topology

	topoOnce sync.Once
	jobReply []byte // jobData and the topology: the answer to every request for job data

	mu    sync.Mutex
	data  map[int]*rankData // local ranks' commits
	dirty map[int]bool      // local ranks that committed since the last fence
	// owner is the session that speaks for a local rank: the first of
	// the rank's live sessions (a child of the rank that calls
	// PMIx_Init inherits the rank's PMIX_RANK). Only it commits and
	// fences; another session of the rank is refused both, so that it
	// neither overwrites the rank's data nor enters a fence for it.
	owner   map[int]*session
	remote  map[int][]byte // other hosts' ranks' packed puts, from fences
	in      map[int]bool   // local ranks in the current fence
	epoch   int            // fences completed
	release chan struct{}  // closed when the current fence is released
	// failure: the job's fence failed (Fail); every fence in progress
	// and every later one fails with it.
	failure  error
	changed  chan struct{} // closed (and replaced) whenever data arrives
	done     chan struct{}
	closed   bool
	sessions map[net.Conn]bool
	serving  sync.WaitGroup // Serve calls
}

// NewServer returns a Server for cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Nspace == "" || len(cfg.Nspace) > MaxNspace {
		return nil, fmt.Errorf("pmix: namespace of %d bytes: want 1 to %d", len(cfg.Nspace), MaxNspace)
	}
	if cfg.Host < 0 || cfg.Host >= len(cfg.Hosts) {
		return nil, fmt.Errorf("pmix: host %d of %d", cfg.Host, len(cfg.Hosts))
	}
	seen := map[int]bool{}
	size := 0
	for _, h := range cfg.Hosts {
		for _, r := range h.Ranks {
			if r < 0 || seen[r] {
				return nil, fmt.Errorf("pmix: rank %d placed twice or negative", r)
			}
			seen[r] = true
			size++
		}
	}
	for r := 0; r < size; r++ {
		if !seen[r] {
			return nil, fmt.Errorf("pmix: ranks 0 to %d, but rank %d is on no host", size-1, r)
		}
	}
	if len(cfg.Hosts[cfg.Host].Ranks) == 0 {
		return nil, fmt.Errorf("pmix: host %d has no ranks", cfg.Host)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.Hosts[cfg.Host].Name
	}
	s := &Server{
		cfg: cfg, size: size, local: map[int]bool{},
		data: map[int]*rankData{}, dirty: map[int]bool{}, remote: map[int][]byte{},
		owner: map[int]*session{}, in: map[int]bool{},
		release: make(chan struct{}), changed: make(chan struct{}), done: make(chan struct{}),
		sessions: map[net.Conn]bool{},
	}
	for _, r := range cfg.Hosts[cfg.Host].Ranks {
		s.local[r] = true
	}
	s.jobData = s.buildJobData()
	return s, nil
}

// Close wakes every rank waiting in a fence or a get with ErrClosed, ends
// every session and waits for their Serve calls to return. It is
// idempotent; it must not be called from a Config callback.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		for c := range s.sessions {
			_ = c.Close()
		}
	}
	s.mu.Unlock()
	s.serving.Wait()
	return nil
}

// Release completes fence epoch with data, every host's data of that
// epoch (rank to packed puts): gets see it, and the local ranks in the
// fence get its reply.
func (s *Server) Release(epoch int, data map[int][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.failure != nil {
		return fmt.Errorf("pmix: release of fence %d after the job's fence failed: %w", epoch, s.failure)
	}
	if epoch != s.epoch+1 || len(s.in) != len(s.local) {
		return fmt.Errorf("pmix: release of fence %d, but this host is at fence %d with %d of %d ranks in it", epoch, s.epoch+1, len(s.in), len(s.local))
	}
	for r, b := range data {
		if !s.local[r] && r >= 0 && r < s.size {
			// Each fence brings what the rank put since the last one.
			s.remote[r] = append(s.remote[r], b...)
		}
	}
	s.epoch++
	s.in = map[int]bool{}
	close(s.release)
	s.release = make(chan struct{})
	s.notifyLocked()
	return nil
}

// Fail ends the current fence with err for every local rank in it (the
// job's fence failed elsewhere), and every later fence at once: the job
// is ending, and no release will come. Only the first error is kept.
func (s *Server) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		return
	}
	if err == nil {
		err = errors.New("pmix: fence failed")
	}
	s.failure = err
	close(s.release)
	s.release = make(chan struct{})
	s.notifyLocked()
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// session is one client's connection.
type session struct {
	s    *Server
	rank int
	conn net.Conn
	wmu  sync.Mutex
	res  Result
	rmu  sync.Mutex // guards res against the command goroutines
	wg   sync.WaitGroup
}

// RankError is an error of one rank's session.
type RankError struct {
	Rank int
	Err  error
}

func (e *RankError) Error() string {
	return "pmix: rank " + strconv.Itoa(e.Rank) + ": " + strings.TrimPrefix(e.Err.Error(), "pmix: ")
}

func (e *RankError) Unwrap() error { return e.Err }

// gone reports whether err is the client going away: its end closed
// (EOF, a reset or a broken pipe: its process ended) or ours.
func gone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Serve runs rank's PMIx session on conn, whose client the caller has
// identified as a process of that rank, until the client disconnects, ctx
// ends or the Server closes. It returns what the rank did; the error
// (a *RankError, or ErrClosed) says why a session ended other than by
// the client's disconnect. A rank not of this host is refused. Serve
// closes conn, and returns only once the session's fences and gets have
// ended.
func (s *Server) Serve(ctx context.Context, rank int, conn net.Conn) (Result, error) {
	ss := &session{s: s, rank: rank, conn: conn}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return Result{}, ErrClosed
	}
	if !s.local[rank] {
		s.mu.Unlock()
		_ = conn.Close()
		return Result{}, &RankError{rank, errors.New("not a rank of this host")}
	}
	s.sessions[conn] = true
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	// The session's context ends with the session: a fence or get still
	// waiting for its client that went away ends then.
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sctx, func() { _ = conn.Close() })
	defer func() {
		stop()
		cancel()
		_ = conn.Close()
		ss.wg.Wait()
		s.mu.Lock()
		delete(s.sessions, conn)
		if s.owner[rank] == ss {
			delete(s.owner, rank)
		}
		s.mu.Unlock()
	}()
	err := ss.run(sctx)
	ss.rmu.Lock()
	res := ss.res
	ss.rmu.Unlock()
	if gone(err) { // run always returns why it ended
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		switch {
		case closed:
			err = ErrClosed
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			err = nil // the client went away: its process ended
		}
	}
	if err != nil && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
		err = &RankError{rank, err}
	}
	return res, err
}

// run serves the session until it ends; it always returns why (io.EOF
// when the client closed its end).
func (ss *session) run(ctx context.Context) error {
	s := ss.s
	var hdr [hdrLen]byte
	if _, err := io.ReadFull(ss.conn, hdr[:]); err != nil {
		return err
	}
	n, err := helloLen(hdr[:])
	if err != nil {
		return err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(ss.conn, body); err != nil {
		return err
	}
	h, err := ParseHello(body)
	if err != nil {
		_, _ = ss.conn.Write(helloReply(StatusBadParam, 0))
		return err
	}
	st, err := h.check(s.cfg.UID, s.cfg.GID)
	if err == nil && (h.Proc.Nspace != s.cfg.Nspace || int(h.Proc.Rank) != ss.rank) {
		st, err = StatusNotFound, fmt.Errorf("pmix: a process of rank %d connected as %s rank %d", ss.rank, quoteNs(h.Proc.Nspace), h.Proc.Rank)
	}
	if err != nil {
		_, _ = ss.conn.Write(helloReply(st, 0))
		return err
	}
	// The rank's first client speaks for it (before its reply, so
	// that the order of the handshakes decides).
	s.mu.Lock()
	if s.owner[ss.rank] == nil {
		s.owner[ss.rank] = ss
	}
	s.mu.Unlock()
	if _, err := ss.conn.Write(helloReply(StatusSuccess, uint32(ss.rank))); err != nil {
		return err
	}
	ss.rmu.Lock()
	ss.res.Init = true
	ss.rmu.Unlock()
	for {
		if _, err := io.ReadFull(ss.conn, hdr[:]); err != nil {
			return err
		}
		tag := binary.BigEndian.Uint32(hdr[4:8])
		nb := binary.BigEndian.Uint32(hdr[8:12])
		if nb > MaxMessage {
			return fmt.Errorf("pmix: message of %d bytes, more than the %d allowed", nb, MaxMessage)
		}
		msg := make([]byte, nb)
		if _, err := io.ReadFull(ss.conn, msg); err != nil {
			return err
		}
		if err := ss.handle(ctx, tag, msg); err != nil {
			return err
		}
	}
}

func quoteNs(ns string) string { return strconv.Quote(ns) }

// send writes one message to the client.
func (ss *session) send(tag uint32, body []byte) error {
	var hdr [hdrLen]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(ss.rank))
	binary.BigEndian.PutUint32(hdr[4:8], tag)
	binary.BigEndian.PutUint32(hdr[8:12], uint32(len(body)))
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if _, err := ss.conn.Write(append(hdr[:], body...)); err != nil {
		return err
	}
	return nil
}

func (ss *session) status(tag uint32, st Status) error {
	var e encoder
	e.packedStatus(st)
	return ss.send(tag, e.b)
}

// handle answers one message. An error (a message that does not decode)
// ends the session.
func (ss *session) handle(ctx context.Context, tag uint32, msg []byte) error {
	d := &decoder{b: msg}
	cmd, err := d.packedByte()
	if err != nil {
		return fmt.Errorf("pmix: message without a command: %w", err)
	}
	s := ss.s
	switch cmd {
	case cmdReq:
		return ss.send(tag, s.jobDataReply())
	case cmdAbort:
		st, err := d.packedInt32()
		if err != nil {
			return fmt.Errorf("pmix: abort: %w", err)
		}
		text, err := d.packedString()
		if err != nil {
			return fmt.Errorf("pmix: abort: %w", err)
		}
		ss.rmu.Lock()
		ss.res.Aborted, ss.res.Status = true, int(st)
		ss.rmu.Unlock()
		if s.cfg.Abort != nil {
			s.cfg.Abort(ss.rank, int(st), text)
		}
		return ss.status(tag, StatusSuccess)
	case cmdCommit:
		if !s.speaksFor(ss) {
			ss.refuse(secondClient("commit"), false)
			return ss.status(tag, StatusNotSupported)
		}
		if err := s.commit(ss.rank, d); err != nil {
			return fmt.Errorf("pmix: commit: %w", err)
		}
		return ss.status(tag, StatusSuccess)
	case cmdFence:
		all, err := s.fenceProcs(d)
		if err != nil {
			return fmt.Errorf("pmix: fence: %w", err)
		}
		if !all {
			ss.refuse("a fence over part of the job (PMIx_Fence with a subset of its processes)", false)
			return ss.status(tag, StatusNotSupported)
		}
		if !s.speaksFor(ss) {
			ss.refuse(secondClient("fence"), false)
			return ss.status(tag, StatusNotSupported)
		}
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			st := s.fence(ctx, ss.rank)
			_ = ss.status(tag, st)
		}()
		return nil
	case cmdGet:
		g, err := s.parseGet(d)
		if err != nil {
			return fmt.Errorf("pmix: get: %w", err)
		}
		ss.wg.Add(1)
		go func() {
			defer ss.wg.Done()
			_ = ss.send(tag, s.get(ctx, ss.rank, g))
		}()
		return nil
	case cmdFinalize:
		ss.rmu.Lock()
		ss.res.Finalized = true
		ss.rmu.Unlock()
		return ss.status(tag, StatusSuccess)
	case cmdRegEvents, cmdNotify:
		// Event handlers are accepted; the events gorun would raise (a
		// lost peer, an abort) end the job instead.
		return ss.status(tag, StatusSuccess)
	case cmdDeregEvent:
		return nil
	case cmdLog:
		// Open MPI prints a message itself when the server does not
		// log it.
		return ss.status(tag, StatusNotSupported)
	case cmdJobControl:
		st, err := s.jobControl(ss.rank, d)
		if err != nil {
			return fmt.Errorf("pmix: job control: %w", err)
		}
		if st != StatusSuccess {
			ss.refuse("PMIx job control other than registering files for cleanup", false)
		}
		return ss.status(tag, st)
	}
	what, ok := cmdNames[cmd]
	if !ok {
		what = "command " + strconv.Itoa(int(cmd))
	}
	ss.refuse("PMIx "+what, stranding[cmd])
	return ss.status(tag, StatusNotSupported)
}

// speaksFor reports whether ss is its rank's owner, making it the owner
// if the rank has none (its first session ended).
func (s *Server) speaksFor(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner[ss.rank] == nil {
		s.owner[ss.rank] = ss
	}
	return s.owner[ss.rank] == ss
}

func secondClient(what string) string {
	return "a PMIx " + what + " from a second process of the rank (a child that called PMIx_Init as the rank) while its first one is connected: only the first commits and fences for the rank"
}

func (ss *session) refuse(what string, strands bool) {
	if f := ss.s.cfg.Refused; f != nil {
		f(Refusal{Rank: ss.rank, What: what, Strands: strands})
	}
}

// jobControl serves the one job control a rank's MPI asks for:
// registering files and directories to remove at the job's end.
func (s *Server) jobControl(rank int, d *decoder) (Status, error) {
	n, err := d.packedSize()
	if err != nil {
		return 0, err
	}
	if n > 0 {
		if n > maxCount {
			return 0, fmt.Errorf("%d targets", n)
		}
		if _, err := d.count(n); err != nil {
			return 0, err
		}
		for i := 0; i < n; i++ {
			if _, err := d.proc(); err != nil {
				return 0, err
			}
		}
	}
	ni, err := d.packedSize()
	if err != nil {
		return 0, err
	}
	infos, err := d.infos(ni)
	if err != nil {
		return 0, err
	}
	var files, dirs []string
	for _, in := range infos {
		switch in.Key {
		case "pmix.reg.cleanup", "pmix.reg.cleanupdir":
			v, ok := in.Value.asString()
			if !ok {
				return StatusBadParam, nil
			}
			for _, p := range strings.Split(v, ",") {
				if p == "" {
					continue
				}
				if in.Key == "pmix.reg.cleanup" {
					files = append(files, p)
				} else {
					dirs = append(dirs, p)
				}
			}
		case "pmix.clnup.recurse", "pmix.clnup.empty", "pmix.clnup.ignore", "pmix.clnup.lvtop":
		default:
			return StatusNotSupported, nil
		}
	}
	if s.cfg.Cleanup == nil || len(files)+len(dirs) == 0 {
		return StatusNotSupported, nil
	}
	if len(files) > 0 {
		s.cfg.Cleanup(rank, files, false)
	}
	if len(dirs) > 0 {
		s.cfg.Cleanup(rank, dirs, true)
	}
	return StatusSuccess, nil
}

// commit stores a rank's puts: pairs of a scope and a buffer of kvals.
func (s *Server) commit(rank int, d *decoder) error {
	var local, remote []Info
	for !d.empty() {
		scope, err := d.packedByte()
		if err != nil {
			return err
		}
		if _, err := d.count(1); err != nil {
			return err
		}
		if _, err := d.byte1(); err != nil { // the buffer's type
			return err
		}
		n, err := d.size()
		if err != nil {
			return err
		}
		raw, err := d.bytes(n)
		if err != nil {
			return err
		}
		inner := &decoder{b: raw}
		for !inner.empty() {
			if _, err := inner.count(1); err != nil {
				return err
			}
			kv, err := inner.kval()
			if err != nil {
				return err
			}
			kv.Value.Raw = append([]byte(nil), kv.Value.Raw...)
			if scope == ScopeLocal || scope == ScopeGlobal {
				local = append(local, kv)
			}
			if scope == ScopeRemote || scope == ScopeGlobal {
				remote = append(remote, kv)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rd := s.data[rank]
	if rd == nil {
		rd = &rankData{}
		s.data[rank] = rd
	}
	for _, kv := range local {
		rd.local.put(kv.Key, kv.Value)
	}
	for _, kv := range remote {
		rd.remote.put(kv.Key, kv.Value)
	}
	s.dirty[rank] = true
	s.notifyLocked()
	return nil
}

// fenceProcs reads a fence's processes and infos, and reports whether
// they are the whole job.
func (s *Server) fenceProcs(d *decoder) (bool, error) {
	n, err := d.packedSize()
	if err != nil {
		return false, err
	}
	if n < 1 || n > maxCount {
		return false, fmt.Errorf("%d processes", n)
	}
	if _, err := d.count(n); err != nil {
		return false, err
	}
	ranks := map[uint32]bool{}
	wild := false
	for i := 0; i < n; i++ {
		p, err := d.proc()
		if err != nil {
			return false, err
		}
		if p.Nspace != s.cfg.Nspace {
			return false, nil
		}
		if p.Rank == RankWildcard {
			wild = true
		}
		ranks[p.Rank] = true
	}
	ni, err := d.packedSize()
	if err != nil {
		return false, err
	}
	if _, err := d.infos(ni); err != nil {
		return false, err
	}
	if wild {
		return true, nil
	}
	for r := 0; r < s.size; r++ {
		if !ranks[uint32(r)] {
			return false, nil
		}
	}
	return true, nil
}

// fence enters rank into the current fence and waits for its release.
func (s *Server) fence(ctx context.Context, rank int) Status {
	s.mu.Lock()
	if s.closed || s.failure != nil {
		s.mu.Unlock()
		return StatusError
	}
	// A rank is counted once: entering again (a second nonblocking
	// fence) waits with its first entry.
	first := !s.in[rank]
	s.in[rank] = true
	epoch, release := s.epoch+1, s.release
	var relay map[int][]byte
	if first && len(s.in) == len(s.local) {
		relay = map[int][]byte{}
		for r := range s.dirty {
			var e encoder
			rd := s.data[r]
			rd.remote.pack(&e)
			rd.remote = kvs{}
			relay[r] = e.b
		}
		s.dirty = map[int]bool{}
	}
	s.mu.Unlock()
	if relay != nil {
		if s.cfg.Relay == nil {
			if err := s.Release(epoch, relay); err != nil {
				s.Fail(err)
			}
		} else if err := s.cfg.Relay(epoch, relay); err != nil {
			s.Fail(fmt.Errorf("pmix: fence %d: %w", epoch, err))
		}
	}
	select {
	case <-release:
	case <-ctx.Done():
		return StatusError
	case <-s.done:
		return StatusError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure != nil {
		return StatusError
	}
	return StatusSuccess
}

// getReq is a client's request for a rank's data.
type getReq struct {
	proc      Proc
	key       string
	immediate bool
	timeout   time.Duration
}

func (s *Server) parseGet(d *decoder) (getReq, error) {
	var g getReq
	ns, err := d.packedString()
	if err != nil {
		return g, err
	}
	if len(ns) > MaxNspace {
		return g, fmt.Errorf("namespace of %d bytes", len(ns))
	}
	r, err := d.packedUint32()
	if err != nil {
		return g, err
	}
	g.proc = Proc{ns, r}
	n, err := d.packedSize()
	if err != nil {
		return g, err
	}
	infos, err := d.infos(n)
	if err != nil {
		return g, err
	}
	for _, in := range infos {
		switch in.Key {
		case "pmix.immediate":
			g.immediate = in.Value.asBool()
		case "pmix.timeout":
			if t, ok := in.Value.asUint(); ok && t > 0 {
				g.timeout = timeoutSeconds(t)
			}
		}
	}
	if !d.empty() {
		if g.key, err = d.packedString(); err != nil {
			return g, err
		}
	}
	return g, nil
}

// maxTimeout caps a get's PMIX_TIMEOUT: more seconds than a Duration
// holds would overflow it into a timeout in the past.
const maxTimeout = 100 * 365 * 24 * time.Hour

func timeoutSeconds(t uint64) time.Duration {
	if t >= uint64(maxTimeout/time.Second) {
		return maxTimeout
	}
	return time.Duration(t) * time.Second
}

// get answers a request for a rank's data: the status and, when found,
// one byte object holding the rank's name and its puts that the
// requester may see. A local rank's data is waited for until it commits;
// another host's until a fence brings it, if a fence is under way here.
func (s *Server) get(ctx context.Context, from int, g getReq) []byte {
	var e encoder
	if g.proc.Nspace != s.cfg.Nspace || g.proc.Rank >= uint32(s.size) {
		// Job-level data and other namespaces: the client has what
		// there is.
		e.packedStatus(StatusNotFound)
		return e.b
	}
	r := int(g.proc.Rank)
	var timeout <-chan time.Time
	if g.timeout > 0 {
		t := time.NewTimer(g.timeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		s.mu.Lock()
		var body []byte
		found := false
		if s.local[r] {
			if rd := s.data[r]; rd != nil {
				var b encoder
				rd.local.pack(&b)
				body, found = b.b, true
			}
		} else if b, ok := s.remote[r]; ok {
			body, found = b, true
		}
		wait := !found && !g.immediate && (s.local[r] || (len(s.in) > 0 && s.failure == nil))
		changed, release := s.changed, s.release
		s.mu.Unlock()
		if found {
			var bo encoder
			bo.count(1)
			bo.proc(g.proc)
			bo.b = append(bo.b, body...)
			e.packedStatus(StatusSuccess)
			e.count(1)
			e.flex(uint64(len(bo.b)))
			e.b = append(e.b, bo.b...)
			return e.b
		}
		if !wait {
			e.packedStatus(StatusNotFound)
			return e.b
		}
		select {
		case <-changed:
		case <-release:
		case <-timeout:
			e.packedStatus(StatusTimeout)
			return e.b
		case <-ctx.Done():
			e.packedStatus(StatusError)
			return e.b
		case <-s.done:
			e.packedStatus(StatusError)
			return e.b
		}
	}
}

// sortedRanks is the host's ranks, ascending.
func sortedRanks(h Host) []int {
	r := append([]int(nil), h.Ranks...)
	sort.Ints(r)
	return r
}
