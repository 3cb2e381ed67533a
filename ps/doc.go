// Package ps is ParamHub, gorun's parameter server, in three layers: a
// pure Table of keyed tensors with the clock engine that decides when a
// pull may see what (no I/O, no clock); the Hub server, which holds a Table
// behind authenticated TCP connections (their readers take turns at it,
// one at a time, each handling what it read itself when it can, so that a
// request needs no hand-off to another goroutine); and the Client a
// worker uses, with asynchronous handles. After the handshake every
// connection negotiates shared memory (ClientConfig.Shm, HubConfig.Shm):
// a worker and a hub on one host then move their bytes through a segment
// of their own (transport/shm's Offer), and the socket stays for liveness.
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
// # Sparse pushes
//
// KeyConfig.Sparse makes a key's pushes sparse: each push sends, of each
// partition of n elements, only k = ⌈Ratio·n⌉ (SparseK), chosen by the
// Method:
//
//   - TopK: the k largest magnitudes; of equal magnitudes the lower
//     index, and NaN above every number. Indices and values travel.
//   - RandomK: k elements drawn from a seed that the key's Seed, the
//     partition and the push's clock give alike on every worker and on
//     the hub: at a clock every worker sends the same indices, and only
//     the values travel.
//
// Every worker declares a key with the same Method, Ratio and Seed (a hub
// refuses a declare that differs, with ErrShape); ErrorFeedback and Codec
// are each worker's own. A key is the worker's to push once every hub has
// accepted its declare: a refused declare leaves it undeclared (pushes get
// ErrUnknownKey) and can be made again, corrected, with the same length;
// a re-declare with another length or other sparse settings than the
// accepted one is refused on the worker (ErrShape, naming both). Values
// travel as the push's element type (Push[float32] sends float32 values),
// and Declare refuses a key whose largest push of float64 values would
// not fit in ClientConfig.MaxFrame, so that no push of it fails on the
// worker. The hub adds a sparse push to the key exactly as a dense push
// of the same elements with zeros elsewhere: BSP, SSP and ASP, sum and
// SGD mode and the sample counts work as for dense pushes. Pulls stay
// dense. ParseSparse reads a trainer's flag ("topk:0.01",
// "randk:0.1,noef").
//
// A sparse push selects and copies what it sends before Push returns:
// its grad is free again at once (PushPull's dst still belongs to the
// call until the handle is done). Pushes of one sparse key are sent in
// the order they are made, one at a time.
//
// Error feedback (ErrorFeedback: off unless set in a SparseConfig; on in
// ParseSparse's form unless it says ",noef") keeps on the worker, per
// key, the residual: element by element of the whole key, in float64. A
// push adds grad to it, selects from it, sends the selected elements
// rounded to the push's type and subtracts what it sent; what remains
// goes out in later pushes. So the sum of what a worker's pushes sent
// plus its residual is the sum of its gradients, to float64 rounding.
// The rules:
//
//   - Each partition of a push is settled when the worker learns whether
//     its hub applied it. A hub says so as soon as it applies a sparse
//     push: in a push-pull whose pull must wait (a BSP round still open)
//     it says so at once, before the pull's answer; otherwise with the
//     answer; and an error says whether the push was applied before it
//     (a push-pull's pull that failed). Applied, the partition stays
//     sent; refused before its push (a bad clock, a corrupt or failed
//     key), it goes back into the residual.
//   - When the client fails (Fail, a lost hub) or closes, what is still
//     in flight gets no answer. Close first waits, at most
//     ClientConfig.HubTimeout, for the hubs to settle it; Fail does not
//     wait. Both then close each connection once the hub has read all
//     that was written on it (the hub closes its end after the goodbye
//     or last words that follow it), or after at most 2 s (Close) or
//     200 ms (Fail). Then a partition never written to its hub goes back
//     into the residual, and one written but never acknowledged counts
//     as applied and is never restored. A hub that read it applies it
//     before it hears the worker has gone, so this is right whenever the
//     hub lives; if the hub died, or the hang-up timed out and it never
//     read the push, or it refused the push unheard, that partition of
//     that one push is lost, once, which error feedback tolerates (later
//     pushes are unaffected). A push is never counted twice.
//   - Wait on a push returns, unless its context ends first, only once
//     every partition of the push is settled, after an error too: the
//     residual is then final for that push. After Close every push is
//     settled.
//   - A worker removed from an elastic job takes its residual with it,
//     as it takes its gradients not yet pushed; the others keep theirs
//     (nothing resets a residual), and their next pushes send it.
//   - The residual does not depend on where the partitions are: Residual
//     and SetResidual carry it to another client (a restarted job, other
//     hubs, another partition size), and SetResidual(key, nil) drops it.
//
// The payload's indices are delta-encoded as uvarints (CodecVarint, the
// default), or 4 bytes each (CodecRaw); CodecS2 and CodecZstd compress
// the whole payload (measured: no gain on gradients, see
// DefaultSparseCodec). A hub checks every push against the key's
// declaration and caps what a compressed payload may expand to by the
// partition's length before it allocates. A push it cannot decode (an
// index out of range, repeated or out of order, a wrong count, a bad
// compressed stream) fails that partition of the key for good with
// ErrCorrupt, naming the key, the partition and the worker: the sender,
// every worker waiting on the partition and every later request (a
// declare of the key too) get the error, so nobody waits for a round that
// cannot complete and no value is silently wrong.
//
// The costs: a worker's push reads the whole key (a radix selection of a
// few passes for top-k) and, with error feedback, holds 8 bytes an
// element; a hub expands each sparse push into a dense one. What it
// saves is the push's bytes: about 5 bytes an element sent (float32)
// instead of 4 for every element.
//
// # Load balancing (LB-BSP)
//
// Client.Share asks hub 0 for this worker's share of a global batch,
// reporting its last iteration's samples and compute time; the hub keeps
// an exponentially weighted speed per worker (HubConfig.SpeedAlpha) and,
// for the optimal rule, a cost model per worker (below), and answers once
// every live worker has asked, with shares that add up to the batch.
// HubConfig.Share.Rule chooses the split:
//
//   - ShareProportional (the default) gives each worker a share in
//     proportion to its speed (Shares), at least one sample each when the
//     batch allows.
//   - ShareOptimal solves for the split with package assign: it minimises
//     the slowest worker's time c_i·x_i + o_i, where c_i is the worker's
//     modelled compute per sample and o_i its modelled fixed compute per
//     iteration plus ShareConfig.Overhead, within each worker's
//     ShareConfig.Cap and the ShareConfig.Deadline, with
//     ShareConfig.Weights (zero: {Time: 1}; with Price, Resource weighs
//     the busy seconds' cost). The result is the integer optimum of the
//     model (within one sample's time when the problem is too large for
//     assign's exact search). Every worker gets at least one sample,
//     because a push needs one (Table.Push): a batch smaller than the
//     number of workers is an error. A worker with no report yet counts
//     at the mean of the others' models; before any worker has reported,
//     the batch is split evenly within the caps, and overheads, prices,
//     weights and the deadline are left out.
//
// The optimal rule's cost model. Samples per second folds the part of a
// step that does not grow with its share (layer setup, the optimizer
// step, a straggler's delay after each layer) into the cost per sample,
// so a worker given few samples looks slower per sample than it is, and a
// solver that believes it keeps its share small. So for ShareOptimal hub
// 0 models each worker's reported compute for a share of x samples as
// fixed + perSample·x, fitted by weighted least squares to the worker's
// reports (samples, compute time), a report k iterations old weighing
// 0.9^k (reports without samples or time are ignored, as by the speed):
//
//   - Until the shares a worker has reported vary enough to separate the
//     two parts (their weighted standard deviation at least a tenth of
//     their weighted mean), its model is the proportional estimate:
//     1/speed a sample, no fixed part. The first measured round, in which
//     every worker reports its share of the even split, is therefore
//     judged exactly as ShareConfig.Split judges the measured speeds.
//   - Once they do, the fixed part is the fit's intercept clamped to
//     [0, 0.99·ȳ] (ȳ the weighted mean compute time), and perSample is
//     (ȳ − fixed)/x̄ (x̄ the weighted mean share): the line passes through
//     the weighted means, so the model is right at the worker's recent
//     shares however noisy the times, and perSample stays positive.
//   - When the shares stop varying that much (the split has settled), the
//     fixed part is held from the last fit that separated it and perSample
//     follows the recent times; a share that moves enough again refits
//     both. The model never goes back to the proportional estimate.
//
// The first splits move the shares away from the even split, which gives
// the fits their data; ordinary rounds do not probe. A worker whose share
// never moves that much keeps the proportional estimate, exact at its
// share but overstating what more samples cost. A deadline is where that
// matters: a round the models cannot fit within ShareConfig.Deadline
// fails, unless some worker has reported at least twice and its fit has
// not separated. The round is then a probe, split without the deadline
// and, if that split does not move such a worker's share enough to
// separate its fit, with one such worker held at the nearest larger share
// that does (else the nearest smaller one; a probe round costs at most
// three more solver calls). A probe
// separates a fit for good, so a job probes at most once per worker
// (workers that compute the shares they are given). A round that no probe
// can split is, under ShareConfig.Miss's default MissRelax, split for the
// least makespan (time weight only, no deadline), the split closest to
// the deadline, and its answers say so (Client.DeadlineRelaxed counts
// them); the next round tries the deadline again. Under MissFail it fails
// with the deadline's error, followed by the models the hub held.
// ShareConfig.Overhead is not fitted: it is time outside the reported
// compute, declared.
//
// The share configuration is hub 0's alone (nothing of it travels on the
// wire), and NewHub refuses a config it cannot use: an unknown rule,
// optimal-only fields with the proportional rule, slices that are not one
// entry per worker, negative values, an accuracy weight, or more workers
// than the solver takes. What the solver cannot do (caps that sum below
// the batch, or under MissFail a deadline no split meets) fails that
// share request on every worker with a HubError carrying the solver's
// message, which names the binding limit; the hub never falls back to the
// proportional split.
// ShareConfig.Split is the rule as a pure function of measured speeds, to
// try a configuration offline: it has no fixed parts and no probes (add
// fitted fixed parts to Overhead to split by the hub's kind of model).
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
// A reduction of float32 data may travel in a 2-byte format
// (Collective.Wire: fp16 or bf16). Partitions are then cut by the bytes
// that travel, so a partition of PartitionBytes holds twice the elements,
// and the hub keeps a float32 accumulator of twice PartitionBytes for it:
// it decodes each worker's part, folds it in float32 and encodes the
// result once, which every worker decodes (the same bits everywhere). A
// worker encodes a partition just before the window sends it. Workers
// whose formats differ fail the round with an error naming the wire
// format; a hub that answers in another format than asked is a lost hub.
//
// # Failure
//
// A worker's connection that breaks without a goodbye is a lost worker:
// by default every request from then on fails with an error naming it
// (errors.Is(err, transport.ErrPeerLost)); with HubConfig.Elastic the
// worker is removed instead. A hub whose connection breaks, or that says
// nothing for ClientConfig.HubTimeout while it owes an answer, fails the
// client with a HubLostError naming it. Bad requests get errors (ErrUnknownKey,
// ErrShape, ErrClock, ErrBadRequest, ErrCorrupt) and never stop the hub.
package ps
