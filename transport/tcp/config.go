package tcp

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gorun/gorun/internal/backoff"
	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/transport/wire"
)

// Config configures a Mesh.
type Config struct {
	Rank, Size int
	JobID      string // must be equal on every rank; at most 64 bytes
	Secret     []byte // the job secret; every connection proves it knows it
	ListenAddr string // host:port to listen on; default ":0"
	MaxPayload int    // largest accepted payload
	// DialTimeout bounds one dial; HandshakeTimeout bounds one handshake,
	// and one step of the shared memory offer that follows it.
	DialTimeout      time.Duration
	HandshakeTimeout time.Duration
	// ConnectTimeout bounds all the attempts to connect to one peer (a
	// pair connects on first use); past it the peer is lost.
	ConnectTimeout time.Duration
	// SpinTime is how long a reader polls its socket for a frame that a
	// Recv is waiting for before it parks; 0 never spins.
	SpinTime time.Duration
	// SpinYield gives the core away between polls while spinning
	// (sched_yield): right when ranks outnumber cores, where SpinTime
	// should then be a few milliseconds. HostRanks is the job's ranks on
	// this host (0 where unknown): yielding waits park at once instead
	// while the host has other work besides them (cpu.Gauge: on 2 CPUs,
	// about two busy processes or more).
	SpinYield bool
	HostRanks int
	// ConfirmTimeout is how long a rank that gossip declared dead gets to
	// answer a ping on its data connection, or a connection, before it is
	// lost; 0 (or less) trusts gossip at once. An overloaded host (more
	// than 2 runnable tasks per CPU) stretches it in proportion, up to
	// liveness.MaxStretch times (liveness.DefaultPolicy).
	ConfirmTimeout time.Duration
	// WatchAll makes gossip's verdict on a peer this rank has no
	// connection to fail the transport too (once the peer does not answer
	// a connection within ConfirmTimeout), for users whose traffic does
	// not flow through it (ParamHub workers). Without it such a verdict
	// only makes connecting to that peer fail at once: the death of a rank
	// reaches the others through the ranks connected to it, which abort
	// and pass the abort on, while a rank that finished and left is no
	// reason for ranks that never talked to it to fail.
	WatchAll bool
	// Elastic makes a lost peer a loss of that peer only (an elastic ring,
	// gorun --elastic): calls that wait on it or send to it fail with its
	// PeerLostError, the rest of the transport goes on, no abort is sent,
	// and OnPeerLost is told. A broken shared memory segment or another
	// rank's abort still fail the whole transport (a malformed frame is a
	// broken connection like any other: its peer alone is lost).
	Elastic bool
	// OnPeerLost, if set, is called (from a transport goroutine) when an
	// Elastic transport loses a peer, with the reason.
	OnPeerLost func(peer int, reason string)
	// OnConnect, if set, is called each time a connection to peer is set
	// up and in use, with whether the pair's data goes through shared
	// memory: which peers a rank's algorithms made it connect to (the
	// mesh connects on first use). It is called from the goroutine that
	// set the connection up, and must not block.
	OnConnect func(peer int, sharedMemory bool)
	// Shm lets ranks on one host exchange data through shared memory
	// (see the package documentation); pairs on different hosts, or that cannot set it up,
	// use TCP.
	Shm bool
	// ShmDir is where segments are created ("" = /dev/shm, where the
	// launcher's agents sweep a job's leftovers).
	ShmDir string
	// ShmRingBytes is one direction's ring capacity (rounded up to a
	// power of two); 0 sizes rings from ShmBudget and the number of ranks
	// on the host (see ShmBudget), 16 MiB at most. A sender keeps to a
	// ring's first 2 MiB, which the caches hold, unless the host has other
	// work than the job's HostRanks (cpu.Contended); then it keeps the
	// whole ring ahead of it, to run ahead of a peer that is not running.
	ShmRingBytes int
	// ShmBudget bounds one rank's share of shared memory, counted as one
	// ring per peer on its host were it to talk to all of them (0 = 16
	// MiB: 16 MiB rings at 2 ranks a host, 8 MiB at 3, 4 MiB up to 5,
	// 2 MiB up to 9, 1 MiB up to 17, and so on, 64 KiB at least).
	ShmBudget int
	// HostKey names this rank's host: ranks share memory only when their
	// keys (and kernels) are equal. "" = the hostname. The launcher's node
	// number is a good key: test hosts in network namespaces share a
	// kernel but are separate hosts to the job.
	HostKey string
	Logger  *slog.Logger

	// The timings below bound the transport's own waits. DefaultConfig
	// gives each its value in brackets; every one must be positive, except
	// where 0 is given a meaning.

	// ExplainWait is how long a broken connection waits for a better
	// explanation (an abort from another rank, or a failure found
	// otherwise) before the peer at its other end is blamed; 0 blames it
	// at once [250 ms].
	ExplainWait time.Duration
	// AbortTimeout bounds Abort's sending of the abort to every connected
	// peer, in parallel [1 s].
	AbortTimeout time.Duration
	// NoticeTimeout bounds the aborts the transport sends on its own, to
	// every connected peer in parallel: the news that a peer is lost, and
	// an abort passed on from the rank it came through [500 ms].
	NoticeTimeout time.Duration
	// ByeTimeout bounds Close's goodbye (or, if the transport failed, its
	// abort) to every connected peer, in parallel [1 s].
	ByeTimeout time.Duration
	// DrainTimeout is how long Close of a failed transport lets its
	// readers take in what peers still send before it closes the
	// connections, so that their last words are not lost to a reset; 0
	// does not wait [200 ms].
	DrainTimeout time.Duration
	// LingerTimeout is how long Close of a healthy transport, after its
	// goodbyes, waits for each peer to read them (a peer half-closes its
	// side of the connection when it reads a goodbye) before it closes the
	// connections: closing with a peer's frames unread makes the kernel
	// reset the connection, and a reset drops what the peer had not yet
	// read of this rank's last frames [2 s].
	LingerTimeout time.Duration
	// AcceptPause is how long the accept loop waits after a failed accept
	// (out of file descriptors, a connection reset before it was
	// accepted) before it accepts again [50 ms].
	AcceptPause time.Duration
	// RetryPause and MaxRetryPause pace the attempts to connect to a
	// peer: after the nth failed attempt the next waits n × RetryPause, at
	// most MaxRetryPause (see backoff.Pause) [20 ms, 500 ms].
	RetryPause, MaxRetryPause time.Duration

	// shmReserve replaces fallocate in tests that need a full ShmDir.
	shmReserve func(fd int, size int64) error
	// shmAnswerDelay makes the acceptor wait before answering an offer of
	// a segment, in tests of an offer that times out.
	shmAnswerDelay time.Duration
}

// DefaultConfig returns the defaults for everything but the job's identity.
func DefaultConfig() Config {
	return Config{
		ListenAddr:       ":0",
		MaxPayload:       wire.DefaultMaxPayload,
		DialTimeout:      5 * time.Second,
		HandshakeTimeout: 5 * time.Second,
		ConnectTimeout:   30 * time.Second,
		SpinTime:         100 * time.Microsecond,
		ConfirmTimeout:   time.Second,
		Shm:              true,
		ExplainWait:      250 * time.Millisecond,
		AbortTimeout:     time.Second,
		NoticeTimeout:    500 * time.Millisecond,
		ByeTimeout:       time.Second,
		DrainTimeout:     200 * time.Millisecond,
		LingerTimeout:    2 * time.Second,
		AcceptPause:      50 * time.Millisecond,
		RetryPause:       backoff.DefaultPause,
		MaxRetryPause:    backoff.DefaultMaxPause,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("transport: rank %d out of range for size %d", c.Rank, c.Size)
	case c.JobID == "" || len(c.JobID) > wire.MaxJobIDLen:
		return fmt.Errorf("transport: job id must be 1 to %d bytes", wire.MaxJobIDLen)
	case jobsecret.Check(c.Secret) != nil:
		return fmt.Errorf("transport: %w", jobsecret.Check(c.Secret))
	case c.MaxPayload < 1:
		return errors.New("transport: MaxPayload must be positive")
	case c.DialTimeout <= 0 || c.HandshakeTimeout <= 0 || c.ConnectTimeout <= 0:
		return errors.New("transport: DialTimeout, HandshakeTimeout and ConnectTimeout must be positive")
	case c.AbortTimeout <= 0 || c.NoticeTimeout <= 0 || c.ByeTimeout <= 0:
		return errors.New("transport: AbortTimeout, NoticeTimeout and ByeTimeout must be positive")
	case c.AcceptPause <= 0 || c.RetryPause <= 0 || c.MaxRetryPause < c.RetryPause:
		return errors.New("transport: AcceptPause and RetryPause must be positive, and MaxRetryPause at least RetryPause")
	case c.ExplainWait < 0 || c.DrainTimeout < 0 || c.LingerTimeout < 0:
		return errors.New("transport: ExplainWait, DrainTimeout and LingerTimeout must not be negative")
	}
	return nil
}
