// Package collective is the Go API that training code embeds: MPI-style
// collectives (Barrier, Broadcast, Reduce, AllReduce, AllGather,
// ReduceScatter, AllGatherV, Gather, Scatter, AllToAll, AllToAllV and
// Exchange), fused groups (GroupAllReduce, Bucketer), sub-communicators
// (Comm.Split) and tagged point-to-point messages (Send, Recv) between the
// ranks of a job started by gorun. Every collective has a nonblocking
// Start form that returns a Handle.
//
// # Lifecycle
//
// A rank calls Join once; it reads the environment gorun set and finds
// every other rank by gossip. It connects to a peer (one authenticated TCP
// connection a pair) the first time it has something to send there, so a
// rank holds connections to the peers its collectives talk to, not to the
// whole job. A pair on one host then also sets up shared memory
// (Config.Shm, on by default) and moves its data through it; the TCP
// connection stays for liveness and failure reports.
// New does the same from an explicit Config, without the launcher, and
// NewLocal makes n ranks connected in memory, for tests. Close leaves the
// job; it is idempotent.
//
//	c, err := collective.Join(ctx)
//	if err != nil { ... }
//	defer c.Close()
//	grads := make([]float32, n)
//	err = collective.AllReduce(ctx, c, grads, collective.Avg)
//
// # The contract
//
// Every rank must issue the same collectives, in the same order, with the
// same element type, op and root, and buffers of the same length (for
// AllGather: the same send length). gorun checks this on every frame: a
// rank that disagrees makes every rank's call fail with ErrSizeMismatch,
// instead of corrupting memory or hanging. (A rank that only sends in a
// call, such as a Broadcast root, may return before its peers notice; its
// next call then fails with the same error.)
//
// Buffers belong to the caller. A collective reads and writes buf only
// while the call runs, and does not keep it afterwards; the caller must not
// touch it during the call. Reduce and ReduceScatter use the parts of buf
// they do not return as scratch.
//
// A Comm is safe for use from several goroutines. Its collectives take
// their place in the Comm's order when they are called (a blocking call)
// or started (a Start form); every rank must start the same collectives
// in the same order, so issue them from one goroutine, or order them
// yourself.
//
// # Nonblocking collectives
//
// StartAllReduce, StartBroadcast, StartReduce, StartAllGather,
// StartReduceScatter, StartAllToAll, StartAllToAllV, StartGather,
// StartScatter, StartAllGatherV, StartGroupAllReduce and
// Comm.StartBarrier start a collective and return at once with a Handle:
// Wait(ctx) waits for it and returns its error, Test polls, Done is a
// channel for select, and WaitAll waits for several. A blocking call is
// its Start form followed by Wait.
//
//	h := collective.StartAllReduce(ctx, c, grads, collective.Avg)
//	... backward of the next layers ...
//	if err := h.Wait(ctx); err != nil { ... }
//
// The buffers of a started collective belong to it until its handle is
// done: the caller must not read or write them before Wait returns. Under
// the ring strategy several collectives of one Comm are in flight at
// once, each on its own frames (the frame header carries the
// communicator and the collective's number, and transport.Mux hands each
// collective its own), so a later small one is not held behind a large
// one on the wire; their handles complete in the order they were
// started. Under the hub strategy, and on an elastic Comm, they run one
// at a time in that order. A collective's own context is the one it was
// started with; a Wait whose context ends returns that error and leaves
// the collective running.
//
// A failure ends every outstanding handle: a lost peer (each fails with
// ErrPeerLost naming it, within the same seconds as a blocking call),
// Close (ErrClosed), the collective's context ending (the Comm breaks, as
// below), and on an elastic Comm a view change: once a collective
// returns ErrViewChanged, every nonblocking collective that comes up
// before the program's next blocking call (its Resync) fails with
// ErrViewChanged too, without moving data, so that every rank drops the
// whole interrupted step however far it got.
//
// # Fusion
//
// GroupAllReduce reduces many buffers of one type and op as one
// collective on the wire (Tensor Fusion). A Bucketer does what DDP's
// Reducer does for a training loop: gradients in buckets in reverse
// parameter order (a 1 MiB first bucket, 25 MiB after, BucketConfig),
// each bucket's all-reduce started as soon as its gradients are Ready
// and every bucket before it has started, rebuilt after the first step in
// the order the gradients became ready on rank 0; Stats and the timeline
// show each bucket's exposed (not overlapped) communication time.
//
// # Sub-communicators
//
// Comm.Split(ctx, color, key) makes children, one per color, ranks
// ordered by key: collective over the parent, with no new connections,
// rendezvous or gossip. A child has its own Rank, Size, order and
// handles; children, their siblings and the parent may run collectives at
// the same time from different goroutines. Node-aware algorithms and
// Hosts work in a child. A child runs the ring strategy even when the
// parent runs the hub one. Close releases a child. A failure in a child
// breaks the job's transport as in the parent; on an elastic job a view
// change invalidates every child with ErrViewChanged: split again after
// the Resync. Comm.CreateGroup(ctx, ranks, tag) makes one child that only
// its members call, each with the same ranks and tag (MPI_Comm_create_group;
// torch.distributed's new_group goes through it); members that disagree
// fail with ErrSizeMismatch.
//
// # Exchanges and point-to-point
//
// AllToAll (equal blocks; Bruck's algorithm for small blocks from 8
// ranks, pairwise exchange otherwise) and AllToAllV (per-peer counts
// known on both sides; Exchange when a rank knows only what it sends)
// check every block's length on arrival: counts that disagree fail every
// rank with ErrSizeMismatch naming the two ranks. Gather and Scatter run
// down a binomial tree, AllGatherV over the ring. Under the hub strategy
// these have no hub round and run over the rank mesh, as under ring.
//
// Send(ctx, c, buf, to, tag) and Recv(ctx, c, buf, from, tag) are not
// collective: they take no place in the Comm's order and never mix with
// its collectives. Messages from one rank to another with one tag arrive
// in the order sent; tags are independent. Send returns once buf is
// handed to the transport; Recv's buf must have the message's length,
// else it fails with ErrSizeMismatch. A Recv wakes when its peer is lost,
// the Comm closes or ctx ends. RecvAny(ctx, c, buf, tag) is a Recv from
// whichever rank sends first (MPI_ANY_SOURCE) and returns that rank; it
// wakes when any rank is lost.
//
// # Failure
//
// Every call takes a context and also wakes when a peer is lost. Errors
// name the rank and the step, and wrap these sentinels:
//
//   - ErrPeerLost: a peer's process died (its connections broke: seen in
//     about 0.3 s), stopped answering (a stopped or cut-off rank: gossip
//     suspects it and an unanswered ping on its data connection confirms
//     it, about two seconds), or closed its Comm while it was still needed.
//   - ErrSizeMismatch: ranks disagree on the collective, as above.
//   - ErrAborted: a peer gave up the collective, for example because its
//     context was cancelled; its reason is in the message.
//   - ErrClosed: this Comm was closed, also under a call blocked in another
//     goroutine or waiting for its turn (ring and hub strategies alike).
//   - ErrAuth: a connection failed its job or secret check while joining.
//
// Any error breaks the Comm for good: the rank that sees it first tells
// every peer, so all of them return promptly, and every later call returns
// the same error. Close the Comm; a job usually exits, and gorun then ends
// the remaining ranks.
//
// # Elastic jobs
//
// With Config.Elastic (gorun --elastic, ring strategy) a lost rank does
// not end the job. gorun's launcher is the one sequencer of the
// membership: it learns of a death from the process's exit, fences a rank
// that a peer suspects (a frozen one) by killing it, and sends every
// survivor the new view (View: an epoch and the live ranks). Gossip's
// opinions never decide it. Every survivor then gets ErrViewChanged
// exactly once per change: from the collective the change interrupted,
// or, on a rank that had already finished that one, from its next call,
// which moves no data. Nothing of that collective's result can be
// trusted, and ranks may disagree on how far they got, so the program
// takes its state from one survivor and goes on:
//
//	for step := 0; step < steps; step++ {
//		err := collective.AllReduce(ctx, c, grads, collective.Avg)
//		if errors.Is(err, collective.ErrViewChanged) {
//			state := []float64{float64(step)} // with the weights, the optimizer...
//			if err := collective.Resync(ctx, c, state); err != nil {
//				return err
//			}
//			step = int(state[0]) - 1 // redo that step on the new view
//			continue
//		}
//		...
//	}
//
// Resync is a Broadcast from the view's first rank that holds the state,
// repeated if the view changes again under it. ResyncBytes does the same
// for state whose length only its holder knows (a serialized checkpoint).
//
// With gorun --max-restarts a lost rank is started again, with the same
// rank number and Restarts() = k on its k-th restart. Its Join waits for
// the current view's ranks, tells gorun it is ready, and returns in the
// next view, which holds it (View.Joined names it); the survivors get
// ErrViewChanged at that change, as at a loss, and the restarted rank
// from its first collective. The same loop as above then brings it in:
// its Resync takes the state from a survivor (a restarted rank holds none
// until its first Resync finished), and it trains on from there. A rank
// that gorun fenced comes back only this way, as a new process; its old
// connections are dropped, and the epoch keeps its old frames out.
//
// Afterwards Size is the number of ranks in the view (an Avg divides by
// it; JobSize stays the job's), Rank stays the job's rank, roots are job ranks that must be in the
// view, and AllGather's recv holds Size blocks in the view's rank order.
// Every frame carries its epoch, and the frames of an interrupted
// collective are dropped, so they never mix with the next one's. A
// failure that a view change does not explain (a length mismatch, a
// cancelled context) breaks the Comm as above, and so does waiting longer
// than Config.ViewTimeout for the view after a loss. NewLocalOn with
// Config.Elastic makes an elastic job in memory, for tests: a
// mem.Network.Kill is a death.
//
// # Algorithms
//
// The ring strategy runs AllReduce as a pipelined ring (reduce-scatter then
// all-gather), which moves 2(N-1)/N of the buffer per rank. While the
// buffer is small for N (at most N × 32 KiB on a power of two from 4
// ranks, N × 8 KiB from 8 ranks otherwise) it runs recursive halving and
// doubling instead (Algorithm Halving), which moves the same bytes in
// about 2·log2 N steps instead of 2(N−1). Buffers up to
// Config.SmallBytes take fewer, smaller steps: recursive doubling (log2 N
// rounds of one message) when N is a power of two from 4 up, else a
// one-round direct exchange. When the job spans several hosts with the
// same number of ranks (at least two) on each, larger all-reduces run
// node-aware: a reduce-scatter among each host's ranks, an all-reduce of
// each slice across the hosts (by halving and doubling on the same terms
// for the number of hosts), an all-gather on each host (Algorithm
// Hierarchical; Ring forces the flat ring). Large ReduceScatter and
// AllGather calls are node-aware on such layouts too: their cross-host
// stage runs between the ranks at the same place on every host. Results are bitwise identical
// on every rank. Reduce is an AllReduce whose result non-root ranks
// discard.
//
// The hub strategy (Config.Strategy "hub", GORUN_STRATEGY=hub, gorun
// --strategy hub) runs every collective through ParamHub (package ps):
// each rank sends its buffer, cut into partitions of at most
// Config.HubPartitionBytes (smaller for a round that would otherwise give
// a hub few of them: about Config.HubRoundPartitions per hub, none below
// 64 KiB, and in a job on one host none below 512 KiB/K) spread over the
// hubs, Config.HubWindow in flight per hub reached over the network, and
// receives the result. The hubs are dedicated
// processes (gorun --hubs K, Config.Hubs) or run inside ranks
// 0..ColocatedHubs-1; a rank and a hub on one host talk through shared
// memory (Config.Shm). A hub folds the ranks' parts in rank order, so the
// result is the same bits on every rank and for any number of hubs. The
// contract above holds unchanged; in addition a lost hub fails every rank
// with ErrPeerLost naming the hub, and Comm.Hub gives the hub client for
// keyed push and pull beside the collectives. SetStrategy switches between
// ring and hubs at the same point on every rank. A rank that hosts a hub
// waits in Close until every rank has closed its Comm (at most
// Config.CloseTimeout, 30 s by default), as MPI_Finalize does, so that no
// rank loses its hub early; Close on any other rank takes at most about
// 2 s. Calls on one Comm run one at a time: a call from another goroutine
// waits for its turn, its context and Close.
//
// Under gorun, a Comm also tells the launcher what it is doing, for the
// stall inspector (--stall-warn), the goroutine dumps before a kill, and
// the timeline (--timeline): which collective it is in goes to a status
// page its host's agent reads (Config.StatusFile); with --timeline every
// collective and every Span is recorded in memory and written at Close
// (Config.TimelineFile), so a rank that exits without Close leaves no
// timeline. Each collective's record says how long the rank was blocked
// for its peers' data (waiting) and the rest (moving data). The page costs
// a few atomic stores per call, the timeline two clock readings and a
// record.
package collective
