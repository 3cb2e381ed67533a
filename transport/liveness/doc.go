// Package liveness decides when a rank's peers are gone: lost (died,
// cut off, silent) or left (said goodbye). It is a pure state machine,
// after raft's core: the transport feeds it events (a frame's progress, a
// connection's end, a goodbye, gossip's verdict, a pong, a failed dial,
// time passing) and carries out the actions it returns (ping, sample a
// reader, probe, declare a peer lost or left). It starts no goroutine,
// reads no clock, touches no socket and logs nothing, so each of its
// rules is a row of a table test that runs in microseconds
// (testdata/*.txt), and the races the transport met at 256 ranks on 2
// cores are cases of those tables.
//
// # Using it
//
// One Machine per transport. Its owner (the TCP mesh):
//
//   - steps every event with the time it happened (its own clock: Step
//     takes the time, and time never goes back), under its own lock; Step
//     is not re-entrant, so the actions are carried out after it returns,
//     in order, outside the lock;
//   - arms one timer at Deadline after each Step and steps a Tick when it
//     fires;
//   - answers every Sample at once with a Progress for that connection
//     (the frames its reader has read, and whether the reader waits for
//     room in this rank's inbox): the machine decides what a window found
//     only on that Progress;
//   - writes a Ping with no deadline (a write cut short leaves half a
//     frame in the stream) and steps PingFailed if it fails; steps Pong
//     when one is read;
//   - for a Probe, dials and runs the handshake within its Timeout, then
//     steps ProbeDone with its Seq, Answered for any answer to a probe,
//     and for a knock (Probe.Knock: the peer is connected) only for the
//     peer's refusal of the connection as a duplicate;
//   - numbers its connections (ConnID, never reused) and says which
//     generation of the peer each was made for (Gen when its dial began,
//     or when it was accepted);
//   - steps Failed when the job fails otherwise (another rank's abort,
//     Abort, a corrupt ring), and Closing when Close begins; stepping
//     Failed for a failure the machine asked for (FailJob) is harmless.
//
// And for each action: DeclareLost is recorded by the machine (Lost); the
// owner tells its subscribers (the fan-out that replaces polling Lost),
// then fails the job (FailJob: an abort to every other connected peer,
// then the job's error), drops the peer (DropPeer: an elastic job's calls
// on it fail, OnPeerLost is called), or only tells (RecordOnly).
// DeclareLeft marks the peer left (its Recv fails once its frames are
// used up). Kept, AskAgain and Doubt are log lines (LogMessage gives
// today's wording; Doubt also wakes callers waiting to connect).
//
// # The rules
//
// A peer's process (a generation; Revive starts the next) is Live until it
// is Left or Lost, and never both: whatever ends it first wins, and
// nothing about it is news afterwards.
//
// Goodbye and breaks:
//
//  1. A goodbye read on the peer's connection makes it Left; every frame
//     before it was read.
//  2. A connection that ends (ReadEnded) or fails a send (SendFailed)
//     without a goodbye is a break: after ExplainWait the peer is lost
//     ("connection lost: EOF", "sent a malformed frame: ...", "send
//     failed: ..."), unless the job fails meanwhile (a peer that exits on
//     another rank's failure sends that failure first, in an abort, and
//     the abort names the rank that failed first). A break after the job
//     failed is explained by it. ExplainWait 0 blames at once, failed job
//     or not. The first break's reason stands.
//  3. The first loss fails the job (FailJob); the breaks it causes on
//     other connections are explained by it. In an elastic job a loss is
//     the peer's alone (DropPeer), and others' breaks still blame them.
//     Once the job failed, losses are only recorded (RecordOnly): Lost
//     keeps saying who is gone.
//
// Gossip's verdict (a rank starved of CPU misses gossip's probes; gossip
// can be wrong):
//
//  4. ConfirmTimeout 0 trusts gossip: the peer is lost at once with
//     gossip's reason (a peer with no connection and no WatchAll aside:
//     rule 10).
//  5. A connected peer is pinged, and its reader sampled. A pong to any
//     ping of this check (not one left from an earlier check) keeps it
//     (Kept). With no pong a quarter of the way into the window, it is
//     knocked on (a Probe with Knock, within half the window: does its
//     process refuse a second connection as a duplicate, as a process
//     that runs and holds this rank's connection does?); only the answer
//     to this check's latest knock counts. A window (Policy) with no pong
//     and no frames read from it, its reader not waiting on a full inbox,
//     and no answer to the knock, loses it ("..., and no answer on its
//     data connection for 1s, nor to a connection").
//  6. A window with frames (any read of the connection that returned
//     data), or with the reader waiting on a full inbox,
//     proves nothing either way: its pong may be behind its data. It is
//     asked again (AskAgain, once), window after window, until it answers
//     or sends nothing for a window. A stopped process sends nothing.
//     Nor does a window in which this rank itself was kept from running
//     for a quarter of it or more (Progress.Stall, its goroutines'
//     longest wait for a CPU, or how late the window's end was stepped):
//     the answer may wait unread in this rank's socket, and a peer in the
//     same process, or on a host as busy, waited as long. Nor does a
//     window at whose end this rank's ping was still being written
//     (Progress.Writing: its write waits behind another, or for room the
//     peer has not read), unless the peer's process left its knock
//     unanswered (then the ping waits on a peer that reads nothing, as a
//     stopped one does), or whose knock has not come back (this rank's
//     dial waits for a CPU). Nor does a knock unanswered after less than
//     four times this rank's longest stall in the window (a knock has half
//     the window): a peer in the same process, or on a host as busy, may
//     have waited as long to answer; the next window is at least eight
//     times the stall, so that its knock has four. The peer is asked
//     again (AskAgain{Starved}), in a window at least four times the
//     stall (eight after such a knock), until MaxStretch ×
//     ConfirmTimeout has passed since it last sent anything (or the
//     verdict); a loss then says what this rank saw of itself ("this rank
//     stalled up to 400ms", "its ping still being written", "its knock
//     not back").
//     Nor does a window whose knock the peer's process answered: it runs,
//     and its own reader may wait for room in its own inbox (its
//     collectives behind this rank's), the ping unread behind what it
//     waits to deliver, so that it sends nothing. It is asked again
//     (AskAgain{Running}), window after window, until it answers, its
//     process stops answering too, or MaxStretch × ConfirmTimeout has
//     passed since it last sent anything (or the verdict): a process
//     whose data connection alone is cut off, its listener still
//     reachable, is lost then. A stopped process answers nothing.
//  7. If the ping cannot be written (PingFailed), or a send already
//     failed, the connection is broken: a peer that said goodbye and
//     exited breaks the ping too, and its goodbye may still wait to be
//     read behind its data. The reader gets a window, and another while
//     it makes progress or waits on a full inbox; a goodbye makes the
//     peer Left (rule 1); a reader that stands still for a window loses
//     it ("..., and its data connection is broken").
//  8. While a verdict is checked, the connection ending without a
//     goodbye confirms it at once (two witnesses), with that wording; so
//     does a verdict on a connection whose reader has already ended.
//  9. One check at a time: a verdict while one runs, or on a peer gone
//     already, changes nothing. A peer kept may be declared dead again
//     and is checked anew. Gossip declares a peer dead once (it neither
//     probes a dead node nor declares it dead again), so a verdict stands
//     until gossip holds the peer alive again (GossipAlive: its process
//     refuted the verdict, or rejoined), and a peer kept meanwhile is
//     checked again four of its check's windows after it was kept: a
//     process that stopped just after it answered, before its gossip
//     refuted the verdict, is still lost. Revive ends the verdict.
//  10. A peer with no connection, without WatchAll: the verdict fails
//     nothing (a rank that finished and left is no reason to fail; a
//     death reaches everyone through the ranks connected to it). It is
//     remembered (Doubt), and connecting is the check: a connection keeps
//     it (Kept), and failed dials (not those refused as a duplicate, nor
//     a timed-out shared memory offer) lose it once a window has passed
//     since the first ("..., and connecting to it failed for 1s: ..."),
//     not after ConnectTimeout. The window stretches with this rank's
//     own longest stall during those dials (DialFailed.Stall), to at
//     least four times it, as rule 6's does: a handshake that timed out
//     while this rank waited for a CPU says nothing of the peer ("...
//     (this rank stalled up to 2s)"). A dial the peer answered before
//     the handshake broke off (DialAnswered: its reply came, then the
//     connection was cut or timed out) is life, whatever this rank's
//     stall: the peer's process ran after the verdict, and the window
//     starts again from the answer. ConnectTimeout's clock (rule 15)
//     still runs beside it.
//  11. With WatchAll, a peer with no connection is probed: any answer to
//     a hello (a refusal too) or a connection keeps it; no answer within
//     the window, or a failed dial, loses it ("..., and it did not answer
//     a connection for 1s").
//  12. The window is the Policy's: a pure function of what was observed
//     (Observation: the host's load, the round, the frames of the last
//     window, the inbox, the last ping's round trip, the time since the
//     check began, this rank's own longest stall). DefaultPolicy
//     stretches ConfirmTimeout by the host's overload (runnable tasks per
//     CPU over 2), and to at least four times the stall, up to
//     MaxStretch times.
//     The rule that tells a starved rank from a dead one goes here.
//
// Leaving, by gossip:
//
//  13. Gossip's word that a connected peer left changes nothing: gossip
//     can overtake the peer's last frames, and its goodbye on the
//     connection, after its data, is the one that counts (rule 1).
//  14. A peer with no connection that gossip says left is Left once
//     ConfirmTimeout (not stretched) passes with no connection: one may
//     be on its way (it connected, sent and closed before this rank
//     accepted). A connection that comes meanwhile leaves it to its own
//     goodbye.
//
// Connecting:
//
//  15. A pair that does not connect within ConnectTimeout of the first
//     dial loses the peer ("no connection to it within 30s (last error:
//     ...)"). On an overloaded host the window stretches with the load
//     at its end, as a confirmation window does (at most 4 times). A
//     later dial does not restart the clock; the peer's refusal of one as
//     a duplicate does (it is dialing this rank, under its own clock).
//     Neither takes a pair past 4 times ConnectTimeout from its first
//     dial. Once the job failed the clock stops.
//  16. A dial refused by the handshake's job or secret check (DialAuth)
//     loses the peer at once ("refused this rank's connection: ...").
//
// Generations (an elastic job's Revive):
//
//  17. Revive gives the peer a new generation: Live, not in Lost, every
//     check, break, wait and clock of the old process dropped. Events
//     about the old process's connection, and dials and probes begun for
//     it, change nothing; a connection made for it is ignored. A loss of
//     the new process is news again (DropPeer again).
//  18. Revive with Keep keeps the current connection as the new
//     process's (it connected before this rank heard of it), with its
//     counts; a broken one is never kept; a goodbye already read on it
//     makes the new process Left.
//
// Closing:
//
//  19. Once Close begins (Closing), connections ending are expected and
//     nothing more is decided: no action comes.
//
// # Guarantees
//
// The tests hold the machine to these, over random event streams (and a
// fuzz target) and over a model of peers whose truth is known:
//
//   - Step never panics, whatever the events (peers outside the job,
//     stale connections and generations, time going back).
//   - A generation of a peer ends at most once: lost or left, never both.
//   - The job fails at most once, never in an elastic job, and after it
//     failed every loss is RecordOnly. Status and Lost agree.
//   - A peer that answers every ping within a window, however long its
//     frames wait on this rank's full inbox, is never lost; one whose own
//     reader waits on its own full inbox while its process answers
//     connections is not lost before MaxStretch × ConfirmTimeout (two
//     minutes by default) has passed since it last sent (rule 6).
//   - A connected peer that falls silent (no frames, no pongs, no answer
//     to a connection) is lost within two windows of gossip's first
//     verdict after it fell silent (one window if it was silent when the
//     check began), when this rank was not itself starved; within
//     MaxStretch × ConfirmTimeout of the verdict when it was.
//   - After Revive, nothing about the replaced process loses its
//     successor.
//   - Deadline is always after the last Step's time.
package liveness
