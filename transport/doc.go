// Package transport moves framed messages between the ranks of a job. It is
// the leaf the algorithms build on: a small Transport interface, a TCP
// implementation with an authenticated handshake, and an in-memory one for
// tests of algorithms and of users' own training loops. The TCP transport
// moves the data of pairs on one host through shared memory (shm.go).
//
// Failure is world-wide: once any peer is lost, or any rank aborts, every
// pending and later Send and Recv fails with an error that names the rank.
//
// # Wire format
//
// Every integer on the wire is little-endian. A TCP connection between two
// ranks carries, in order: the handshake, the connection's setup (a shared
// memory offer and answer, then a ready frame), and then frames until it
// closes. ParamHub's links (package ps) use the same handshake (DialAuth,
// AcceptHandshake), the same offer and answer (OfferShm, AnswerShm) and
// the same frame header.
//
// # Frames
//
// A frame is a 32-byte header (HeaderSize) followed by Len bytes of
// payload:
//
//	offset size field
//	0      2    magic 0x6772 (the bytes 0x72 0x67)
//	2      1    Type (TypeData = 1 ... TypeReady = 8)
//	3      1    DType: element type of the collective
//	4      1    Op: reduction op
//	5      1    Kind: which collective
//	6      2    reserved, must be 0
//	8      4    Seq: the collective's number on its Comm, equal on every rank
//	12     4    Step: step and segment within the collective (abort: origin)
//	16     8    Count: elements in the sender's buffer for this collective
//	24     4    Len: payload bytes that follow
//	28     4    Comm: communicator id (0: the job's), top bit set for a
//	            point-to-point message (Seq is then its tag)
//
// A reader rejects (ErrFrame) a header with another magic, a type of 0 or
// past the last one, reserved bits set, or a Len over its cap, before it
// allocates anything: the cap is Config.MaxPayload (DefaultMaxPayload, 64
// MiB, by default) for a rank's connections, and 4 KiB for the frames of a
// connection's setup. Send refuses a payload over MaxPayload. A rank whose
// peer sends a malformed frame counts the peer as lost. The transport's
// control frames (all but TypeData) carry zeros in DType through Count,
// except Step in an abort.
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
//
// # Handshake
//
// Every connection, whoever dials it, starts with a handshake, bounded as
// a whole on both sides (by Config.HandshakeTimeout between ranks):
//
//	dialer   -> hello   "GORUNHS" (7 bytes), version (1 byte, ProtocolVersion),
//	                    from, to, size (uint32 each), port (uint16: where the
//	                    dialer listens for its peers, 0 for none), job id
//	                    length (1 byte, at most 64), job id, nonceD (16
//	                    random bytes)
//	acceptor -> reply   status (1 byte), nonceA (16 random bytes), macA (32 bytes)
//	dialer   -> proof   macD (32 bytes)
//	acceptor -> status  (1 byte)
//
// The macs are HMAC-SHA256 keyed with the job secret, over a role byte,
// the job id, from and to (uint32 each), port (uint16) and both nonces,
// the other side's first:
//
//	macA = HMAC(secret, 'A' || job || from || to || port || nonceD || nonceA)
//	macD = HMAC(secret, 'D' || job || from || to || port || nonceA || nonceD)
//
// The port tells a restarted process's connection from its old process's
// on the same host (Revive).
//
// So each side proves that it knows the secret without sending it, each
// proof covers the other side's fresh nonce (a recorded handshake cannot
// be replayed), and the role byte keeps one side's proof from serving as
// the other's. The macs do not cover the version or the size.
//
// The acceptor checks the hello before any secret is proven, and refuses
// it with a reply whose status is not 0 (nonceA and macA are then zeros)
// before it closes the connection. The status codes (ONLY APPEND):
//
//	0 ok
//	1 protocol version mismatch
//	2 different job id
//	3 rank numbers out of range (a rank: to is not its rank, size not its
//	  size, or from not another rank of the job)
//	4 wrong job secret (only in the final status)
//	5 duplicate connection (the pair is connected, or this rank's own
//	  dial to the peer wins: see connect.go)
//
// A hello that does not start with "GORUNHS", or whose job id is longer
// than 64 bytes, is malformed: the acceptor closes the connection without
// a reply.
//
// A wrong secret, on either side, fails the handshake with ErrAuth and no
// byte after it is read. With honest peers the dialer finds it first: macA
// does not match the secret it knows, so it hangs up without sending its
// proof ("its proof of the job secret does not match (wrong job
// secret?)"), and the acceptor, which then reads no proof, drops the
// connection. A dialer that sends a proof that does not match gets status
// 4 and the acceptor fails the handshake with ErrAuth. A rank whose dial
// to a peer is refused for any reason but status 5 counts that peer as
// lost, with the refusal as the reason; status 5 makes it wait for the
// peer's own connection instead.
//
// # Setup and shared memory
//
// After the handshake the dialer of a rank pair offers shared memory when
// its placement puts the peer on its host or does not say (Peer.Host
// unknown), and the acceptor answers; the dialer then sends TypeReady.
// Pairs on hosts known to differ exchange TypeReady alone:
//
//	dialer   -> TypeShmOffer   (omitted when the peer is on another host)
//	acceptor -> TypeShmAnswer  (omitted likewise)
//	dialer   -> TypeReady
//
// The offer's payload is three strings, each a uint16 length and its
// bytes (host key, segment path, reason), then the ring capacity as a
// uint32. A path of "" declines, with the reason (shared memory off on
// the dialer, an earlier offer to this peer timed out, the segment could
// not be made, no shared memory on this platform). The host key is
// Config.HostKey (or the hostname), "/" and the kernel's boot id. Before
// it sends the offer, the dialer creates the segment: a file in ShmDir,
// mode 0600, named "gorun-" (ShmPrefix), the job id, "-", the dialer's
// and the acceptor's ranks joined by "_", "-" and 32 random hex digits
// (in the job id, every byte but ASCII letters, digits and "_" becomes
// "_"), with every page reserved, holding two rings of the offered
// capacity: the first carries the dialer's frames to the acceptor, the
// second the acceptor's back (see shmring.go for their layout).
//
// The acceptor maps the segment only if shared memory is on for it, the
// offer has a path, the host keys are equal, the capacity is a power of
// two from 4 KiB to 1 GiB, the path is in its own ShmDir and named for
// this job, and the file is a regular file (not a symbolic link) of this
// user, mode 0600, of exactly the size of two such rings; once it has
// tried to map the file it removes its name. Its answer's payload is an attached byte (1 if
// it mapped the segment, else 0), a same-host byte (1 if the offer's host
// key is its own, also when it did not map the segment), and the reason
// it did not map it, as the rest of the payload. The dialer removes the
// segment's name when the answer comes, and unmaps the segment if it was
// not mapped.
//
// The dialer writes the offer, reads the answer and writes TypeReady each
// within Config.HandshakeTimeout, and uses the connection once TypeReady
// is sent; the acceptor waits for each of its frames up to 2 ×
// HandshakeTimeout + DialTimeout, answers, and uses the connection once it
// has read TypeReady (any other frame there drops the connection). No data
// frame can therefore race the switch to shared memory. An offer whose
// exchange fails (no answer in time, say) closes its connection and
// removes the segment; the dialer warns once and dials again, declining
// shared memory to that peer from then on.
//
// A pair that mapped the segment sends its data frames through the rings,
// never the socket; the connection stays for aborts, goodbyes, pings and
// pongs, and its end still means the peer is gone. Setup frames that
// arrive after the setup are ignored.
//
// Hub links (OfferShm and AnswerShm) always exchange the offer and the
// answer, also when shared memory is off (the offer then declines), each
// step within ShmOptions.Timeout (DefaultShmTimeout), and send no
// TypeReady. The offering side also creates two FIFOs beside the segment
// (its name with -bell0 and -bell1; mode 0600), which the answering side
// opens only if each is a FIFO of this user's with that mode: bell 0
// wakes the answering side, bell 1 the offering side, with one byte each
// time a side moves a ring the other sleeps on. Once the segment is mapped
// the stream's bytes go through the rings, and nothing more is sent on
// the socket: its end means the peer is gone.
//
// # Goodbye, abort, ping
//
// TypeBye, with no payload, is what Close of a healthy transport sends
// every connected peer (each within Config.ByeTimeout) before it
// half-closes the connection. A peer reading a goodbye half-closes its
// side in turn, and Close waits for that (within Config.LingerTimeout)
// before it closes the connection: closed with frames unread, the kernel
// would reset it and drop what the peer had not yet read (peers that kept
// it waiting the whole LingerTimeout are named in the log, at level Info).
// A peer that said goodbye has left: the end of its connection is not a loss, and a
// Recv from it fails (ErrPeerLost) once its frames are used up. When
// gossip declares a connected peer dead and a ping finds its connection
// broken, the reader first gets the confirmation window to read what is
// left on it: a goodbye there makes the peer one that left, not lost. A connection that ends, or breaks, without
// a goodbye makes its peer lost, unless the transport fails otherwise
// within Config.ExplainWait (a peer that exits because of another rank's
// failure sends that failure first, in an abort).
//
// TypeAbort's payload is one Code byte and the error's text (at most 4000
// bytes); an empty payload is CodeOther, "no reason given". The codes
// (ONLY APPEND):
//
//	0 CodeOther     anything else
//	1 CodeMismatch  the ranks disagree on a collective (ErrSizeMismatch)
//	2 CodePeerLost  a peer is lost (ErrPeerLost)
//	3 CodeCanceled  a context was cancelled (IsCanceled)
//	4 CodeClosed    the rank closed its transport (ErrClosed)
//
// The receiver fails with a RemoteError that names the rank that aborted
// and matches ErrAborted, and ErrSizeMismatch or ErrPeerLost for codes 1
// and 2. An abort's Step is 0 when its sender is that rank, else that
// rank + 1: a rank that fails on an abort passes it on, once, to every
// connected peer but the one it came through (within
// Config.NoticeTimeout), so that it reaches ranks with no connection to
// its origin. Aborts are sent by Abort (to every connected peer, within
// Config.AbortTimeout), when a peer is found lost (a PeerLostError, to
// every other connected peer, within NoticeTimeout), and by Close of a
// failed transport in place of the goodbye (within ByeTimeout).
//
// TypePing and TypePong carry no payload. A rank pings a connected peer
// that gossip declared dead (unless ConfirmTimeout is 0, which trusts
// gossip at once); the peer's reader answers with a pong (both are
// written with no deadline: a write cut short would leave half a frame in
// the stream), and a peer that does not answer within
// Config.ConfirmTimeout (stretched on an overloaded host) is lost, unless
// frames came from it meanwhile (or wait for room in this rank's inbox
// from it: its pong is behind them): then it is asked again, window after
// window, until it answers or sends nothing for a window. Its connection
// ending without a goodbye while it is asked confirms the verdict at once.
//
// # Liveness
//
// When a peer is lost or has left is decided by one state machine,
// package liveness (transport/liveness), whose documentation lists every
// rule: the mesh steps it with what it sees (a connection made, a
// goodbye, a pong or the end of a connection read, a failed send or
// ping, gossip's verdict or word of a goodbye, a dial's start and
// failures, the job failing, Close, Revive, time passing) and carries out
// its actions (ping, probe, fail the job or drop the peer, say it left).
// Lost and Losses report what it decided.
package transport
