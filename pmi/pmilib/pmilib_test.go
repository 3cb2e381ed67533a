//go:build linux && amd64

package pmilib

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gorun/gorun/pmi"
)

// TestLibraryIsTheSource: the embedded library is what `make pmilib`
// builds from pmi/libpmi/gorunpmi.c. With the gcc that built the committed
// copy the bytes must be equal; with another gcc, the exported functions.
func TestLibraryIsTheSource(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	fresh := filepath.Join(t.TempDir(), "lib.so")
	if b, err := exec.Command("sh", "../libpmi/build.sh", fresh).CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := exec.Command("gcc", "--version").Output()
	built, _ := os.ReadFile("libgorunpmi-amd64.so.gcc")
	if first, _, _ := strings.Cut(string(v), "\n"); first == strings.TrimSpace(string(built)) {
		if !bytes.Equal(got, Library()) {
			t.Fatal("the embedded library is not pmi/libpmi/gorunpmi.c built by this gcc: run `make pmilib`")
		}
		return
	}
	t.Logf("gcc %q differs from the one that built the embedded copy (%q): comparing exported functions only", v, built)
	if a, b := exports(t, got), exports(t, Library()); !slices.Equal(a, b) {
		t.Fatalf("exports differ: source %v, embedded %v: run `make pmilib`", a, b)
	}
}

func exports(t *testing.T, so []byte) []string {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(so))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "PMI_") && s.Section != elf.SHN_UNDEF {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}

// driver loads the library the way Open MPI's flux component does
// (dlopen of FLUX_PMI_LIBRARY_PATH, dlsym of each call) and exercises it.
const driver = `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define F(ret, name, args) ret (*name) args = (ret (*) args) must(#name)
static void *dso;
static void *must(const char *n) { void *f = dlsym(dso, n); if (!f) { printf("no %s\n", n); exit(2); } return f; }
int main(int argc, char **argv) {
    dso = dlopen(getenv("FLUX_PMI_LIBRARY_PATH"), RTLD_NOW | RTLD_GLOBAL);
    if (!dso) { printf("dlopen: %s\n", dlerror()); return 2; }
    F(int, PMI_Init, (int *)); F(int, PMI_Get_rank, (int *)); F(int, PMI_Get_size, (int *));
    F(int, PMI_Get_universe_size, (int *)); F(int, PMI_Get_appnum, (int *));
    F(int, PMI_KVS_Get_my_name, (char *, int)); F(int, PMI_KVS_Get_value_length_max, (int *));
    F(int, PMI_KVS_Put, (const char *, const char *, const char *)); F(int, PMI_KVS_Commit, (const char *));
    F(int, PMI_KVS_Get, (const char *, const char *, char *, int)); F(int, PMI_Barrier, (void));
    F(int, PMI_Get_clique_size, (int *)); F(int, PMI_Get_clique_ranks, (int *, int));
    F(int, PMI_Finalize, (void)); F(int, PMI_Abort, (int, const char *)); F(int, PMI_Initialized, (int *));
    int spawned, rank, size, univ, app, vmax, init0, init1, n, ranks[64];
    char kvs[300], key[64], val[2048], big[2048];
    PMI_Initialized(&init0);
    if (PMI_Init(&spawned)) { printf("init failed\n"); return 3; }
    PMI_Initialized(&init1);
    PMI_Get_rank(&rank); PMI_Get_size(&size); PMI_Get_universe_size(&univ); PMI_Get_appnum(&app);
    PMI_KVS_Get_my_name(kvs, sizeof kvs); PMI_KVS_Get_value_length_max(&vmax);
    printf("rank %d size %d universe %d appnum %d kvs %s vmax %d initialized %d->%d\n", rank, size, univ, app, kvs, vmax, init0, init1);
    if (!strcmp(argv[1], "abort") && rank == 1) PMI_Abort(7, "a message\twith spaces");
    snprintf(key, sizeof key, "k%d", rank);
    snprintf(val, sizeof val, "value of  rank %d, with spaces -", rank);
    if (PMI_KVS_Put(kvs, key, val) || PMI_KVS_Commit(kvs)) { printf("put failed\n"); return 3; }
    memset(big, 'x', vmax + 1); big[vmax + 1] = 0;
    printf("too long %d\n", PMI_KVS_Put(kvs, "big", big) != 0);
    printf("bad key %d\n", PMI_KVS_Put(kvs, "a key", "v") != 0);
    if (PMI_Barrier()) { printf("barrier failed\n"); return 3; }
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "k%d", r);
        if (PMI_KVS_Get(kvs, key, val, sizeof val)) printf("get %s failed\n", key);
        else printf("got %s=[%s]\n", key, val);
    }
    printf("missing %d short %d\n", PMI_KVS_Get(kvs, "nokey", val, sizeof val) != 0, PMI_KVS_Get(kvs, "k0", val, 5) != 0);
    PMI_Get_clique_size(&n); PMI_Get_clique_ranks(ranks, n);
    printf("clique %d:", n);
    for (int i = 0; i < n; i++) printf(" %d", ranks[i]);
    printf("\n");
    return PMI_Finalize() ? 3 : 0;
}
`

// TestClientAgainstNode: the library, loaded from a sealed memfd as gorun
// hands it to a rank, speaks to a pmi.Node over a socket pair: puts with
// spaces survive the barrier, over-long values and bad keys are refused,
// missing keys and short buffers fail, the clique and the sizes are
// right, finalize ends the session, and abort carries its code and
// message.
func TestClientAgainstNode(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	bin := filepath.Join(t.TempDir(), "driver")
	src := bin + ".c"
	if err := os.WriteFile(src, []byte(driver), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	for _, size := range []int{1, 3} {
		outs, results := runDriver(t, bin, size, "kvs")
		for r := range size {
			want := []string{fmt.Sprintf("rank %d size %d universe %d appnum 0 kvs kvs_test vmax %d initialized 0->1", r, size, size, pmi.MaxValue), "too long 1", "bad key 1"}
			for k := range size {
				want = append(want, fmt.Sprintf("got k%d=[value of  rank %d, with spaces -]", k, k))
			}
			clique := "clique 1: 0"
			if size == 3 {
				clique = "clique 3: 0 1 2"
			}
			want = append(want, "missing 1 short 1", clique)
			if got := strings.Split(strings.TrimSpace(outs[r]), "\n"); !slices.Equal(got, want) {
				t.Fatalf("size %d rank %d:\n got %q\nwant %q", size, r, got, want)
			}
			if !results[r].Init || !results[r].Finalized {
				t.Fatalf("size %d rank %d: session %+v", size, r, results[r])
			}
		}
	}
	_, results := runDriver(t, bin, 2, "abort")
	if res := results[1]; !res.Aborted || res.Code != 7 || res.Msg != "a message with spaces" {
		t.Fatalf("abort: %+v", res)
	}
}

// runDriver runs size copies of the driver against one Node, as one
// host's ranks, and returns their output and PMI sessions.
func runDriver(t *testing.T, bin string, size int, mode string) ([]string, []pmi.Result) {
	t.Helper()
	cfg := pmi.DefaultNodeConfig()
	cfg.KVS, cfg.Size, cfg.Local = "kvs_test", size, size
	node, err := pmi.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	lib, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	clique := make([]string, size)
	for r := range size {
		clique[r] = fmt.Sprint(r)
	}
	outs, results := make([]string, size), make([]pmi.Result, size)
	var wg sync.WaitGroup
	for r := range size {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		mine, theirs := os.NewFile(uintptr(fds[0]), "pmi"), os.NewFile(uintptr(fds[1]), "pmi-rank")
		conn, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, mode)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.ExtraFiles = []*os.File{theirs, lib}
		cmd.Env = append(os.Environ(), "PMI_FD=3", fmt.Sprintf("PMI_RANK=%d", r), fmt.Sprintf("PMI_SIZE=%d", size),
			"FLUX_PMI_LIBRARY_PATH=/proc/self/fd/4", "GORUN_PMI_CLIQUE="+strings.Join(clique, ","))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		theirs.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := node.Serve(context.Background(), r, conn)
			conn.Close()
			if err != nil && !(mode == "abort" && errors.Is(err, pmi.ErrClosed)) {
				t.Errorf("rank %d: Serve: %v", r, err)
			}
			results[r] = res
			werr := cmd.Wait()
			if mode == "abort" && r == 1 {
				if cmd.ProcessState.ExitCode() != 7 {
					t.Errorf("abort: exit %v, want 7", werr)
				}
				node.Close() // the other rank waits in a barrier for it
			}
			outs[r] = out.String()
		}()
	}
	wg.Wait()
	return outs, results
}
