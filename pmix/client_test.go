package pmix

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real client: a C program on Debian's libpmix (4.2 on Debian 12,
// 5.0 on Debian 13, what Open MPI 5 links) that does what MPI_Init and
// MPI_Finalize do through PMIx, and prints what it read.

const pmixDir = "/usr/lib/x86_64-linux-gnu/pmix2"

const clientSrc = `#include <pmix.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define CHECK(what, rc) do { if ((rc) != PMIX_SUCCESS) { printf("%u FAIL %s: %s\n", me.rank, what, PMIx_Error_string(rc)); fflush(stdout); exit(2); } } while (0)
static pmix_proc_t me;
static unsigned u32(pmix_value_t *v) {
    switch (v->type) {
    case PMIX_UINT32: return v->data.uint32;
    case PMIX_UINT16: return v->data.uint16;
    case PMIX_PROC_RANK: return v->data.rank;
    default: return 99999;
    }
}
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    const char *mode = argc > 2 ? argv[2] : "ok";
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    CHECK("PMIx_Init", rc);
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v;
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v); CHECK("get job size", rc);
    unsigned size = u32(v);
    printf("%u size %u\n", me.rank, size);
    pmix_info_t opt;
    PMIX_INFO_LOAD(&opt, PMIX_OPTIONAL, NULL, PMIX_BOOL);
    rc = PMIx_Get(&me, PMIX_LOCAL_RANK, &opt, 1, &v); CHECK("get local rank", rc);
    printf("%u lrank %u\n", me.rank, u32(v));
    rc = PMIx_Get(&wild, PMIX_LOCAL_SIZE, &opt, 1, &v); CHECK("get local size", rc);
    printf("%u lsize %u\n", me.rank, u32(v));
    rc = PMIx_Get(&wild, PMIX_LOCAL_PEERS, &opt, 1, &v); CHECK("get local peers", rc);
    printf("%u lpeers %s\n", me.rank, v->data.string);
    rc = PMIx_Get(&me, PMIX_NODEID, &opt, 1, &v); CHECK("get node id", rc);
    printf("%u nodeid %u\n", me.rank, u32(v));
    rc = PMIx_Get(&wild, PMIX_NUM_NODES, &opt, 1, &v); CHECK("get num nodes", rc);
    printf("%u nodes %u\n", me.rank, u32(v));
    rc = PMIx_Get(&me, PMIX_APPNUM, &opt, 1, &v); CHECK("get appnum", rc);
    printf("%u appnum %u\n", me.rank, u32(v));
    if (strcmp(mode, "topology") == 0) {
        /* the topology PMIx took: from the job data's XML (its source
           "hwloc", no root info), or discovered ("hwloc:VERSION",
           Backend Linux) */
        pmix_value_t *x;
        if (PMIx_Get(&wild, "pmix.hwlocxml2", &opt, 1, &x) == PMIX_SUCCESS && x->type == PMIX_STRING)
            printf("%u xml %zu\n", me.rank, strlen(x->data.string));
        else
            printf("%u xml none\n", me.rank);
        pmix_topology_t topo = PMIX_TOPOLOGY_STATIC_INIT;
        rc = PMIx_Load_topology(&topo); CHECK("PMIx_Load_topology", rc);
        hwloc_topology_t ht = (hwloc_topology_t)topo.topology;
        const char *be = hwloc_obj_get_info_by_name(hwloc_get_root_obj(ht), "Backend");
        printf("%u topology %s backend %s pus %d cores %d\n", me.rank, topo.source, be ? be : "-",
               hwloc_get_nbobjs_by_type(ht, HWLOC_OBJ_PU), hwloc_get_nbobjs_by_type(ht, HWLOC_OBJ_CORE));
    }
    if (strcmp(mode, "abort") == 0 && me.rank == size - 1) {
        PMIx_Abort(3, "test abort", NULL, 0);
        sleep(30);
    }
    for (int round = 0; round < rounds; round++) {
        char key[64], val[128];
        snprintf(key, sizeof key, "gorun.test.%d", round);
        snprintf(val, sizeof val, "value-%u-%d", me.rank, round);
        pmix_value_t pv;
        PMIX_VALUE_LOAD(&pv, val, PMIX_STRING);
        rc = PMIx_Put(PMIX_GLOBAL, key, &pv); CHECK("put global", rc);
        unsigned lv = me.rank * 1000 + round;
        PMIX_VALUE_LOAD(&pv, &lv, PMIX_UINT32);
        rc = PMIx_Put(PMIX_LOCAL, "gorun.local", &pv); CHECK("put local", rc);
        pmix_byte_object_t bo;
        char blob[300];
        for (int i = 0; i < (int)sizeof blob; i++) blob[i] = (char)(me.rank * 7 + i + round);
        bo.bytes = blob; bo.size = sizeof blob;
        PMIX_VALUE_LOAD(&pv, &bo, PMIX_BYTE_OBJECT);
        rc = PMIx_Put(PMIX_REMOTE, "gorun.blob", &pv); CHECK("put remote", rc);
        rc = PMIx_Commit(); CHECK("commit", rc);
        pmix_info_t coll;
        PMIX_INFO_LOAD(&coll, PMIX_COLLECT_DATA, NULL, PMIX_BOOL);
        rc = PMIx_Fence(&wild, 1, &coll, 1); CHECK("fence", rc);
        for (unsigned r = 0; r < size; r++) {
            pmix_proc_t p;
            PMIX_LOAD_PROCID(&p, me.nspace, r);
            rc = PMIx_Get(&p, key, NULL, 0, &v); CHECK("get peer's put", rc);
            printf("%u round %d from %u %s\n", me.rank, round, r, v->data.string);
        }
    }
    if (strcmp(mode, "nofinalize") == 0) return 0;
    rc = PMIx_Fence(NULL, 0, NULL, 0); CHECK("last fence", rc);
    rc = PMIx_Finalize(NULL, 0); CHECK("PMIx_Finalize", rc);
    printf("%u done\n", me.rank);
    return 0;
}
`

// buildClient compiles the client, or skips (fails with
// GORUN_REQUIRE_OPENMPI=1 or GORUN_REQUIRE_OPENMPI5=1) without libpmix.
func buildClient(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pmixDir, "include", "pmix.h")); err != nil {
		if os.Getenv("GORUN_REQUIRE_OPENMPI") == "1" || os.Getenv("GORUN_REQUIRE_OPENMPI5") == "1" {
			t.Fatalf("no pmix.h (apt-get install libpmix-dev): %v", err)
		}
		t.Skipf("no pmix.h (apt-get install libpmix-dev)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "client.c")
	if err := os.WriteFile(src, []byte(clientSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	cmd := exec.Command("gcc", "-O1", "-o", bin, src, "-I"+pmixDir+"/include", "-L"+pmixDir+"/lib", "-Wl,-rpath,"+pmixDir+"/lib", "-lpmix", "-lhwloc")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return bin
}

// job is a test job: hosts as servers in this process, joined by an
// in-process fence; one listener per rank, so that a connection's rank is
// known.
type job struct {
	t       *testing.T
	servers []*Server
	mu      sync.Mutex
	entered map[int]map[int][]byte // epoch -> rank -> data
	hosts   int
	aborts  []string
	refused []string
	onAbort func()
}

func newJob(t *testing.T, placement [][]int, opts ...func(*Config)) *job {
	j := &job{t: t, entered: map[int]map[int][]byte{}, hosts: len(placement)}
	var hosts []Host
	for i, rs := range placement {
		hosts = append(hosts, Host{Name: fmt.Sprintf("host%d", i), Ranks: rs})
	}
	tmp := t.TempDir()
	for i := range placement {
		cfg := DefaultConfig()
		cfg.Nspace = "gorun-test"
		cfg.Hosts, cfg.Host = hosts, i
		cfg.TmpDir = tmp
		cfg.UID, cfg.GID = uint32(os.Geteuid()), uint32(os.Getegid())
		host := i
		cfg.Relay = func(epoch int, data map[int][]byte) error { return j.relay(host, epoch, data) }
		cfg.Abort = func(rank, status int, msg string) {
			j.mu.Lock()
			j.aborts = append(j.aborts, fmt.Sprintf("%d %d %s", rank, status, msg))
			f := j.onAbort
			j.mu.Unlock()
			if f != nil {
				f()
			}
		}
		cfg.Refused = func(r Refusal) {
			j.mu.Lock()
			j.refused = append(j.refused, fmt.Sprintf("%d %s %v", r.Rank, r.What, r.Strands))
			j.mu.Unlock()
		}
		for _, o := range opts {
			o(&cfg)
		}
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		j.servers = append(j.servers, s)
	}
	return j
}

func (j *job) relay(host, epoch int, data map[int][]byte) error {
	j.mu.Lock()
	m := j.entered[epoch]
	if m == nil {
		m = map[int][]byte{}
		j.entered[epoch] = m
	}
	for r, b := range data {
		m[r] = b
	}
	key := -1 - host
	m[key] = nil
	n := 0
	for r := range m {
		if r < 0 {
			n++
		}
	}
	complete := n == j.hosts
	var all map[int][]byte
	if complete {
		all = map[int][]byte{}
		for r, b := range m {
			if r >= 0 {
				all[r] = b
			}
		}
		delete(j.entered, epoch)
	}
	j.mu.Unlock()
	if complete {
		for _, s := range j.servers {
			go s.Release(epoch, all)
		}
	}
	return nil
}

type rankOut struct {
	rank   int
	code   int
	out    string
	res    Result
	err    error
	stderr string
}

// run starts one client per rank and waits for all.
func (j *job) run(ctx context.Context, bin string, args ...string) []rankOut {
	t := j.t
	var wg sync.WaitGroup
	var outs []rankOut
	var mu sync.Mutex
	for h, s := range j.servers {
		for _, r := range s.cfg.Hosts[h].Ranks {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), s.Env(r, ln.Addr().String())...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func(s *Server, r int, ln net.Listener, cmd *exec.Cmd) {
				defer wg.Done()
				var res Result
				var serr error
				served := make(chan struct{})
				go func() {
					defer close(served)
					c, err := ln.Accept()
					ln.Close()
					if err != nil {
						return
					}
					res, serr = s.Serve(ctx, r, c)
				}()
				werr := cmd.Wait()
				ln.Close()
				<-served
				code := 0
				if werr != nil {
					code = -1
					if ee, ok := werr.(*exec.ExitError); ok {
						code = ee.ExitCode()
					}
				}
				mu.Lock()
				outs = append(outs, rankOut{r, code, stdout.String(), res, serr, stderr.String()})
				mu.Unlock()
			}(s, r, ln, cmd)
		}
	}
	wg.Wait()
	return outs
}

// expected is a client's output for rank of a job placed so, computed
// from the placement alone.
func expected(rank int, placement [][]int, rounds int) []string {
	size := 0
	var host int
	var local []int
	for h, rs := range placement {
		size += len(rs)
		for _, r := range rs {
			if r == rank {
				host, local = h, rs
			}
		}
	}
	lrank := 0
	for i, r := range local {
		if r == rank {
			lrank = i
		}
	}
	var peers []string
	for _, r := range local {
		peers = append(peers, fmt.Sprint(r))
	}
	out := []string{
		fmt.Sprintf("%d size %d", rank, size),
		fmt.Sprintf("%d lrank %d", rank, lrank),
		fmt.Sprintf("%d lsize %d", rank, len(local)),
		fmt.Sprintf("%d lpeers %s", rank, strings.Join(peers, ",")),
		fmt.Sprintf("%d nodeid %d", rank, host),
		fmt.Sprintf("%d nodes %d", rank, len(placement)),
		fmt.Sprintf("%d appnum 0", rank),
	}
	for round := 0; round < rounds; round++ {
		for r := 0; r < size; r++ {
			out = append(out, fmt.Sprintf("%d round %d from %d value-%d-%d", rank, round, r, r, round))
		}
	}
	return append(out, fmt.Sprintf("%d done", rank))
}

func TestRealClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildClient(t)
	for _, placement := range [][][]int{
		{{0}},
		{{0, 1}},
		{{0, 1, 2}},
		{{0, 2, 4}, {1, 3}},
		{{3}, {0, 1}, {2, 4}},
	} {
		t.Run(fmt.Sprint(placement), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			j := newJob(t, placement)
			outs := j.run(ctx, bin, "2")
			if len(outs) != len(flatten(placement)) {
				t.Fatalf("%d ranks ran, want %d", len(outs), len(flatten(placement)))
			}
			for _, o := range outs {
				want := strings.Join(expected(o.rank, placement, 2), "\n") + "\n"
				if o.code != 0 || o.out != want || o.err != nil || !o.res.Init || !o.res.Finalized {
					t.Errorf("rank %d: exit %d, session %+v %v\n%s\nwant\n%s\nstderr:\n%s", o.rank, o.code, o.res, o.err, o.out, want, o.stderr)
				}
			}
		})
	}
}

func flatten(p [][]int) []int {
	var out []int
	for _, rs := range p {
		out = append(out, rs...)
	}
	return out
}

// TestRealClientAbortAndExit: PMIx_Abort reaches the server's Abort with
// its rank, status and message, and the session says so; a client that
// exits without PMIx_Finalize ends a session that says it initialized
// and never finalized.
func TestRealClientAbortAndExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildClient(t)
	placement := [][]int{{0, 1, 2}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j := newJob(t, placement)
	j.onAbort = cancel // the job ends the others, as gorun's launcher does
	outs := j.run(ctx, bin, "1", "abort")
	if len(j.aborts) != 1 || j.aborts[0] != "2 3 test abort" {
		t.Fatalf("aborts %q, want rank 2's status 3", j.aborts)
	}
	for _, o := range outs {
		if o.rank == 2 && !(o.res.Init && o.res.Aborted && o.res.Status == 3) {
			t.Fatalf("rank 2's session %+v", o.res)
		}
	}

	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j = newJob(t, placement)
	for _, o := range j.run(ctx, bin, "1", "nofinalize") {
		if o.code != 0 || !o.res.Init || o.res.Finalized || o.err != nil {
			t.Fatalf("rank %d: exit %d, session %+v %v:\n%s%s", o.rank, o.code, o.res, o.err, o.out, o.stderr)
		}
	}
}

// TestRealClientTopology: with Config.Topology, every rank's PMIx client
// finds the XML in its job data and loads it as its topology (source
// "hwloc", none of the root information hwloc's discovery adds), with
// the PUs and cores hwloc's own discovery finds; without it, the client
// discovers the machine itself, as before.
func TestRealClientTopology(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildClient(t)
	xml, err := LocalTopology()
	if err != nil {
		t.Fatalf("LocalTopology: %v", err)
	}
	placement := [][]int{{0, 1, 2}}
	run := func(opts ...func(*Config)) map[int][]string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		lines := map[int][]string{}
		for _, o := range newJob(t, placement, opts...).run(ctx, bin, "1", "topology") {
			if o.code != 0 || o.err != nil || !o.res.Finalized {
				t.Fatalf("rank %d: exit %d, session %+v %v:\n%s%s", o.rank, o.code, o.res, o.err, o.out, o.stderr)
			}
			for _, l := range strings.Split(o.out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && (f[1] == "xml" || f[1] == "topology") {
					lines[o.rank] = append(lines[o.rank], strings.Join(f[1:], " "))
				}
			}
		}
		return lines
	}
	calls := 0
	served := run(func(c *Config) { c.Topology = func() string { calls++; return xml } })
	discovered := run()
	if calls != 1 {
		t.Errorf("Topology called %d times for 3 ranks, want 1", calls)
	}
	t.Logf("rank 0: served %q; without: %q", served[0], discovered[0])
	for r := range 3 {
		s, d := served[r], discovered[r]
		if len(s) != 2 || len(d) != 2 {
			t.Fatalf("rank %d: served %q, discovered %q", r, s, d)
		}
		if want := fmt.Sprintf("xml %d", len(xml)); s[0] != want || d[0] != "xml none" {
			t.Errorf("rank %d: the XML in the job data: %q served, %q without; want %q and none", r, s[0], d[0], want)
		}
		// "topology SOURCE backend B pus N cores M"
		sf, df := strings.Fields(s[1]), strings.Fields(d[1])
		if sf[1] != "hwloc" || sf[3] != "-" || !strings.HasPrefix(df[1], "hwloc:") || df[3] != "Linux" {
			t.Errorf("rank %d: served %q, discovered %q: want the XML's (hwloc, no backend) and hwloc's own (hwloc:VERSION, Linux)", r, s[1], d[1])
		}
		if strings.Join(sf[4:], " ") != strings.Join(df[4:], " ") {
			t.Errorf("rank %d: from the XML %q, discovered %q", r, s[1], d[1])
		}
	}
}
