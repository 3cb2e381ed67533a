package membership

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gorun/gorun/internal/jobsecret"
)

// Config configures a member.
type Config struct {
	JobID      string
	Rank, Size int
	Secret     []byte
	// BindAddr and BindPort are where the member listens (TCP and UDP).
	BindAddr string
	BindPort int
	// AdvertiseAddr is the address other ranks reach this one at.
	AdvertiseAddr string
	// Seeds are "host:port" gossip addresses to join. When there are Size
	// of them, Seeds[r] is rank r's, and at a job's start a rank joins
	// only its parent in a join tree over the seeds' hosts (see
	// joinTree), which no rank is the parent of more than four: gossip
	// spreads the rest, so that start costs each rank a few exchanges,
	// not N, and no rank serves N of them. Otherwise every one is tried.
	Seeds []string
	// DataAddr is this rank's data-plane address, published to the others.
	DataAddr string
	// Host names this rank's host (a transport's host key), published to
	// the others so that ranks know who shares their host before they
	// connect.
	Host string

	// ProbeInterval and ProbeTimeout are gossip's timers for jobs of up to
	// 64 ranks; a larger job stretches them, and gossip's own interval, by
	// Size/64, at most 4 times (see gossipStretch).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// SuspicionMult scales how long a suspect is given before it is
	// declared dead, in probe intervals.
	SuspicionMult int
	// StreamTimeout bounds a state exchange over TCP with another member
	// (a join, memberlist's periodic sync, a goodbye): its connection,
	// its send and its receive each. 0 scales it with Size (see
	// streamTimeout): a full state is a hundred bytes or so a rank, which
	// a loaded host reads, decrypts and merges slowly.
	StreamTimeout time.Duration
	// StallTimeout makes WaitFor give up once this long has passed with
	// no rank appearing (since it started, or since the last one
	// appeared), whatever its ctx allows: a start that is slow but moving
	// is waited for, one that has stopped is not. 0: only ctx bounds it.
	StallTimeout time.Duration
	Logger       *slog.Logger

	// wrapNet, if set, wraps the member's network (a test's faults).
	wrapNet func(memberlist.Transport) memberlist.Transport
}

// DefaultConfig has timers for a LAN: a silent member is declared dead in
// about two seconds (in a job of more than 64 ranks, up to four times as
// long).
func DefaultConfig() Config {
	return Config{
		BindAddr:      "0.0.0.0",
		ProbeInterval: 250 * time.Millisecond,
		ProbeTimeout:  200 * time.Millisecond,
		SuspicionMult: 3,
	}
}

func (c *Config) validate() error {
	switch {
	case c.JobID == "":
		return errors.New("membership: no job id")
	case c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("membership: rank %d out of range for size %d", c.Rank, c.Size)
	case jobsecret.Check(c.Secret) != nil:
		return fmt.Errorf("membership: %w", jobsecret.Check(c.Secret))
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0 || c.SuspicionMult < 1:
		return errors.New("membership: timers must be positive")
	case c.StreamTimeout < 0 || c.StallTimeout < 0:
		return errors.New("membership: StreamTimeout and StallTimeout must not be negative")
	}
	return nil
}

// streamTimeout is Config.StreamTimeout when it is 0: 2 s, and 10 ms
// more a rank (4.6 s at 256 ranks), as a full state exchange grows with
// the job and is slowest when every rank starts at once on loaded hosts.
func streamTimeout(size int) time.Duration {
	return 2*time.Second + time.Duration(size)*10*time.Millisecond
}

// gossipStretch is how much a job of size ranks stretches gossip's probe
// interval, probe timeout and gossip interval: 1 up to 64 ranks, then
// size/64, at most 4. A member's own gossip work does not grow with the
// job, but a member that misses probes for want of CPU is suspected, and
// every verdict reaches every member: at 256 ranks on 64 test hosts
// sharing 2 cores, with the timers for 64, gossip declared live ranks
// dead about 4,000 times a second, taking them back as often, and that
// churn took most of the CPU (a small job's wall time 60-80 s; stretched
// 4 times, 20-24 s; results/scale). A silent member is then declared dead
// in as many times as long.
func gossipStretch(size int) time.Duration {
	return time.Duration(min(4, max(1, size/64)))
}

// memberlistConfig is memberlist's configuration for this member: its
// name, and the job id as its label and the job secret's key, so that
// only the job's ranks can join; where it listens; and gossip's timers,
// stretched for a large job. Start adds the delegates and the logger.
func (c *Config) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.JobID + "-" + strconv.Itoa(c.Rank)
	mc.Label = c.JobID
	mc.SecretKey = jobsecret.Key(c.Secret, jobsecret.Membership) // AES-256
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertisePort = c.BindPort
	if c.AdvertiseAddr != "" {
		mc.AdvertiseAddr = c.AdvertiseAddr
	}
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.SuspicionMaxTimeoutMult = 2
	mc.AwarenessMaxMultiplier = 4
	mc.GossipInterval = 50 * time.Millisecond
	if f := gossipStretch(c.Size); f > 1 {
		mc.ProbeInterval *= f
		mc.ProbeTimeout *= f
		mc.GossipInterval *= f
	}
	mc.GossipToTheDeadTime = 2 * time.Second
	// A rank restarted on another host (gorun --max-restarts) comes back
	// under its name at a new address: once the old one is dead, the new
	// one may take the name at once (gossip is keyed with the job secret,
	// so no outsider can).
	mc.DeadNodeReclaimTime = time.Millisecond
	mc.PushPullInterval = 5 * time.Second
	mc.TCPTimeout = cmp.Or(c.StreamTimeout, streamTimeout(c.Size))
	mc.EnableCompression = false
	return mc
}
