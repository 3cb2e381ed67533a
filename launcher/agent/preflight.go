package agent

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorun/gorun/launcher/proto"
)

// preflight checks the working directory and the program, and reserves the
// ports the ranks will gossip on.
func (a *agent) preflight() (*proto.Ready, error) {
	s := a.spec
	host, _ := os.Hostname()
	dir := s.Wdir
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if s.WdirSet || dir == "" {
			return nil, fmt.Errorf("wdir %s: no such directory", dir)
		}
		if dir, err = os.UserHomeDir(); err != nil {
			dir = "/"
		}
	}
	a.dir = dir
	prog, err := resolveProgram(s.Program, dir, envValue(a.environ, "PATH"))
	if err != nil {
		return nil, err
	}
	a.prog = prog
	ports := make([]int, 0, len(s.Ranks)+1)
	for range len(s.Ranks) + 1 {
		p, err := FreePort(ports)
		if err != nil {
			return nil, fmt.Errorf("reserving a port: %w", err)
		}
		ports = append(ports, p)
	}
	addr := cmp.Or(s.Advertise, a.advertise)
	if addr == "" {
		addr = "127.0.0.1"
		if f := strings.Fields(envValue(a.environ, "SSH_CONNECTION")); len(f) == 4 {
			addr = f[2]
		}
	}
	return &proto.Ready{Hostname: host, Addr: addr, Ports: ports[:len(s.Ranks)], MasterPort: ports[len(s.Ranks)]}, nil
}

// resolveProgram finds prog the way a shell would: a name with a slash is a
// path (relative to dir), anything else is looked up in path.
func resolveProgram(prog, dir, path string) (string, error) {
	if prog == "" {
		return "", errors.New("no program given")
	}
	check := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s: no such file", prog)
		}
		if st.IsDir() {
			return fmt.Errorf("%s: is a directory", prog)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: permission denied (not executable)", prog)
		}
		return nil
	}
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, check(p)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, prog)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", prog)
}

func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
