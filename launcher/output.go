package launcher

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/gorun/gorun/launcher/proto"
)

// output writes ranks' lines whole, one Write per line, so that lines from
// different ranks never interleave.
type output struct {
	mu     sync.Mutex
	tag    bool
	stdout io.Writer
	stderr io.Writer
	files  [][2]*os.File // per rank, then per hub: stdout, stderr (nil without OutputDir)
	np     int           // ranks; numbers from np on are hubs
	buf    []byte
}

func newOutput(cfg Config, n, hubs int) (*output, error) {
	o := &output{tag: cfg.TagOutput, stdout: cfg.Stdout, stderr: cfg.Stderr, np: n}
	if cfg.OutputDir == "" {
		return o, nil
	}
	o.files = make([][2]*os.File, n+hubs)
	for r := range n + hubs {
		dir := filepath.Join(cfg.OutputDir, "rank."+strconv.Itoa(r))
		if r >= n {
			dir = filepath.Join(cfg.OutputDir, "hub."+strconv.Itoa(r-n))
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			o.Close()
			return nil, fmt.Errorf("--output-filename: %w", err)
		}
		for i, name := range []string{"stdout", "stderr"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				o.Close()
				return nil, fmt.Errorf("--output-filename: %w", err)
			}
			o.files[r][i] = f
		}
	}
	return o, nil
}

func (o *output) line(rank, stream int, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.stdout
	if stream == 2 {
		w = o.stderr
	}
	if o.files != nil && rank >= 0 && rank < len(o.files) {
		f := o.files[rank][stream-1]
		_, _ = f.Write(append(append(o.buf[:0], data...), '\n'))
	}
	b := o.buf[:0]
	if o.tag {
		b = append(b, '[')
		if rank >= o.np {
			b = append(b, "hub "...)
			rank -= o.np
		}
		b = strconv.AppendInt(b, int64(rank), 10)
		b = append(b, "] "...)
	}
	b = append(append(b, data...), '\n')
	_, _ = w.Write(b)
	o.buf = b
}

func (o *output) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, fs := range o.files {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	o.files = nil
}

// tail keeps the last few lines written to it; it is an io.Writer so that
// it can collect an ssh client's stderr.
type tail struct {
	mu      sync.Mutex
	max     int
	buf     []string
	partial []byte
}

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.push(line)
}

func (t *tail) push(line string) {
	t.buf = append(t.buf, line)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.push(string(proto.TrimNewline(t.partial[:i+1])))
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > proto.MaxLine {
		t.push(string(t.partial))
		t.partial = nil
	}
	return len(p), nil
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.buf...)
	if len(t.partial) > 0 {
		out = append(out, string(t.partial))
	}
	return out
}

func (t *tail) suffix() string {
	if l := t.lines(); len(l) > 0 {
		return ": " + l[len(l)-1]
	}
	return ""
}
