// Package layers holds the rules of what each package of gorun may
// import, as a test: a change that breaks one fails the build, and a new
// package must be given its floor here. docs/architecture.md explains the
// floors; Go's own src/go/build/deps_test.go is the model.
package layers

import (
	"go/build"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/gorun/gorun/"

// allowed is, for every package of the module, the packages of the module
// it may import (outside its tests). The standard library and the
// dependencies in go.mod are not listed.
var allowed = map[string][]string{
	// The floor: pure pieces that know nothing of gorun's other packages.
	"reduce":             nil,                    // element-wise reductions, wire formats
	"reduce/exact":       {"reduce"},             // exact sums' arithmetic: fixed point at a shared exponent, on reduce's integer kernels
	"assign":             nil,                    // the exact assignment solver
	"membership":         {"internal/jobsecret"}, // gossip membership (memberlist)
	"pmi":                nil,                    // PMI-1 codec and server
	"pmix":               nil,                    // PMIx codec and server
	"pmi/pmilib":         nil,                    // the embedded PMI-1 library for Open MPI 4
	"internal/tick":      nil,
	"internal/jobenv":    nil, // the job's environment: the one description of it
	"internal/jobsecret": nil, // the job's secret and the keys derived from it, one per use
	"transport/liveness": nil, // peer liveness: a pure state machine (no clock, no sockets)
	"internal/control":   nil,
	"internal/chart":     nil,
	"internal/inspect":   {"internal/tick"},
	"python":             nil, // gorun's version: the Python package's __version__ (its tests are the PyTorch backend's)
	"internal/canceled":  nil, // the transports' error for a call its context ended
	"internal/backoff":   nil, // the pause between dials of a peer not listening yet
	"internal/cpu":       nil, // whether spinning pays on this host

	// The data plane, bottom up: transport is the interface (frames,
	// errors, the Mux) and its implementations sit beside it, gloo's way:
	// wire is the frame and handshake kit, shm a byte stream over shared
	// memory (ParamHub's links), tcp the rank mesh, mem the in-memory
	// network; transport/internal holds what they share (above the
	// interface: shared memory, a rank's inboxes). ring and ps are
	// the two strategies, collective is the public API over them.
	"transport":                {"internal/canceled"},
	"transport/internal/world": {"internal/canceled", "transport"},
	"transport/wire":           {"internal/backoff", "internal/jobsecret", "transport"},
	"transport/internal/shmem": {"internal/cpu", "internal/jobenv", "transport", "transport/wire"},
	"transport/shm":            {"transport", "transport/internal/shmem", "transport/wire"},
	"transport/mem":            {"internal/canceled", "transport", "transport/internal/world"},
	"transport/tcp":            {"internal/backoff", "internal/canceled", "internal/cpu", "internal/jobsecret", "transport", "transport/internal/shmem", "transport/internal/world", "transport/liveness", "transport/wire"},
	"ring":                     {"internal/cpu", "reduce", "transport"},
	"ps":                       {"assign", "internal/cpu", "internal/jobenv", "internal/jobsecret", "reduce", "transport", "transport/liveness", "transport/shm", "transport/wire"},
	"collective":               {"internal/control", "internal/inspect", "internal/jobenv", "internal/jobsecret", "internal/tick", "membership", "ps", "reduce", "reduce/exact", "ring", "transport", "transport/mem", "transport/shm", "transport/tcp", "transport/wire"},
	"collective/powersgd":      {"collective"},
	"pipeline":                 {"collective"},
	"capi":                     {"collective", "internal/cpu", "reduce"},

	// The launcher: it places and supervises processes and never touches
	// the data plane (the names of a job's files in shared memory are
	// internal/jobenv's).
	"launcher/proto": {"internal/control", "internal/inspect", "pmi"},
	"launcher":       {"assign", "internal/control", "internal/inspect", "internal/jobenv", "internal/jobsecret", "launcher/proto", "pmi"},
	"launcher/agent": {"internal/control", "internal/inspect", "internal/jobenv", "launcher/proto", "pmi", "pmi/pmilib", "pmix"},

	// The one command.
	"cmd/gorun": {"bench", "collective", "internal/jobenv", "internal/jobsecret", "launcher", "launcher/agent", "ps", "python", "reduce"},

	// The wheel's builder (make wheel): it runs go build, and takes the
	// version from package python.
	"python/mkwheel": {"python"},

	// Test aids: imported by tests (and by bench and examples), never by a
	// library package.
	"internal/proctest":    nil,
	"internal/mpitest":     nil,
	"internal/soak":        nil,
	"internal/commtest":    {"collective", "transport/mem"},
	"internal/conformance": {"collective"},
	"internal/jobtest":     {"internal/proctest", "launcher", "launcher/agent", "ps"},

	// Tests only (their packages hold no code of their own).
	"e2e": nil,
}

// free are the trees that may import any package of the module: programs
// that use gorun as a user would, and measurement tools.
var free = []string{"bench", "examples", "scripts"}

// never are imports no library package makes, whatever the table says:
// the data plane never reaches up into the launcher, and no library
// imports a test aid.
var never = []struct{ from, to []string }{
	{[]string{"reduce", "reduce/exact", "transport", "transport/wire", "transport/shm", "transport/tcp", "transport/mem", "ring", "ps", "membership", "collective"}, []string{"launcher", "launcher/agent", "launcher/proto", "pmi", "pmix", "cmd/gorun"}},
	{[]string{"launcher", "launcher/proto", "launcher/agent", "pmi", "pmix"}, []string{"collective", "ring", "ps", "membership", "reduce", "reduce/exact", "transport", "transport/wire", "transport/shm", "transport/tcp", "transport/mem"}},
	// ParamHub and the ring family use the interface and the kit, never
	// the rank mesh.
	{[]string{"ps", "ring"}, []string{"transport/tcp"}},
	{[]string{"reduce", "reduce/exact", "transport", "transport/wire", "transport/shm", "transport/tcp", "transport/mem", "ring", "ps", "membership", "collective", "launcher", "launcher/proto", "launcher/agent", "pmi", "pmix", "capi"}, []string{"internal/proctest", "internal/mpitest", "internal/soak", "internal/commtest", "internal/conformance", "internal/jobtest"}},
}

func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	r := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", r)
	}
	return r
}

// packages lists the module's packages (directories with non-test Go
// files, or with tests only) by import path below the module.
func packages(t *testing.T, dir string) map[string][]string {
	out := map[string][]string{}
	ctx := build.Default
	ctx.CgoEnabled = true
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "results" || name == "docs") {
			return filepath.SkipDir
		}
		pkg, err := ctx.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			t.Fatalf("%s: %v", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		var imps []string
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module) {
				imps = append(imps, strings.TrimPrefix(imp, module))
			}
		}
		sort.Strings(imps)
		out[filepath.ToSlash(rel)] = imps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isFree(pkg string) bool {
	for _, f := range free {
		if pkg == f || strings.HasPrefix(pkg, f+"/") {
			return true
		}
	}
	return false
}

// TestLayers: every package imports only what its floor allows.
func TestLayers(t *testing.T) {
	pkgs := packages(t, root(t))
	if len(pkgs) < 30 {
		t.Fatalf("found %d packages: the walk is broken", len(pkgs))
	}
	for pkg, imps := range pkgs {
		if isFree(pkg) || pkg == "internal/layers" {
			continue
		}
		ok, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no floor: add it to the table in internal/layers (and to docs/architecture.md)", pkg)
			continue
		}
		for _, imp := range imps {
			if !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s, which its floor does not allow (internal/layers; docs/architecture.md says why)", pkg, imp)
			}
		}
		for _, rule := range never {
			if !slices.Contains(rule.from, pkg) {
				continue
			}
			for _, imp := range imps {
				if slices.Contains(rule.to, imp) {
					t.Errorf("%s imports %s: a rule of the house forbids it", pkg, imp)
				}
			}
		}
	}
	for pkg := range allowed {
		if _, ok := pkgs[pkg]; !ok {
			t.Errorf("the table names %s, which is no package any more", pkg)
		}
	}
}

// TestNeverRulesHold: the never rules agree with the table (a table entry
// that allows what a never rule forbids is a mistake in the table).
func TestNeverRulesHold(t *testing.T) {
	for _, rule := range never {
		for _, from := range rule.from {
			for _, to := range allowed[from] {
				if slices.Contains(rule.to, to) {
					t.Errorf("the table lets %s import %s, which a never rule forbids", from, to)
				}
			}
		}
	}
}
