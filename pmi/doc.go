// Package pmi serves MPICH's "simple PMI" wire protocol, version 1 (PMI-1),
// so that programs built against MPICH and its derivatives (MVAPICH, Intel
// MPI) run under gorun as they do under mpiexec.hydra.
//
// A rank finds its process manager through PMI_FD, an inherited connected
// socket, and PMI_RANK and PMI_SIZE (see Env). It writes one request per
// line, "cmd=NAME key=value ...", and waits for the answer; one request is
// in flight per rank. The key-value space (KVS) is job-wide: a put becomes
// visible to every rank after the next barrier.
//
// The package has three parts, one per place in the job:
//
//   - ParseLine and Format are the wire codec: no I/O, bounded (MaxLine),
//     fuzzed.
//   - Node is one host's side (gorun's agent): it answers its ranks'
//     requests (Serve, one call per rank), keeps the KVS, and when every
//     rank of the host has entered a barrier it hands the host's puts of
//     that epoch to NodeConfig.Relay, one message per host and barrier.
//   - Fence is the launcher's side: it waits until every host has entered
//     a barrier and returns the puts of all of them, which every Node then
//     gets through Release. A barrier thus costs one round trip per host,
//     not per rank.
//
// Limits are those mpiexec.hydra announces (MaxKVSName, MaxKey, MaxValue);
// an over-long key or value is refused with rc=-1, and Fence caps the
// whole store (FenceConfig.MaxBytes). A line that does not parse, or an
// unknown command, ends the rank's session with an error that names the
// rank and the line: gorun then fails the rank. Name publishing, spawn and
// KVS creation are answered with rc=-1 and a message. abort ends the
// session without an answer and reports the exit code (Result.Abort).
package pmi
