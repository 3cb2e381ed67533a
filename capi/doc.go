// Command capi is gorun's collective package behind a C ABI. It is built
// as a shared library (make python: go build -buildmode=c-shared, into
// python/gorun/libgorun.so), which the Python package loads with ctypes;
// the gorun binary itself stays static and cgo-free.
//
// Handles. A communicator is a positive int64 (gorun_join,
// gorun_create_group); so is a started operation (gorun_start). Every
// started operation ends exactly once: gorun_next returns its id when it
// is done (or gorun_wait, to the thread that waited for it), and
// gorun_result then gives its outcome and forgets it. gorun_start_on and
// gorun_next_on do the same over a queue of their own, so that two
// collecting threads (the Python package's and its native fast path's)
// each see only the operations they started. gorun_run runs an operation
// in the calling thread and returns its outcome: no id, nothing to collect
// (the Python package's small operations and the native fast path).
//
// Buffers. gorun_start takes the caller's memory as it lies, without a
// copy: the caller keeps send, recv and counts alive and untouched until
// gorun_next has returned the operation's id. Element types and reduction
// ops are package reduce's codes.
//
// Errors. A call that fails writes its message, NUL-terminated and cut to
// fit, into the caller's errbuf, and returns a negative number (or, from
// gorun_result, a code: see the code constants below).
//
// Threads. Every function may be called from any thread; a blocking one
// (gorun_join, gorun_run, gorun_next, gorun_wait, gorun_resync) holds no
// lock while it waits, so a caller that releases its interpreter's lock
// around the call (ctypes does) lets its other threads run. A thread that
// came from C stays locked to its goroutine, so gorun_run's waits poll
// without handing that thread away (package internal/cpu, WithLockedThread).
package main

// main is never run: the package is built as a shared library. Without
// cgo (a cross-build, GOARCH=386 vet) only this file is compiled.
func main() {}
