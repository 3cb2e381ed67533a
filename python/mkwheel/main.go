// Command mkwheel builds gorun's wheel, which `make wheel` runs:
//
//	go run ./python/mkwheel [-o DIR] [-go GO]
//
// The wheel holds the Python package (python/gorun's modules, and
// libgorun.so built from capi with cgo) and the static, cgo-free gorun
// binary as gorun-VERSION.data/scripts/gorun, which pip installs, with its
// executable bit, as the environment's gorun command:
//
//	python3 -m venv --system-site-packages v
//	v/bin/pip install dist/gorun-*.whl
//	v/bin/gorun -np 4 v/bin/python train.py
//
// VERSION is the package's __version__ (python.Version), which gorun
// --version prints too. The wheel is tagged py3-none-linux_ARCH: the library
// is loaded with ctypes, not as a CPython extension, so any Python 3 takes
// it, on the machine's architecture and a glibc as recent as the one it was
// built against. It also holds gorun.torch's native fast path built for the
// PyTorch of -python (python/csrc/build.py), a CPython extension that
// gorun.torch loads only under that torch and goes without elsewhere. It is
// assembled here (a zip, PEP 427), without a build backend or anything else
// from the network.
//
// mkwheel writes DIR/gorun-VERSION-py3-none-linux_ARCH.whl (DIR is dist by
// default), removes the other gorun-*.whl files in DIR (so that
// dist/gorun-*.whl names one wheel), and prints the wheel's path.
package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/python"
)

// Python's names for Go's architectures (platform.machine() on Linux),
// which the wheel's platform tag takes.
var machines = map[string]string{
	"amd64":   "x86_64",
	"arm64":   "aarch64",
	"386":     "i686",
	"arm":     "armv7l",
	"ppc64le": "ppc64le",
	"s390x":   "s390x",
	"riscv64": "riscv64",
	"loong64": "loongarch64",
}

func main() {
	out := flag.String("o", "dist", "write the wheel into `DIR`")
	goCmd := flag.String("go", "go", "the `GO` command that builds gorun and libgorun.so")
	pyCmd := flag.String("python", "/usr/bin/python3", "the `PYTHON` whose PyTorch the native fast path is built for (\"\": none)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./python/mkwheel [-o DIR] [-go GO] [-python PYTHON]")
		os.Exit(2)
	}
	path, err := build(*goCmd, *pyCmd, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkwheel:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// build builds gorun, libgorun.so and (with py, when its PyTorch and a
// C++ compiler are there) the native fast path in a temporary folder and
// writes the wheel into out; it returns the wheel's path.
func build(goCmd, py, out string) (string, error) {
	ver := python.Version
	if ver == "" {
		return "", errors.New("python/gorun/__init__.py has no __version__ line")
	}
	env, err := goEnv(goCmd, "GOMOD", "GOOS", "GOARCH")
	if err != nil {
		return "", err
	}
	if env["GOMOD"] == "" || env["GOMOD"] == os.DevNull {
		return "", errors.New("run inside gorun's repository (go env GOMOD names no go.mod)")
	}
	root := filepath.Dir(env["GOMOD"])
	if env["GOOS"] != "linux" {
		return "", fmt.Errorf("GOOS=%s: the wheel is for Linux", env["GOOS"])
	}
	machine, ok := machines[env["GOARCH"]]
	if !ok {
		return "", fmt.Errorf("GOARCH=%s: no Python platform name known for it", env["GOARCH"])
	}

	tmp, err := os.MkdirTemp("", "gorun-mkwheel-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin, lib := filepath.Join(tmp, "gorun"), filepath.Join(tmp, "libgorun.so")
	// As `make build` and `make python` build them.
	if err := goBuild(goCmd, root, "CGO_ENABLED=0", "-o", bin, "./cmd/gorun"); err != nil {
		return "", err
	}
	if err := goBuild(goCmd, root, "CGO_ENABLED=1", "-buildmode=c-shared", "-o", lib, "./capi"); err != nil {
		return "", err
	}
	if err := static(bin); err != nil {
		return "", err
	}
	// gorun.torch's native fast path for py's torch: _torchc-TAG.so,
	// which gorun.torch loads only under the torch it was built for.
	var natives []string
	if py != "" {
		cmd := exec.Command(py, filepath.Join(root, "python", "csrc", "build.py"), tmp)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building the native fast path: %v", err)
		}
		if natives, err = filepath.Glob(filepath.Join(tmp, "_torchc-*.so")); err != nil {
			return "", err
		}
	}

	type file struct {
		name string
		mode os.FileMode
		data []byte
	}
	var files []file
	// Every .py file of the package and its subpackages (gorun.horovod),
	// in a stable order (WalkDir's, lexical).
	pkg := filepath.Join(root, "python", "gorun")
	err = filepath.WalkDir(pkg, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".py") {
			return nil
		}
		rel, err := filepath.Rel(pkg, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, file{"gorun/" + filepath.ToSlash(rel), 0o644, b})
		return nil
	})
	if err != nil {
		return "", err
	}
	binaries := []struct{ name, path string }{
		{"gorun/libgorun.so", lib},
		{"gorun-" + ver + ".data/scripts/gorun", bin},
	}
	for _, n := range natives {
		binaries = append(binaries, struct{ name, path string }{"gorun/" + filepath.Base(n), n})
	}
	for _, f := range binaries {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return "", err
		}
		files = append(files, file{f.name, 0o755, b})
	}
	tag := "py3-none-linux_" + machine
	info := "gorun-" + ver + ".dist-info/"
	files = append(files,
		file{info + "METADATA", 0o644, []byte("Metadata-Version: 2.1\nName: gorun\nVersion: " + ver + "\n" +
			"Summary: gorun's collectives for Python: the \"gorun\" torch.distributed backend, and the gorun launcher\n" +
			"\n" +
			"gorun starts MPI-style jobs (gorun -np 4 python train.py) and runs their collectives;\n" +
			"import gorun.torch makes it torch.distributed's \"gorun\" backend.\n")},
		file{info + "WHEEL", 0o644, []byte("Wheel-Version: 1.0\nGenerator: gorun mkwheel\nRoot-Is-Purelib: false\nTag: " + tag + "\n")},
	)
	var record bytes.Buffer
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	files = append(files, file{info + "RECORD", 0o644, record.Bytes()})

	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	name := filepath.Join(out, "gorun-"+ver+"-"+tag+".whl")
	part, err := os.CreateTemp(out, ".gorun-wheel-")
	if err != nil {
		return "", err
	}
	defer os.Remove(part.Name())
	zw := zip.NewWriter(part)
	// One time for every file, so that the same inputs make the same wheel.
	at := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: at}
		h.SetMode(f.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return "", err
		}
		if _, err := w.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := part.Chmod(0o644); err != nil {
		return "", err
	}
	if err := part.Close(); err != nil {
		return "", err
	}
	old, err := filepath.Glob(filepath.Join(out, "gorun-*.whl"))
	if err != nil {
		return "", err
	}
	for _, o := range old {
		if o != name {
			if err := os.Remove(o); err != nil {
				return "", err
			}
		}
	}
	return name, os.Rename(part.Name(), name)
}

// goEnv returns the values of go env's variables keys.
func goEnv(goCmd string, keys ...string) (map[string]string, error) {
	b, err := exec.Command(goCmd, append([]string{"env"}, keys...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s env: %v", goCmd, err)
	}
	vals := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(vals) != len(keys) {
		return nil, fmt.Errorf("%s env %s: %q", goCmd, strings.Join(keys, " "), b)
	}
	env := map[string]string{}
	for i, k := range keys {
		env[k] = vals[i]
	}
	return env, nil
}

// goBuild runs go build -trimpath in root with cgo set by cgoEnv.
func goBuild(goCmd, root, cgoEnv string, args ...string) error {
	cmd := exec.Command(goCmd, append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), cgoEnv)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s %s: %v\n%s", cgoEnv, goCmd, strings.Join(cmd.Args[1:], " "), err, b)
	}
	return nil
}

// static fails unless the ELF file at path is statically linked: no
// interpreter, no shared libraries.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it names an interpreter)", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v", path, libs)
	}
	return nil
}
