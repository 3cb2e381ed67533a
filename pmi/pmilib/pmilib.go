// Package pmilib holds gorun's PMI-1 client library for Open MPI 4.x, built
// from pmi/libpmi/gorunpmi.c by `make pmilib`, and hands it to ranks
// without a file on disk.
//
// Open MPI 4's "flux" pmix component, chosen when FLUX_JOB_ID is set,
// dlopen()s the library FLUX_PMI_LIBRARY_PATH names and bootstraps through
// its PMI-1 calls. gorun's agent puts the library into a sealed memfd that
// every rank inherits and names it as /proc/self/fd/N, so an Open MPI rank
// talks to the agent over PMI_FD exactly as an MPICH rank does.
//
// The library is a shared object for the agent's own architecture; a
// gorun built for an architecture without one (Library returns nil)
// refuses Open MPI programs with a message that says so.
package pmilib

import "errors"

// ErrNone is returned by Open when this build of gorun has no library.
var ErrNone = errors.New("this gorun has no PMI-1 library for Open MPI on its architecture (build it with `make pmilib` on that architecture)")

// Library returns the shared object's bytes, or nil when this build has none.
func Library() []byte { return library }
