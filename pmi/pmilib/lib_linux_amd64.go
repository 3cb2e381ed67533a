package pmilib

import (
	_ "embed"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

//go:embed libgorunpmi-amd64.so
var library []byte

const (
	sysMemfdCreate = 319 // memfd_create on linux/amd64
	mfdCloexec     = 0x1
	mfdAllowSeal   = 0x2
	fAddSeals      = 1033
	sealAll        = 0x1 | 0x2 | 0x4 | 0x8 // F_SEAL_SEAL, SHRINK, GROW, WRITE
)

// Open returns a sealed, close-on-exec memfd holding the library: a child
// gets it through exec.Cmd.ExtraFiles and dlopen()s /proc/self/fd/N.
func Open() (*os.File, error) {
	name := []byte("gorunpmi\x00")
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdCloexec|mfdAllowSeal, 0)
	if errno != 0 {
		return nil, fmt.Errorf("memfd_create for the PMI-1 library: %w", errno)
	}
	f := os.NewFile(fd, "gorunpmi")
	if _, err := f.Write(library); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the PMI-1 library to its memfd: %w", err)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, fAddSeals, sealAll); errno != 0 {
		f.Close()
		return nil, fmt.Errorf("sealing the PMI-1 library's memfd: %w", errno)
	}
	return f, nil
}
