//go:build linux

package shmem

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Supported says whether this platform has shared memory segments.
const Supported = true

// futexWait sleeps while *word == val, for at most d. The futex is not
// FUTEX_PRIVATE: the word lives in memory another process maps.
func FutexWait(word *atomic.Uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(word)), 0 /* FUTEX_WAIT */, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// FutexWake wakes every sleeper on word.
func FutexWake(word *atomic.Uint32) {
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(word)), 1 /* FUTEX_WAKE */, 1<<30, 0, 0, 0)
}

// createSegment makes a new file of size bytes at path, readable and
// writable by this user only, with every page reserved up front (so that
// a full /dev/shm is an error here, not a SIGBUS later), and maps it.
func createSegment(path string, size int, reserve func(fd int, size int64) error) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if reserve == nil {
		reserve = func(fd int, size int64) error { return syscall.Fallocate(fd, 0, 0, size) }
	}
	if err := reserve(fd, int64(size)); err != nil {
		_ = os.Remove(path)
		return nil, &os.PathError{Op: "reserve", Path: path, Err: err}
	}
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		_ = os.Remove(path)
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return mem, nil
}

// attachSegment maps a segment a peer created, after checking that it is
// a regular file of exactly size bytes, owned by this user, mode 0600.
func attachSegment(path string, size int) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("%s: not a regular file", path)
	case st.Uid != uint32(os.Getuid()):
		return nil, fmt.Errorf("%s: owned by uid %d, not this user", path, st.Uid)
	case st.Mode&0o777 != 0o600:
		return nil, fmt.Errorf("%s: mode %o, want 600", path, st.Mode&0o777)
	case st.Size != int64(size):
		return nil, fmt.Errorf("%s: %d bytes, want %d", path, st.Size, size)
	}
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return mem, nil
}

func Unmap(mem []byte) error { return syscall.Munmap(mem) }

// bootID identifies this kernel: ranks with different boot ids are on
// different machines.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b)) // a host key is one word (it travels in control lines)
}

// makeBells creates a connection's two bells beside its segment at path
// (FIFOs, mode 0600) and opens the offering side's ends.
func makeBells(path string) (*Bells, error) {
	for i := range 2 {
		if err := syscall.Mkfifo(BellPath(path, i), 0o600); err != nil {
			RemoveBells(path)
			return nil, &os.PathError{Op: "mkfifo", Path: BellPath(path, i), Err: err}
		}
	}
	b, err := openBells(path, true)
	if err != nil {
		RemoveBells(path)
	}
	return b, err
}

// openBells opens the bells of the segment at path: the offering side
// reads bell 1 and rings bell 0, the answering side the other way round.
// Each must be a FIFO of this user's, mode 0600. Both are opened for
// reading and writing, so that neither open waits for the peer and a
// side can ring its own bell to wake its sleeper.
func openBells(path string, offerer bool) (*Bells, error) {
	in, out := 0, 1
	if offerer {
		in, out = 1, 0
	}
	fin, err := openBell(BellPath(path, in))
	if err != nil {
		return nil, err
	}
	fout, err := openBell(BellPath(path, out))
	if err != nil {
		_ = fin.Close()
		return nil, err
	}
	return NewBells(fin, fout)
}

func openBell(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&os.ModeNamedPipe == 0:
			err = fmt.Errorf("%s: not a FIFO", path)
		case st != nil && st.Uid != uint32(os.Getuid()):
			err = fmt.Errorf("%s: owned by uid %d, not this user", path, st.Uid)
		case fi.Mode().Perm() != 0o600:
			err = fmt.Errorf("%s: mode %o, want 600", path, fi.Mode().Perm())
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// RingBell writes one byte to f without waiting: a full FIFO already holds
// bells enough.
func RingBell(rc syscall.RawConn) {
	_ = rc.Write(func(fd uintptr) bool {
		_, _ = syscall.Write(int(fd), []byte{1})
		return true
	})
}
