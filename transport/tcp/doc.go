// Package tcp is gorun's rank mesh: a transport.Transport over one
// authenticated TCP connection per pair of ranks that talk, made on first
// use, with the data of pairs on one host moved through shared memory
// (transport/internal/shmem's rings). Package collective makes one per
// rank (Listen, then SetPeers or Connect) and hands it to the
// algorithms; the launcher never touches it.
//
// Buffers: a frame received over TCP is read into a buffer from
// transport.GetBuf, and Release gives it back; one received through shared
// memory is the sender's ring until Release (a long frame is gathered into
// a buffer of its own). A Send or Recv that its context cuts off part way
// through a frame leaves the stream whole.
//
// A peer that dies (its connection ends without a goodbye, it stops
// answering pings, gossip declares it dead and a ping confirms it) is
// lost: the transport fails world-wide with a PeerLostError naming it,
// tells every other connected peer in an abort, and wakes every waiting
// call; with Config.Elastic only that peer is lost (OnPeerLost, Losses).
// Package liveness (transport/liveness) holds every rule of that verdict.
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
// mode 0600, named "gorun-" (jobenv.ShmPrefix), the job id, "-", the dialer's
// and the acceptor's ranks joined by "_", "-" and 32 random hex digits
// (in the job id, every byte but ASCII letters, digits and "_" becomes
// "_"), with every page reserved, holding two rings of the offered
// capacity: the first carries the dialer's frames to the acceptor, the
// second the acceptor's back (see transport/internal/shmem for their layout).
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
// Hub links (transport/shm's Offer and Answer) always exchange the offer and the
// answer, also when shared memory is off (the offer then declines), each
// step within shm.Options.Timeout (shm.DefaultTimeout), and send no
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
// window, until it answers or sends nothing for a window. With no pong a
// quarter of the way into a window, the rank also knocks: it dials the
// peer and runs the handshake, which the peer refuses as a duplicate while
// its process runs and holds this rank's connection. Such a peer's own
// reader may wait for room in its inbox (its collectives behind), the
// ping unread, and it is asked again rather than lost (for at most
// MaxStretch windows' worth of time since it last sent). A stopped
// process answers neither. Its connection ending without a goodbye while
// it is asked confirms the verdict at once.
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
package tcp
