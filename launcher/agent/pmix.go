package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/launcher/proto"
	"github.com/gorun/gorun/pmi"
	"github.com/gorun/gorun/pmix"
)

// PMIx on the host: the agent is the PMIx server of its ranks (package
// pmix), for Open MPI 5 and any other PMIx program. Every rank is told
// (PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI41 ...) that its server
// listens on a loopback port of the agent's. A connection is served as
// the rank whose process group holds the client's socket (socketRank:
// /proc/net/tcp, then the processes' descriptors), and only if the client
// names that rank: a process that is no rank of this host is turned away.
// A rank may have several clients (a child in its process group that
// calls PMIx_Init); the first speaks for it (package pmix), and the rank
// fails if any of them initialized and ended without finalizing. A PMIx fence goes to the launcher as a PMI barrier
// does (MsgPMIFence, one per host and fence), its data as one put per
// rank.
//
// The host's hardware topology goes to the ranks in their job data
// (pmix.Config.Topology): read from /sys once, when the first rank asks,
// so that Open MPI 5 does not probe /sys in every rank.
//
// Open MPI 4 reads PMIx's variables too, and would then prefer its PMIx
// component to its flux one; OMPI_MCA_pmix=^ext3x,pmix3x (openMPIRoute)
// keeps it on the flux route (gorun's PMI-1 library), and changes nothing
// for Open MPI 5, whose pmix framework has no components.

// pmixKeyPrefix marks the launcher's puts that carry a rank's PMIx data.
const pmixKeyPrefix = "\x00pmix:"

// pmixHost is the host's PMIx server and what its sessions did.
type pmixHost struct {
	srv *pmix.Server
	ln  net.Listener
	// fenced: a PMIx fence went to the launcher, so its releases are the
	// PMIx server's (a job's ranks speak PMI-1 or PMIx, not both).
	fenced atomic.Bool

	mu    sync.Mutex
	ranks map[int]*pmixRank
}

// pmixRank is what one rank's PMIx sessions did (a rank may connect more
// than once: a child it starts may call PMIx_Init too).
type pmixRank struct {
	res pmix.Result // Init, Aborted: of any session
	// unfinalized: a session initialized and ended without finalizing
	// or aborting (a child's finalize does not hide its parent's lack).
	unfinalized bool
	active      int
	idle        chan struct{} // closed while no session of the rank is active
}

// pmixServer creates the host's PMIx server and its listener, or returns
// nil when the job has no PMI.
func (a *agent) pmixServer() (*pmixHost, error) {
	s := a.spec.PMI
	if s == nil || a.ompi == nil {
		return nil, nil
	}
	if len(s.Nodes) != s.Size || len(s.NodeNames) == 0 {
		return nil, fmt.Errorf("PMIx: the launcher sent no placement (%d nodes for %d ranks)", len(s.Nodes), s.Size)
	}
	hosts := make([]pmix.Host, len(s.NodeNames))
	for i, n := range s.NodeNames {
		hosts[i].Name = n
	}
	for r, n := range s.Nodes {
		if n < 0 || n >= len(hosts) {
			return nil, fmt.Errorf("PMIx: rank %d on node %d of %d", r, n, len(hosts))
		}
		hosts[n].Ranks = append(hosts[n].Ranks, r)
	}
	me := -1
	for _, rs := range a.spec.Ranks {
		if rs.Hub == 0 {
			me = s.Nodes[rs.Rank]
			break
		}
	}
	if me < 0 {
		return nil, nil
	}
	cfg := pmix.DefaultConfig()
	cfg.Nspace = "gorun." + a.spec.JobID
	if len(cfg.Nspace) > pmix.MaxNspace {
		cfg.Nspace = cfg.Nspace[:pmix.MaxNspace]
	}
	cfg.Hosts, cfg.Host = hosts, me
	cfg.Hostname, _ = os.Hostname()
	cfg.TmpDir = a.ompi.dir
	cfg.UID, cfg.GID = uint32(os.Geteuid()), uint32(os.Getegid())
	h := &pmixHost{ranks: map[int]*pmixRank{}}
	cfg.Relay = func(epoch int, data map[int][]byte) error {
		h.fenced.Store(true)
		puts := make([]pmi.KV, 0, len(data))
		for r, b := range data {
			puts = append(puts, pmi.KV{Key: pmixKeyPrefix + strconv.Itoa(r), Value: string(b)})
		}
		sort.Slice(puts, func(i, j int) bool { return puts[i].Key < puts[j].Key })
		return a.sendFence(epoch, puts)
	}
	cfg.Abort = func(rank, code int, text string) {
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgPMIAbort, Rank: rank, Code: code, Err: text})
	}
	cfg.Refused = func(r pmix.Refusal) {
		if r.Strands {
			// The ranks waiting on this one's answer would wait forever.
			a.failRankNumber(r.Rank, "asked for "+r.What+" (MPI's dynamic processes: MPI_Comm_spawn, MPI_Comm_connect and accept, MPI_Publish_name and MPI_Lookup_name), which gorun's PMIx server does not serve; the job ends, as the ranks waiting for this one's answer would wait forever")
			return
		}
		// On the rank's own stderr, where its MPI's error about it goes.
		text := "gorun: this rank asked for " + r.What + ", which gorun's PMIx server does not serve; it was told PMIX_ERR_NOT_SUPPORTED"
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgOutput, Rank: r.Rank, Stream: proto.StreamStderr, Data: []byte(text)})
	}
	cfg.Cleanup = func(rank int, paths []string, dirs bool) { a.ompi.registerCleanup(paths, dirs) }
	cfg.Topology = func() string {
		// Read once per host, at the first rank's PMIx_Init: a job whose
		// ranks never start PMIx never reads /sys for it.
		t0 := time.Now()
		xml, err := pmix.LocalTopology()
		if err != nil {
			a.log.Info("PMIx: no topology for the ranks (each discovers it itself)", "err", err)
			return ""
		}
		a.log.Debug("PMIx: the host's topology read", "bytes", len(xml), "elapsed", time.Since(t0))
		return xml
	}
	srv, err := pmix.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	h.srv = srv
	if h.ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		srv.Close()
		return nil, fmt.Errorf("PMIx server: %w", err)
	}
	return h, nil
}

// env is rank's PMIx environment.
func (h *pmixHost) env(rank int) []string {
	if h == nil {
		return nil
	}
	return h.srv.Env(rank, h.ln.Addr().String())
}

// close ends the server and its sessions. It is idempotent.
func (h *pmixHost) close() {
	if h == nil {
		return
	}
	_ = h.ln.Close()
	_ = h.srv.Close()
}

// release passes the launcher's release of a fence to the server, if the
// fence was a PMIx one; it reports whether it was.
func (h *pmixHost) release(m *proto.Message) (bool, error) {
	if h == nil || !h.fenced.Load() {
		return false, nil
	}
	data := map[int][]byte{}
	for _, kv := range m.Puts {
		r, err := strconv.Atoi(strings.TrimPrefix(kv.Key, pmixKeyPrefix))
		if !strings.HasPrefix(kv.Key, pmixKeyPrefix) || err != nil {
			continue
		}
		data[r] = []byte(kv.Value)
	}
	return true, h.srv.Release(m.Epoch, data)
}

// servePMIx accepts the ranks' PMIx clients until stop.
func (a *agent) servePMIx(stop <-chan struct{}) {
	h := a.pmix
	go func() {
		<-stop
		h.close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	err := acceptLoop(h.ln, stop, func(c net.Conn) {
		rank := a.socketRank(c)
		if rank < 0 {
			a.log.Warn("a process that is none of this host's ranks connected to the PMIx server; turned away", "from", c.RemoteAddr().String())
			_ = c.Close()
			return
		}
		pr := h.begin(rank)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.srv.Serve(context.Background(), rank, c)
			h.end(pr, res)
			if err != nil && !errors.Is(err, pmix.ErrClosed) {
				a.failRankNumber(rank, pmixFailure(err))
			}
		}()
	})
	if err != nil {
		// Ranks yet to connect would wait in MPI_Init for ever: close
		// the listener (they fail at once) and end the job.
		_ = h.ln.Close()
		a.log.Error("PMIx server: accept failed; the job ends", "err", err)
		_ = a.conn.Send(&proto.Message{Kind: proto.MsgError, Err: "PMIx server: accept: " + err.Error() + " (the host's ranks can no longer connect to it; the job ends)"})
	}
}

// pmixFailure is why a rank whose PMIx session ended with err fails.
func pmixFailure(err error) string {
	var re *pmix.RankError
	if errors.As(err, &re) {
		err = re.Err // the rank is named by who reports the failure
	}
	return "PMIx: " + strings.TrimPrefix(err.Error(), "pmix: ")
}

// acceptLoop hands ln's connections to handle until stop or until ln is
// closed (nil), or until Accept fails otherwise than for a while (the
// error). It retries what may pass (out of descriptors or memory, a
// connection aborted before it was accepted) after acceptBackoff.
func acceptLoop(ln net.Listener, stop <-chan struct{}, handle func(net.Conn)) error {
	for failed := 0; ; {
		c, err := ln.Accept()
		if err == nil {
			failed = 0
			handle(c)
			continue
		}
		select {
		case <-stop:
			return nil
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if !temporaryAccept(err) {
			return err
		}
		failed++
		t := time.NewTimer(acceptBackoff(failed))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return nil
		}
	}
}

// temporaryAccept reports whether an Accept error may pass.
func temporaryAccept(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// acceptBackoff is the wait after the n-th Accept error in a row: 5 ms,
// doubling, at most a second.
func acceptBackoff(n int) time.Duration {
	d := 5 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

func (h *pmixHost) begin(rank int) *pmixRank {
	h.mu.Lock()
	defer h.mu.Unlock()
	pr := h.ranks[rank]
	if pr == nil {
		pr = &pmixRank{}
		h.ranks[rank] = pr
	}
	if pr.active == 0 {
		pr.idle = make(chan struct{})
	}
	pr.active++
	return pr
}

func (h *pmixHost) end(pr *pmixRank, res pmix.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pr.res.Init = pr.res.Init || res.Init
	pr.res.Finalized = pr.res.Finalized || res.Finalized
	if res.Init && !res.Finalized && !res.Aborted {
		pr.unfinalized = true
	}
	if res.Aborted {
		pr.res.Aborted, pr.res.Status = true, res.Status
	}
	pr.active--
	if pr.active == 0 {
		close(pr.idle)
	}
}

// endPMIx waits briefly for rank's sessions after its process exited, and
// returns why the rank counts as failed in spite of exit code 0, if it
// does.
func (a *agent) endPMIx(rank, code int) string {
	h := a.pmix
	if h == nil {
		return ""
	}
	h.mu.Lock()
	pr := h.ranks[rank]
	var idle chan struct{}
	if pr != nil && pr.active > 0 {
		idle = pr.idle
	}
	h.mu.Unlock()
	if pr == nil {
		return ""
	}
	if idle != nil {
		t := time.NewTimer(pmiWait) // a child of the rank may hold its socket
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	h.mu.Lock()
	res, unfinalized := pr.res, pr.unfinalized
	h.mu.Unlock()
	if code == 0 && unfinalized && !res.Aborted {
		return "without calling MPI_Finalize after MPI_Init (PMIx_Finalize after PMIx_Init)"
	}
	return ""
}
