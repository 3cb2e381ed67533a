// Package transport is the interface gorun's collective algorithms move
// framed messages through, and the vocabulary its implementations share:
// Transport, the Frame a receive returns (NewFrame, Release), the Header
// every frame carries and its Type, the errors callers branch on
// (ErrPeerLost, ErrSizeMismatch, ErrClosed, ErrAuth, ErrAborted, and the
// Code an abort carries across the wire), the Mux that hands each stream
// of a peer's frames to its own reader, WaitMeter, and the pool of payload
// buffers (GetBuf, PutBuf). It holds no implementation; each lives in a
// package of its own beside it:
//
//   - transport/tcp: the rank mesh, one authenticated TCP connection per
//     pair of ranks that talk, through shared memory for pairs on one
//     host;
//   - transport/mem: the in-memory network, for tests of algorithms and
//     of users' own training loops;
//   - transport/wire: the frame codec and the handshake, shared by the
//     mesh and by ParamHub's links (package ps);
//   - transport/shm: a net.Conn over shared memory, ParamHub's links
//     between processes on one host;
//   - transport/liveness: when the mesh counts a peer as lost or gone.
//
// # Contract
//
// The algorithms (ring, ps, collective) call a Transport; the launcher
// never does. Send may be called from several goroutines, Recv by one
// goroutine per peer at a time. Send's payload is the caller's again when
// Send returns. A received Frame's payload is the caller's until it calls
// Release, and the frames of one peer are released in the order they
// were received: the payload may lie in shared memory, in the sender's
// ring, until then. Frames between two ranks arrive in the order sent.
//
// Failure is world-wide: once any peer is lost, or any rank aborts,
// every pending and later Send and Recv fails with an error that names
// the rank (a PeerLostError, or a RemoteError for another rank's abort).
// An elastic transport (tcp.Config.Elastic, mem.Network.Elastic) instead
// loses the one peer: calls that wait on it or send to it fail with its
// PeerLostError, the rest go on, and Losses tells who is gone.
//
// # Streams within a peer's frames
//
// Several collectives (of one communicator or of several) and
// point-to-point messages may be in flight between two ranks at once.
// Each frame names its stream: Comm is the communicator (0 for the job's
// own; collective.Comm.Split's children have their own ids, the same on
// every member), with ChanP2P set for a point-to-point message, and Seq
// is the collective's number in its communicator or the message's tag. A
// Mux over a Transport hands each (Comm, Seq) stream its own frames in
// the order sent: a lone reader gets the frame as it lies (in shared
// memory, say) and keeps the connection until it releases it, so frames
// are still released in the order they arrived; a frame of another
// stream is copied, released and queued for its reader.
package transport
