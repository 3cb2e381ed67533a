// Package mpitest builds small MPI programs (with MPICH's or Open MPI's
// compiler) for the tests of gorun's PMI-1 support, and checks their
// collectives against a naive reference.
package mpitest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Programs: name -> C source. Every program prints with the rank first.
var sources = map[string]string{
	// mpicheck SEED COUNT...: for each count, all-reduce (sum, max, min),
	// broadcast from rank COUNT % size and all-gather of each rank's
	// COUNT values (see Value), then in the communicators of MPI_Comm_split
	// by rank parity, ordered by descending rank, an all-gather and a sum
	// reduced to each one's rank 0; printed in full.
	"mpicheck": `#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static long val(int r, int i, long seed) { return (seed * 31 + r * 1000003L + i * 7919L) % 10007 - 5000; }
static void show(int r, const char *what, int c, long *x, int m) {
    printf("%d %s %d", r, what, c);
    for (int i = 0; i < m; i++) printf(" %ld", x[i]);
    printf("\n");
}
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long seed = atol(argv[1]);
    printf("%d size %d\n", r, n);
    for (int a = 2; a < argc; a++) {
        int c = atoi(argv[a]);
        long *v = malloc((c + 1) * sizeof(long)), *o = malloc((c + 1) * sizeof(long)), *g = malloc((c * n + 1) * sizeof(long));
        for (int i = 0; i < c; i++) v[i] = val(r, i, seed);
        MPI_Op ops[3] = {MPI_SUM, MPI_MAX, MPI_MIN};
        const char *names[3] = {"allreduce-sum", "allreduce-max", "allreduce-min"};
        for (int k = 0; k < 3; k++) {
            MPI_Allreduce(v, o, c, MPI_LONG, ops[k], MPI_COMM_WORLD);
            show(r, names[k], c, o, c);
        }
        int root = c % n;
        for (int i = 0; i < c; i++) o[i] = r == root ? v[i] : 0;
        MPI_Bcast(o, c, MPI_LONG, root, MPI_COMM_WORLD);
        show(r, "bcast", c, o, c);
        MPI_Allgather(v, c, MPI_LONG, g, c, MPI_LONG, MPI_COMM_WORLD);
        show(r, "allgather", c, g, c * n);
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, r % 2, n - r, &sub);
        int sr, sn;
        MPI_Comm_rank(sub, &sr);
        MPI_Comm_size(sub, &sn);
        MPI_Allgather(v, c, MPI_LONG, g, c, MPI_LONG, sub);
        show(r, "split-allgather", c, g, c * sn);
        MPI_Reduce(v, o, c, MPI_LONG, MPI_SUM, 0, sub);
        if (sr == 0) show(r, "split-reduce", c, o, c);
        MPI_Comm_free(&sub);
        free(v); free(o); free(g);
    }
    MPI_Finalize();
    return 0;
}
`,
	// mpiabort: rank 1 (or 0 alone) calls MPI_Abort(…, 3); the others wait.
	"mpiabort": `#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == (n > 1)) MPI_Abort(MPI_COMM_WORLD, 3);
    sleep(300);
    MPI_Finalize();
    return 0;
}
`,
	// mpisegv: the last rank dereferences NULL after MPI_Init.
	"mpisegv": `#include <mpi.h>
#include <unistd.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == n - 1) { volatile int *p = 0; *p = 1; }
    sleep(300);
    MPI_Finalize();
    return 0;
}
`,
	// mpinofinalize: rank 0 returns from main after MPI_Init, without
	// MPI_Finalize; the others wait in a barrier that cannot complete.
	"mpinofinalize": `#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) return 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
`,
	// mpihalf: ranks 0 and 1 reach MPI_Finalize, the others wait forever
	// in a barrier (MPICH's errors/coll/bcastlength has this shape); each
	// says "ready" first, flushed.
	"mpihalf": `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    printf("ready %d\n", r);
    fflush(stdout);
    if (r < 2) {
        MPI_Finalize();
        return 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
`,
	// mpinoinit: linked with MPICH, never calls MPI_Init.
	"mpinoinit": `#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    int ok = 0;
    MPI_Initialized(&ok);
    printf("%s no-init initialized=%d\n", getenv("PMI_RANK"), ok);
    return 0;
}
`,
}

// An MPI is one implementation the tests build with.
type MPI struct {
	Name     string // as messages name it
	Compiler string // its C compiler wrapper on Debian
	Packages string // what provides it
	Require  string // the variable that makes its absence a failure (CI)
}

// The MPIs of Debian.
var (
	MPICH   = MPI{"MPICH", "mpicc.mpich", "mpich libmpich-dev", "GORUN_REQUIRE_MPICH"}
	OpenMPI = MPI{"Open MPI", "mpicc.openmpi", "openmpi-bin libopenmpi-dev libpmix-dev", "GORUN_REQUIRE_OPENMPI"}
)

// Compiler is MPICH's C compiler wrapper on Debian.
const Compiler = "mpicc.mpich"

// Build compiles every program with MPICH into dir; see BuildWith.
func Build(t testing.TB, dir string) map[string]string {
	t.Helper()
	return BuildWith(t, dir, MPICH)
}

// BuildWith compiles every program with mpi's compiler into dir and
// returns their paths by name. Without the compiler it skips the test,
// unless mpi.Require is 1 (CI), where it fails.
func BuildWith(t testing.TB, dir string, mpi MPI) map[string]string {
	t.Helper()
	need(t, mpi.Compiler, mpi)
	out := map[string]string{}
	for name, src := range sources {
		out[name] = compile(t, dir, name, src, mpi.Compiler)
	}
	return out
}

// need skips or fails the test without the program prog.
func need(t testing.TB, prog string, mpi MPI) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		if os.Getenv(mpi.Require) == "1" {
			t.Fatalf("%s not found (apt-get install %s)", prog, mpi.Packages)
		}
		t.Skipf("%s not found (apt-get install %s)", prog, mpi.Packages)
	}
}

func compile(t testing.TB, dir, name, src, cc string, flags ...string) string {
	t.Helper()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append([]string{"-O1", "-o", bin, c}, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, name, err, b)
	}
	return bin
}

// pmixDir is where Debian's libpmix-dev keeps PMIx's headers and library.
const pmixDir = "/usr/lib/x86_64-linux-gnu/pmix2"

// BuildPMIxClient compiles a program that calls PMIx_Init, prints what
// it got and calls PMIx_Finalize: a bare PMIx client, as Open MPI 5's
// MPI_Init is first. It needs libpmix-dev (a part of OpenMPI's packages
// here).
func BuildPMIxClient(t testing.TB, dir string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pmixDir, "include", "pmix.h")); err != nil {
		need(t, "no-pmix.h", OpenMPI)
	}
	const src = `#include <pmix.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    printf("PMIx_Init %s nspace=%s rank=%u\n", rc == PMIX_SUCCESS ? "ok" : PMIx_Error_string(rc), me.nspace, me.rank);
    fflush(stdout);
    if (rc != PMIX_SUCCESS) return 1;
    if (argc > 1 && strcmp(argv[1], "lookup") == 0) {
        /* As MPI_Comm_connect does: rank 0 looks a port up for all, the
           others wait for it in a fence. */
        if (me.rank == 0) {
            pmix_pdata_t pd;
            PMIX_PDATA_CONSTRUCT(&pd);
            strncpy(pd.key, "gorun-test-port", PMIX_MAX_KEYLEN);
            rc = PMIx_Lookup(&pd, 1, NULL, 0);
            printf("PMIx_Lookup %s\n", PMIx_Error_string(rc));
            fflush(stdout);
            sleep(600);
        } else {
            PMIx_Fence(NULL, 0, NULL, 0);
        }
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "selffence") == 0) {
        /* A fence over this rank alone: refused, and the program goes on. */
        pmix_proc_t self = me;
        rc = PMIx_Fence(&self, 1, NULL, 0);
        printf("PMIx_Fence self %s\n", PMIx_Error_string(rc));
        fflush(stdout);
    }
    rc = PMIx_Finalize(NULL, 0);
    printf("PMIx_Finalize %s\n", rc == PMIX_SUCCESS ? "ok" : PMIx_Error_string(rc));
    return rc == PMIX_SUCCESS ? 0 : 1;
}
`
	return compile(t, dir, "pmixclient", src, "gcc", "-I"+pmixDir+"/include", "-L"+pmixDir+"/lib", "-Wl,-rpath,"+pmixDir+"/lib", "-lpmix")
}

// Value is what mpicheck's rank r holds at index i.
func Value(r, i int, seed int64) int64 {
	return (seed*31+int64(r)*1000003+int64(i)*7919)%10007 - 5000
}

// Expected is mpicheck's output for one rank of size, in order, computed
// with plain loops.
func Expected(rank, size int, seed int64, counts []int) []string {
	lines := []string{fmt.Sprintf("%d size %d", rank, size)}
	show := func(what string, c int, x []int64) {
		var b strings.Builder
		fmt.Fprintf(&b, "%d %s %d", rank, what, c)
		for _, v := range x {
			fmt.Fprintf(&b, " %d", v)
		}
		lines = append(lines, b.String())
	}
	for _, c := range counts {
		sum, mx, mn := make([]int64, c), make([]int64, c), make([]int64, c)
		for i := range c {
			mx[i], mn[i] = Value(0, i, seed), Value(0, i, seed)
			for r := range size {
				v := Value(r, i, seed)
				sum[i] += v
				mx[i], mn[i] = max(mx[i], v), min(mn[i], v)
			}
		}
		show("allreduce-sum", c, sum)
		show("allreduce-max", c, mx)
		show("allreduce-min", c, mn)
		root := c % size
		b := make([]int64, c)
		for i := range c {
			b[i] = Value(root, i, seed)
		}
		show("bcast", c, b)
		var g []int64
		for r := range size {
			for i := range c {
				g = append(g, Value(r, i, seed))
			}
		}
		show("allgather", c, g)
		// MPI_Comm_split(world, r%2, size-r): the ranks of r's parity,
		// highest first.
		var members []int
		for m := size - 1; m >= 0; m-- {
			if m%2 == rank%2 {
				members = append(members, m)
			}
		}
		g = nil
		for _, m := range members {
			for i := range c {
				g = append(g, Value(m, i, seed))
			}
		}
		show("split-allgather", c, g)
		if members[0] == rank {
			red := make([]int64, c)
			for _, m := range members {
				for i := range c {
					red[i] += Value(m, i, seed)
				}
			}
			show("split-reduce", c, red)
		}
	}
	return lines
}

var tagged = regexp.MustCompile(`^\[(\d+)\] (.*)$`)

// Check compares gorun's tagged output of mpicheck with Expected for
// every rank of size.
func Check(t testing.TB, stdout string, size int, seed int64, counts []int) {
	t.Helper()
	got := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		m := tagged.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("untagged line %q in:\n%s", l, stdout)
		}
		got[m[1]] = append(got[m[1]], m[2])
	}
	if len(got) != size {
		t.Fatalf("output of %d ranks, want %d:\n%s", len(got), size, stdout)
	}
	for r := range size {
		want := Expected(r, size, seed, counts)
		have := got[fmt.Sprint(r)]
		if len(have) != len(want) {
			t.Fatalf("rank %d printed %d lines, want %d:\n%s", r, len(have), len(want), strings.Join(have, "\n"))
		}
		for i := range want {
			if have[i] != want[i] {
				t.Fatalf("rank %d, line %d:\n got %s\nwant %s", r, i, have[i], want[i])
			}
		}
	}
}

// started is when this test process began: files older than it are no
// leak of its tests (an mpirun run by hand leaves its segments behind).
var started = time.Now()

// NoFilesLeft fails t if files matching the patterns stay. Other
// packages' tests may be running Open MPI jobs on this machine right now
// (the test hosts share its /dev/shm), so a file that goes within a while
// was a running job's; one still there 10 s later is a leak, unless a
// process still runs its job (another test's, named by the file). Files last
// changed before this test process started are not its tests'.
func NoFilesLeft(t testing.TB, patterns ...string) {
	t.Helper()
	glob := func() []string {
		var all []string
		for _, p := range patterns {
			m, _ := filepath.Glob(p)
			for _, f := range m {
				if st, err := os.Stat(f); err == nil && st.ModTime().Before(started) {
					continue
				}
				all = append(all, f)
			}
		}
		return all
	}
	left := glob()
	for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		now := glob()
		left = slices.DeleteFunc(left, func(f string) bool { return !slices.Contains(now, f) })
	}
	// A job that is still running is another test's (this test's own
	// processes were checked gone before): its files are not a leak.
	left = slices.DeleteFunc(left, func(f string) bool { return jobRunning(jobOf(f)) })
	if len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// jobOf is the job id in a name gorun gives its files, gorun-<id>-..., or "".
func jobOf(path string) string {
	rest, ok := strings.CutPrefix(filepath.Base(path), "gorun-")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return id
}

// jobRunning reports whether a process on this machine has the job's id in
// its environment (a rank of it: GORUN_JOB_ID).
func jobRunning(id string) bool {
	if id == "" {
		return false
	}
	want := "GORUN_JOB_ID=" + id
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		// As internal/soak finds its run's ranks: one NUL-separated entry.
		if b, err := os.ReadFile(p); err == nil && slices.ContainsFunc(bytes.Split(b, []byte{0}), func(kv []byte) bool { return string(kv) == want }) {
			return true
		}
	}
	return false
}

// OpenMPIMajor is the major version of the Open MPI that mpicc.openmpi
// builds with (4 on Debian 12, 5 on Debian 13), or 0 if there is none.
// With GORUN_REQUIRE_OPENMPI5=1 (the Debian 13 root) anything but 5
// fails t.
func OpenMPIMajor(t testing.TB) int {
	t.Helper()
	out, err := exec.Command("ompi_info", "--version").CombinedOutput()
	major := 0
	if m := regexp.MustCompile(`Open MPI v(\d+)\.`).FindSubmatch(out); err == nil && m != nil {
		major, _ = strconv.Atoi(string(m[1]))
	}
	if os.Getenv("GORUN_REQUIRE_OPENMPI5") == "1" && major != 5 {
		t.Fatalf("GORUN_REQUIRE_OPENMPI5=1, but ompi_info --version says %q (%v)", out, err)
	}
	return major
}

// Python is the interpreter mpi4py is tested with: Debian's, whatever
// python3 comes first on PATH.
const Python = "/usr/bin/python3"

// MPI4pyCheck is mpicheck written with mpi4py's buffer interface: the same
// arguments, the same output (Expected, Check).
const MPI4pyCheck = `import sys
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
seed = int(sys.argv[1])

def val(rank, i):
    return (seed * 31 + rank * 1000003 + i * 7919) % 10007 - 5000

def show(what, c, x):
    print(f"{r} {what} {c}" + "".join(f" {int(v)}" for v in x), flush=True)

print(f"{r} size {n}", flush=True)
for c in map(int, sys.argv[2:]):
    v = np.array([val(r, i) for i in range(c)], dtype=np.int64)
    o = np.zeros(c, dtype=np.int64)
    for op, name in ((MPI.SUM, "allreduce-sum"), (MPI.MAX, "allreduce-max"), (MPI.MIN, "allreduce-min")):
        comm.Allreduce(v, o, op=op)
        show(name, c, o)
    root = c % n
    b = v.copy() if r == root else np.zeros(c, dtype=np.int64)
    comm.Bcast(b, root=root)
    show("bcast", c, b)
    g = np.zeros(c * n, dtype=np.int64)
    comm.Allgather(v, g)
    show("allgather", c, g)
    sub = comm.Split(r % 2, n - r)
    sg = np.zeros(c * sub.Get_size(), dtype=np.int64)
    sub.Allgather(v, sg)
    show("split-allgather", c, sg)
    sub.Reduce(v, o, op=MPI.SUM, root=0)
    if sub.Get_rank() == 0:
        show("split-reduce", c, o)
    sub.Free()
`

// NeedMPI4py skips t without mpi4py for Python (fails it with
// GORUN_REQUIRE_OPENMPI=1 or GORUN_REQUIRE_OPENMPI5=1) and returns the
// version.
func NeedMPI4py(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(Python, "-c", "import mpi4py, numpy; print(mpi4py.__version__)").CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("no mpi4py for %s (apt-get install python3-mpi4py python3-numpy): %v: %s", Python, err, out)
		if os.Getenv("GORUN_REQUIRE_OPENMPI") == "1" || os.Getenv("GORUN_REQUIRE_OPENMPI5") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return strings.TrimSpace(string(out))
}
