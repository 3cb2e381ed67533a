package python_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"
	gorunpy "github.com/gorun/gorun/python"
)

// wheelJob is the 2-rank job that TestWheel runs from the venv: an
// all-reduce through gorun.torch against the sum computed here, and where
// gorun (its subpackage gorun.horovod, its native fast path) was imported
// from; the all-reduce, small, ran on the native fast path.
const wheelJob = `
import os, torch, torch.distributed as dist, gorun, gorun.torch as gt, gorun.horovod
here = os.path.dirname(gorun.__file__)
assert gorun.horovod.__file__.startswith(here), gorun.horovod.__file__
assert gt.NATIVE is not None and gt.NATIVE.__file__.startswith(here), gt.NATIVE
gt.init()
r, n = dist.get_rank(), dist.get_world_size()
x = torch.arange(1000, dtype=torch.float32) * (r + 1)
dist.all_reduce(x)
want = torch.arange(1000, dtype=torch.float32) * (n * (n + 1) // 2)
assert torch.equal(x, want), (x[:4], want[:4])
assert dist.distributed_c10d._get_default_group().allreduce.ran == 1
print(f"gorun-wheel-ok rank={r} size={n} torch={torch.__version__} package={gorun.__file__}", flush=True)
dist.destroy_process_group()
`

// TestWheel builds the wheel (python/mkwheel, what `make wheel` runs),
// installs it with pip into a fresh venv that sees the system's
// site-packages (Debian's PyTorch), away from the repository and with no
// index, and checks: the wheel's RECORD; gorun on the venv's PATH, the
// static binary of the wheel, executable; gorun --version and
// gorun.__version__ agree (gorunpy.Version, which names the wheel); gorun,
// libgorun.so and the native fast path are imported from the venv; a 2-rank all-reduce through
// gorun.torch that the venv's gorun starts on the venv's python; and pip
// uninstall removes it all. Needs python3-venv, and python3-torch as the
// tests in torch_test.go do.
func TestWheel(t *testing.T) {
	proctest.SkipShort(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(dir string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	dist := filepath.Join(tmp, "dist")
	build := exec.CommandContext(ctx, "go", "run", "./mkwheel", "-python", python, "-o", dist)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go run ./mkwheel: %v\n%s", err, out)
	}
	whls, err := filepath.Glob(filepath.Join(dist, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(whls) != 1 {
		t.Fatalf("%s holds %v, want one wheel", dist, whls)
	}
	whl := whls[0]
	script := checkWheel(t, whl)

	v := filepath.Join(tmp, "v")
	cmd := exec.CommandContext(ctx, python, "-m", "venv", "--system-site-packages", v)
	cmd.Dir, cmd.Env = tmp, cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s -m venv: %v (Debian's python3-venv is needed: apt-get install python3-venv, or bash scripts/testdeps.sh)\n%s", python, err, out)
	}
	vpy := filepath.Join(v, "bin", "python")
	plat := strings.TrimSpace(run(tmp, vpy, "-c", "import sysconfig; print(sysconfig.get_platform())"))
	wantName := "gorun-" + gorunpy.Version + "-py3-none-" + strings.NewReplacer("-", "_", ".", "_").Replace(plat) + ".whl"
	if filepath.Base(whl) != wantName {
		t.Fatalf("wheel %s: want %s (gorunpy.Version %q, platform %s)", filepath.Base(whl), wantName, gorunpy.Version, plat)
	}
	run(tmp, filepath.Join(v, "bin", "pip"), "install", "--no-index", whl)
	site := strings.TrimSpace(run(tmp, vpy, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"))

	// The console command: the wheel's static binary, executable.
	bin := filepath.Join(v, "bin", "gorun")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 != 0o111 {
		t.Fatalf("%s: mode %v, want executable by all", bin, fi.Mode())
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, script) {
		t.Fatalf("%s is not the wheel's gorun (%d bytes, the wheel's %d)", bin, len(b), len(script))
	}

	// One version: gorun's, the package's and the wheel's name's.
	ver := run(tmp, bin, "--version")
	py := strings.Fields(run(tmp, vpy, "-c", "import gorun, gorun._core; print(gorun.__version__, gorun.__file__, gorun._core._lib._name)"))
	if f := strings.Fields(ver); len(f) < 3 || len(py) != 3 || f[2] != py[0] || py[0] != gorunpy.Version {
		t.Fatalf("gorun --version printed %q, gorun.__version__ (and where from) %q: want both %s", ver, py, gorunpy.Version)
	}
	for _, p := range py[1:] {
		if !strings.HasPrefix(p, site+string(filepath.Separator)) {
			t.Fatalf("%s: not in the venv's %s", p, site)
		}
	}

	// Debian's PyTorch through --system-site-packages.
	tv, err := exec.CommandContext(ctx, vpy, "-c", "import torch; print(torch.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("the venv's python has no PyTorch: Debian's python3-torch is needed (apt-get install python3-torch, or bash scripts/testdeps.sh): %v\n%s", err, tv)
	}
	if os.Getenv("GORUN_REQUIRE_TORCH2") != "" && strings.HasPrefix(string(tv), "1.") {
		t.Fatalf("torch %s: GORUN_REQUIRE_TORCH2 is set", tv)
	}

	// A job as a user of the venv starts it: activate, then gorun and
	// python from the PATH.
	out := run(tmp, "bash", "-c", `. "$1/bin/activate" && command -v gorun && OMP_NUM_THREADS=1 exec gorun -np 2 python -c "$2"`, "job", v, wheelJob)
	if first, _, _ := strings.Cut(out, "\n"); first != bin {
		t.Fatalf("command -v gorun in the venv: %q, want %s\n%s", first, bin, out)
	}
	okRE := regexp.MustCompile(`gorun-wheel-ok rank=(\d+) size=2 torch=(\S+) package=(\S+)`)
	for r, m := range everyRank(t, out, 2, okRE) {
		if !strings.HasPrefix(m[3], site+string(filepath.Separator)) {
			t.Fatalf("rank %s imported gorun from %s, not from the venv's %s", r, m[3], site)
		}
	}
	t.Logf("%s, torch %s, %s", filepath.Base(whl), strings.TrimSpace(string(tv)), strings.TrimSpace(ver))

	run(tmp, filepath.Join(v, "bin", "pip"), "uninstall", "-y", "gorun")
	left, err := filepath.Glob(filepath.Join(site, "gorun*"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err == nil || len(left) > 0 {
		t.Fatalf("pip uninstall left %s or %v", bin, left)
	}
}

// checkWheel checks the wheel at path: every file in its RECORD with its
// hash and size, and gorun-VERSION.data/scripts/gorun static and
// executable. It returns that binary.
func checkWheel(t *testing.T, path string) []byte {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	info := "gorun-" + gorunpy.Version + ".dist-info/"
	scriptName := "gorun-" + gorunpy.Version + ".data/scripts/gorun"
	data := map[string][]byte{}
	var script []byte
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		data[f.Name] = b
		if f.Name == scriptName {
			script = b
			if f.Mode().Perm() != 0o755 {
				t.Fatalf("%s: mode %v in the wheel, want 0755", f.Name, f.Mode())
			}
		}
	}
	for _, name := range []string{info + "METADATA", info + "WHEEL", info + "RECORD", "gorun/__init__.py", "gorun/_core.py", "gorun/torch.py", "gorun/horovod/__init__.py", "gorun/libgorun.so", scriptName} {
		if _, ok := data[name]; !ok {
			t.Fatalf("the wheel has no %s", name)
		}
	}
	natives := 0
	for name := range data {
		if m, _ := filepath.Match("gorun/_torchc-*.so", name); m {
			natives++
		}
	}
	if natives != 1 {
		t.Fatalf("the wheel holds %d native fast paths (gorun/_torchc-*.so), want 1", natives)
	}
	recorded := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data[info+"RECORD"]), "\n"), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 3 {
			t.Fatalf("RECORD line %q", line)
		}
		recorded[f[0]] = true
		b, ok := data[f[0]]
		if f[0] == info+"RECORD" {
			continue
		}
		sum := sha256.Sum256(b)
		if want := fmt.Sprintf("sha256=%s", base64.RawURLEncoding.EncodeToString(sum[:])); !ok || f[1] != want || f[2] != fmt.Sprint(len(b)) {
			t.Fatalf("RECORD line %q: the wheel's file has %s, %d bytes", line, want, len(b))
		}
	}
	for name := range data {
		if !recorded[name] {
			t.Fatalf("%s is not in RECORD", name)
		}
	}
	ef, err := elf.NewFile(bytes.NewReader(script))
	if err != nil {
		t.Fatalf("%s: %v", scriptName, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked", scriptName)
		}
	}
	if libs, err := ef.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Fatalf("%s needs shared libraries %v (%v)", scriptName, libs, err)
	}
	return script
}

// cleanEnv is this process's environment without what would point Python,
// pip or gorun's package elsewhere (PYTHONPATH, pip's configuration,
// GORUN_LIBRARY, a venv), so that the venv holds all that is used.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "PIP_") || strings.HasPrefix(k, "GORUN_") || k == "VIRTUAL_ENV" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PIP_CONFIG_FILE="+os.DevNull, "PIP_DISABLE_PIP_VERSION_CHECK=1")
}
