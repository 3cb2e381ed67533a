package shmem

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShmConnBells: the bells beside a connection's segment ring the
// other side, and are opened only if each is a FIFO of this user's with
// mode 0600: bells that fail
// the checks are refused with an error that says which check failed.
func TestShmConnBells(t *testing.T) {
	if !Supported {
		t.Skip("no shared memory on this platform")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "gorun-job-w0-hub0-00")
	if _, err := openBells(base, false); err == nil {
		t.Fatal("opened bells that do not exist")
	}
	b, err := makeBells(base)
	if err != nil {
		t.Fatal(err)
	}
	a, err := openBells(base, false)
	if err != nil {
		t.Fatal(err)
	}
	// Offering side's bell 0 rings the answering side's in.
	RingBell(b.OutRC)
	_ = a.In.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := a.In.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("the answering side heard %d bytes, %v", n, err)
	}
	b.Close()
	a.Close()
	RemoveBells(base)

	for _, c := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"wrong mode", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "want 600"},
		{"regular file", func(p string) error { return os.WriteFile(p, nil, 0o600) }, "not a FIFO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "gorun-job-w0-hub0-01")
			for i := range 2 {
				if err := c.make(BellPath(base, i)); err != nil {
					t.Fatal(err)
				}
				_ = os.Chmod(BellPath(base, i), 0o644)
				if c.name == "regular file" {
					_ = os.Chmod(BellPath(base, i), 0o600)
				}
			}
			if _, err := openBells(base, false); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("opened planted bells: %v, want an error saying %q", err, c.want)
			}
		})
	}
}
