// Package wire is the frame and handshake kit of gorun's connections: the
// frame codec (PutHeader, AppendFrame, Reader), the handshake that every
// connection starts with (DialHandshake, AcceptHandshake, DialAuth, and
// the mesh's own AcceptHello), and the accept loop of a listener
// (AcceptLoop). The rank mesh (transport/tcp) and ParamHub's links
// (package ps) speak it; it has no state, no goroutines of its own (but
// AcceptLoop's) and no notion of a peer's liveness: a malformed frame or
// handshake is an error (ErrFrame, ErrAuth) for its caller to act on.
//
// # Wire format
//
// Every integer on the wire is little-endian. A TCP connection between two
// ranks carries, in order: the handshake, the connection's setup (a shared
// memory offer and answer, then a ready frame), and then frames until it
// closes. ParamHub's links (package ps) use the same handshake (DialAuth,
// AcceptHandshake), the same offer and answer (transport/shm's Offer and
// Answer) and the same frame header.
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
// allocates anything: the cap is tcp.Config.MaxPayload (DefaultMaxPayload, 64
// MiB, by default) for a rank's connections, and 4 KiB for the frames of a
// connection's setup. Send refuses a payload over MaxPayload. A rank whose
// peer sends a malformed frame counts the peer as lost. The transport's
// control frames (all but TypeData) carry zeros in DType through Count,
// except Step in an abort.
//
// # Handshake
//
// Every connection, whoever dials it, starts with a handshake, bounded as
// a whole on both sides (by tcp.Config.HandshakeTimeout between ranks):
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
// on the same host (tcp.Mesh.Revive).
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
//	  dial to the peer wins: see transport/tcp)
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
package wire
