// Package ps is ParamHub, gorun's parameter server, in three layers: a
// pure Table of keyed tensors with the clock engine that decides when a
// pull may see what (no I/O, no clock); the Hub server, which holds a Table
// behind authenticated TCP connections (their readers take turns at it,
// one at a time, each handling what it read itself when it can, so that a
// request needs no hand-off to another goroutine); and the Client a
// worker uses, with asynchronous handles. After the handshake every
// connection negotiates shared memory (ClientConfig.Shm, HubConfig.Shm):
// a worker and a hub on one host then move their bytes through a segment
// of their own (transport.OfferShm), and the socket stays for liveness.
//
// # Keys, pushes and pulls
//
// Workers Declare keys (every worker, in the same order: the partitions of
// a key are placed on the hubs by a deterministic least-loaded rule every
// worker computes alike), then Push, Pull and PushPull float32 or float64
// tensors. Calls return a Handle at once; Wait blocks with a context. A
// buffer passed to a call belongs to the call until its handle is done.
// Every push carries its sample count.
//
// # Consistency
//
// Every worker has a clock: its k-th push of a key is clock k-1. With
// staleness s, a pull at clock c is served once every live worker has
// pushed clocks 0..c-s-1, so it sees every update from clocks <= c-s-1.
// BSP is s = 0, SSP is s > 0, and ASP (Async) never waits.
//
// # Updates
//
// Under BSP a round's pushes are combined when the round is complete: sum
// mode adds their sum to the value; SGD mode takes the sample-weighted mean
// gradient and applies one momentum step. Under SSP and ASP each push is
// applied when it arrives. A worker that is removed (elastic mode) or has
// left cleanly no longer holds rounds back; a round it did not push is
// combined from the samples the others actually pushed.
//
// # Load balancing (LB-BSP)
//
// Client.Share asks hub 0 for this worker's share of a global batch,
// reporting its last iteration's samples and compute time; the hub keeps
// an exponentially weighted speed per worker (HubConfig.SpeedAlpha) and
// answers once every live worker has asked, with shares that add up to
// the batch. HubConfig.Share.Rule chooses the split:
//
//   - ShareProportional (the default) gives each worker a share in
//     proportion to its speed (Shares), at least one sample each when the
//     batch allows.
//   - ShareOptimal solves for the split with package assign: it minimises
//     the slowest worker's time c_i·x_i + o_i, where c_i is 1/speed
//     (seconds per sample) and o_i is ShareConfig.Overhead, within each
//     worker's ShareConfig.Cap and the ShareConfig.Deadline, with
//     ShareConfig.Weights (zero: {Time: 1}; with Price, Resource weighs
//     the busy seconds' cost). The result is the integer optimum (within
//     one sample's time when the problem is too large for assign's exact
//     search), so its makespan is not above the proportional split's.
//     Every worker gets at least one sample, because a push needs one
//     (Table.Push): a batch smaller than the number of workers is an
//     error. A worker with no speed yet counts at the mean speed; before
//     any worker has one, the batch is split evenly within the caps, and
//     overheads and the deadline are left out.
//
// The share configuration is hub 0's alone (nothing of it travels on the
// wire), and NewHub refuses a config it cannot use: an unknown rule,
// optimal-only fields with the proportional rule, slices that are not one
// entry per worker, negative values, an accuracy weight, or more workers
// than the solver takes. What the solver cannot do (caps that sum below
// the batch, a deadline no split meets) fails that share request on every
// worker with a HubError carrying the solver's message, which names the
// binding limit; the hub never falls back to the proportional split.
// ShareConfig.Split is the same rule as a pure function, to try a
// configuration on measured speeds offline.
//
// # Collectives
//
// Client.Collective runs one collective of the collective package's hub
// strategy: every worker sends its part of every partition, and the hub
// folds the parts in rank order (or concatenates them, or forwards the
// root's), and answers each worker with the part of the result it wants.
// A round is a pipeline: its partition size follows the round's size
// (RoundPartitionBytes: about ClientConfig.RoundPartitionsPerHub
// partitions per hub, none larger than ClientConfig.PartitionBytes), a worker keeps at most
// ClientConfig.RoundWindow partitions outstanding on each hub, and a hub
// sends each partition's result as soon as the partition is complete.
//
// # Failure
//
// A worker's connection that breaks without a goodbye is a lost worker:
// by default every request from then on fails with an error naming it
// (errors.Is(err, transport.ErrPeerLost)); with HubConfig.Elastic the
// worker is removed instead. A hub whose connection breaks, or that says
// nothing for ClientConfig.HubTimeout while it owes an answer, fails the
// client with a HubLostError naming it. Bad requests get errors (ErrUnknownKey,
// ErrShape, ErrClock, ErrBadRequest) and never stop the hub.
package ps
