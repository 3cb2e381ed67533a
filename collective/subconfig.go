package collective

import (
	"log/slog"
	"net"

	"github.com/gorun/gorun/membership"
	"github.com/gorun/gorun/ps"
	"github.com/gorun/gorun/transport/tcp"
)

// The one place a Config becomes the configurations of the parts a Comm
// is made of: the rank mesh (transport), gossip (membership) and
// ParamHub's hubs and client (ps). Each takes the job's identity (job,
// secret, rank, size) and its own settings from cfg here; what the Comm
// adds at run time (callbacks, addresses learnt at start) is set by the
// caller.

// transportConfig is the rank mesh's configuration.
func transportConfig(cfg Config, logger *slog.Logger) tcp.Config {
	tc := tcp.DefaultConfig()
	tc.Rank, tc.Size, tc.JobID, tc.Secret = cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret
	tc.ListenAddr, tc.MaxPayload, tc.Logger = cfg.dataListen(), cfg.MaxFrame, logger
	tc.SpinTime, tc.SpinYield, tc.HostRanks = cfg.SpinTime, cfg.SpinYield, cfg.HostRanks
	tc.Shm, tc.HostKey = cfg.Shm, cfg.hostKey()
	// The hub strategy's traffic bypasses the rank mesh: every rank's
	// loss must fail it, as the mesh cannot tell.
	tc.WatchAll = cfg.Strategy == StrategyHub
	tc.Elastic = cfg.Elastic
	tc.OnConnect = cfg.onConnect
	return tc
}

// membershipConfig is gossip's configuration, for a rank whose data
// connections are at dataAddr on the host hostKey.
func membershipConfig(cfg Config, dataAddr, hostKey string, logger *slog.Logger) membership.Config {
	mc := membership.DefaultConfig()
	mc.JobID, mc.Rank, mc.Size, mc.Secret = cfg.JobID, cfg.Rank, cfg.Size, cfg.Secret
	mc.BindPort, mc.AdvertiseAddr = cfg.GossipPort, cfg.AdvertiseAddr
	if h := cfg.listenHost(); net.ParseIP(h).IsLoopback() {
		mc.BindAddr = h // a job on one host: gossip on loopback alone
	}
	// One seed per rank (membership joins a few of them, never its own),
	// or a list to try in full.
	mc.Seeds = cfg.Seeds
	mc.DataAddr, mc.Host = dataAddr, hostKey
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult
	// Gossip is waited for while it makes progress: a start fails once
	// JoinTimeout passes with no rank appearing, not at a fixed time, as
	// a large job on loaded hosts takes longer than a deadline that suits
	// a small one (256 ranks on 64 test hosts sharing 2 cores: 38-57 s).
	mc.StallTimeout = cfg.JoinTimeout
	mc.Logger = logger
	return mc
}

// hubConfig is the configuration of hub index of a job of workers ranks.
func hubConfig(cfg Config, index, workers int, logger *slog.Logger) ps.HubConfig {
	hc := ps.DefaultHubConfig()
	hc.Index, hc.Workers, hc.JobID, hc.Secret = index, workers, cfg.JobID, cfg.Secret
	hc.MaxFrame, hc.Logger = cfg.MaxFrame+ps.FrameSlack, logger
	hc.Elastic, hc.Share = cfg.HubElastic, cfg.HubShare
	return hc
}

// clientConfig is the configuration of this rank's client of the hubs at
// addrs.
func clientConfig(cfg Config, addrs []string, logger *slog.Logger) ps.ClientConfig {
	cc := ps.DefaultClientConfig()
	cc.Worker, cc.Workers, cc.Hubs, cc.JobID, cc.Secret = cfg.Rank, cfg.Size, addrs, cfg.JobID, cfg.Secret
	cc.PartitionBytes, cc.MaxFrame, cc.HubTimeout, cc.Logger = cfg.HubPartitionBytes, cfg.MaxFrame+ps.FrameSlack, cfg.HubTimeout, logger
	cc.ConnectTimeout = cfg.JoinTimeout
	cc.RoundPartitionsPerHub, cc.RoundWindow = cfg.HubRoundPartitions, cfg.HubWindow
	return cc
}
