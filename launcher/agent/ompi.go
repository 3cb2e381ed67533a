package agent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/pmi/pmilib"
)

// Open MPI 4.x programs. Open MPI has no PMI-1 client of its own, but its
// "flux" pmix component, chosen when FLUX_JOB_ID is set, dlopen()s the
// PMI-1 library that FLUX_PMI_LIBRARY_PATH names. The agent hands every
// rank gorun's library (package pmilib) in a sealed memfd, descriptor
// ompiLibFD, beside PMI_FD, and points Open MPI's session directory and
// shared-memory backing files into a directory of the job that it removes
// when the host's ranks are gone, whatever way they ended.

// ompiLibFD is the rank's descriptor of the library: the second of
// exec.Cmd.ExtraFiles.
const ompiLibFD = pmiFD + 1

// ompiRoute is what the host's ranks share for Open MPI.
type ompiRoute struct {
	lib *os.File // nil: this gorun has no library (Open MPI 4 then uses PMIx)
	dir string   // the job's directory for Open MPI's files on this host
	env []string // the part of every rank's environment that is the same

	sawSingleton atomic.Bool // see singleton

	mu      sync.Mutex
	cleanup []string  // files ranks registered for removal (PMIx job control)
	started time.Time // when the route was made
}

// openMPIRoute prepares the route, once per host, before the ranks start.
// It fails only if no directory can be made; a missing library is not an
// error here.
func (a *agent) openMPIRoute() (*ompiRoute, error) {
	base := "/dev/shm" // Open MPI's own default for its shared memory
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "gorun-"+a.spec.JobID+"-ompi-")
	if err != nil {
		return nil, fmt.Errorf("directory for Open MPI's session files: %w", err)
	}
	a.sentinel.removeAll(dir)
	r := &ompiRoute{dir: dir, started: time.Now()}
	r.env = []string{
		"FLUX_JOB_ID=" + strconv.FormatUint(uint64(ompiJobNumber(a.spec.JobID)), 10),
		"OMPI_MCA_orte_tmpdir_base=" + dir,
		"OMPI_MCA_btl_vader_backing_directory=" + dir,
		"OMPI_MCA_osc_sm_backing_directory=" + dir,
		"OMPI_MCA_btl_sm_backing_directory=" + dir, // Open MPI 5's name
		"GORUN_PMI_CLIQUE=" + a.clique(),
	}
	if len(a.spec.Ranks) > 0 {
		if env := idleEnv(a.spec.Ranks[0].LocalSize, runtime.NumCPU(), a.environ, a.spec.Env); env != nil {
			a.log.Info("more ranks than cores on this host: Open MPI ranks yield when idle", "ranks", a.spec.Ranks[0].LocalSize, "cpus", runtime.NumCPU())
			r.env = append(r.env, env...)
		}
	}
	if r.lib, err = pmilib.Open(); err != nil {
		a.log.Warn("no PMI-1 library for Open MPI 4; it will bootstrap through PMIx", "err", err)
		r.lib = nil
		r.env = append(r.env, "OMPI_MCA_pmix=^flux")
	} else {
		// Open MPI 4 would prefer its PMIx component (ext3x, or pmix3x
		// in a build with its own PMIx), PMIx's variables being set for
		// Open MPI 5: keep it on flux. Open MPI 5's pmix framework has
		// no components, so excluding some changes nothing there (naming
		// one, flux, would fail its MPI_Init).
		r.env = append(r.env, "FLUX_PMI_LIBRARY_PATH=/proc/self/fd/"+strconv.Itoa(ompiLibFD), "OMPI_MCA_pmix=^ext3x,pmix3x")
	}
	return r, nil
}

// ompiAdvice ends every message about an MPI program gorun cannot serve.
const ompiAdvice = "Start it with its own mpirun, or build it against MPICH (mpicc.mpich); `--pmi=none` runs it as separate one-rank jobs on purpose."

// socketRank finds which of the host's ranks the PMIx client on c belongs to:
// the process that holds the other end of c (found through
// /proc/net/tcp and the processes' descriptors) is in the process group
// of the rank that started it. It returns -1 if it cannot tell.
func (a *agent) socketRank(c net.Conn) int {
	remote, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return -1
	}
	inode := tcpInode(remote.Port, c.LocalAddr().(*net.TCPAddr).Port)
	if inode == "" {
		return -1
	}
	groups := map[int]int{} // a rank's pid, which is its process group, to its rank
	a.mu.Lock()
	for _, p := range a.procs {
		if p.alive && p.spec.Hub == 0 {
			groups[p.cmd.Process.Pid] = p.spec.Rank
		}
	}
	a.mu.Unlock()
	procs, _ := os.ReadDir("/proc")
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		rank, ours := groups[processGroup(pid)]
		if ours && holdsSocket(pid, inode) {
			return rank
		}
	}
	return -1
}

// tcpInode is the inode of the loopback socket from port local to port
// remote, from /proc/net/tcp; "" if there is none.
func tcpInode(local, remote int) string {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	return findInode(string(b), local, remote)
}

// findInode finds the socket from 127.0.0.1:local to 127.0.0.1:remote in
// a /proc/net/tcp table.
func findInode(table string, local, remote int) string {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && isLoopback(f[1], local) && isLoopback(f[2], remote) {
			return f[9]
		}
	}
	return ""
}

// isLoopback reports whether a /proc/net/tcp address ("0100007F:1F90")
// is 127.0.0.1:port. The kernel prints the address as the 32-bit word it
// holds in network order, read in the host's byte order: compare bytes,
// not the hex, so that it holds on any byte order.
func isLoopback(field string, port int) bool {
	addr, p, ok := strings.Cut(field, ":")
	if !ok || len(addr) != 8 {
		return false
	}
	w, err1 := strconv.ParseUint(addr, 16, 32)
	n, err2 := strconv.ParseUint(p, 16, 16)
	if err1 != nil || err2 != nil || int(n) != port {
		return false
	}
	var ip [4]byte
	binary.NativeEndian.PutUint32(ip[:], uint32(w))
	return ip == [4]byte{127, 0, 0, 1}
}

// processGroup is pid's process group, or 0.
func processGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 3 {
		return 0
	}
	g, _ := strconv.Atoi(f[2])
	return g
}

// holdsSocket reports whether pid has the socket inode open.
func holdsSocket(pid int, inode string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, _ := os.ReadDir(dir)
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && l == want {
			return true
		}
	}
	return false
}

// singleton reports whether an Open MPI rank on this host started as a
// singleton: it makes a session directory "pid.N" under "ompi.HOST.UID" in
// the directory the job gave it, where a rank that bootstrapped through
// gorun makes only "jf.N". The singleton's helper process removes it when
// the rank ends, so the agent watches the directory (watchSingletons) and
// remembers what it saw.
func (r *ompiRoute) singleton() bool {
	if r == nil {
		return false
	}
	if r.sawSingleton.Load() {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(r.dir, "ompi.*", "pid.*"))
	if len(m) > 0 {
		r.sawSingleton.Store(true)
	}
	return len(m) > 0
}

// singletonFailure is why a rank that ran Open MPI as a singleton fails.
const singletonFailure = "it ran Open MPI as a singleton (a one-rank job of its own, so its results are not the job's): this Open MPI did not bootstrap through gorun's PMI-1. " + ompiAdvice

// watchSingletons fails the job once an Open MPI rank of this host runs
// as a singleton. It watches the job's directory with inotify (a
// singleton's directory can come and go within a tick), and also looks
// twice a second, until stop.
func (a *agent) watchSingletons(stop <-chan struct{}) {
	r := a.ompi
	events := make(chan struct{}, 1)
	if w, err := watchDirs(r.dir, events); err == nil {
		defer w.Close()
	} else {
		a.log.Warn("no inotify on Open MPI's directory; looking twice a second", "err", err)
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for !r.singleton() {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-events:
		}
	}
	a.failAnyRank(singletonFailure)
}

// close removes the job's Open MPI files on this host and the memfd. It
// is idempotent.
func (r *ompiRoute) close() {
	if r == nil {
		return
	}
	if r.lib != nil {
		_ = r.lib.Close()
		r.lib = nil
	}
	r.mu.Lock()
	files := r.cleanup
	r.cleanup = nil
	r.mu.Unlock()
	for _, f := range files {
		removeOwnFile(f, r.started)
	}
	// A file Open MPI's last exiting rank still had open may be unlinked
	// a moment late, or land while the directory is being emptied: tried
	// again, briefly, rather than left behind.
	for i := 0; os.RemoveAll(r.dir) != nil && i < 10; i++ {
		time.Sleep(50 * time.Millisecond)
	}
}

// idleEnv is what mpirun sets itself when a host holds more ranks than
// cores: Open MPI's ranks then give their core away while they wait
// (mpi_yield_when_idle) instead of spinning on it, which starves the rank
// they wait for (MPICH's pt2pt/sendflood took 0.73 s under mpirun and
// over 60 s without it, 4 ranks on 2 cores). The user's own setting, in
// the agent's environment or given with -x, wins.
func idleEnv(ranks, cpus int, envs ...[]string) []string {
	if ranks <= cpus {
		return nil
	}
	for _, env := range envs {
		if envValue(env, "OMPI_MCA_mpi_yield_when_idle") != "" {
			return nil
		}
	}
	return []string{"OMPI_MCA_mpi_yield_when_idle=1"}
}

// ompiJobNumber is the job's number for Open MPI (FLUX_JOB_ID): a 32-bit
// job id whose low half, Open MPI's local job number, is 1, as a
// launched application's is; its high half comes from the job's id, so
// that two jobs on a host differ.
func ompiJobNumber(jobID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return (h.Sum32()&0x7fff+1)<<16 | 1
}

// clique is the host's ranks, comma-separated (PMI_Get_clique_ranks).
func (a *agent) clique() string {
	var b strings.Builder
	for _, r := range a.spec.Ranks {
		if r.Hub != 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r.Rank))
	}
	return b.String()
}

// registerCleanup keeps files a rank registered for removal at the end of
// the host's part of the job. Directories need nothing: Open MPI's are in
// the job's directory, removed whole; one elsewhere is not removed (a
// rank's request must not empty a directory of the user's).
func (r *ompiRoute) registerCleanup(paths []string, dirs bool) {
	if r == nil || dirs {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range paths {
		if filepath.IsAbs(p) {
			r.cleanup = append(r.cleanup, filepath.Clean(p))
		}
	}
}

// removeOwnFile removes f if it is a regular file of this user made since
// the job began: what a rank registered is removed, nothing older.
func removeOwnFile(f string, since time.Time) {
	st, err := os.Lstat(f)
	if err != nil || !st.Mode().IsRegular() || st.ModTime().Before(since) {
		return
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return
	}
	_ = os.Remove(f)
}
