package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// watchDirs watches dir and each directory created in it (one level
// down, and the level below that) with inotify, and posts to events
// (without blocking) whenever something is created in any of them. Close
// the returned file to stop.
func watchDirs(dir string, events chan<- struct{}) (*os.File, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Close wakes Read
	const mask = syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_ONLYDIR
	paths := map[int32]string{}
	add := func(p string) {
		if wd, err := syscall.InotifyAddWatch(fd, p, mask); err == nil {
			paths[int32(wd)] = p
		}
	}
	add(dir)
	if len(paths) == 0 {
		f.Close()
		return nil, &os.PathError{Op: "inotify_add_watch", Path: dir, Err: syscall.EINVAL}
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				if i := indexNUL(name); i >= 0 {
					name = name[:i]
				}
				parent, ok := paths[ev.Wd]
				if ok && ev.Mask&syscall.IN_ISDIR != 0 && parent == dir {
					add(filepath.Join(parent, string(name)))
				}
				select {
				case events <- struct{}{}:
				default:
				}
			}
		}
	}()
	return f, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
