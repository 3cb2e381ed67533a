package pmix

import (
	"strconv"
	"strings"
)

// The job data a client asks for at PMIx_Init (its gds "hash" stores
// it): the namespace, then kvals. Job-level keys are stored for the
// wildcard rank; lone node-level keys describe the client's own node
// (keyed by its own hostname); PMIX_NODE_INFO_ARRAY describes each node,
// PMIX_APP_INFO_ARRAY the one application, and PMIX_PROC_DATA each rank
// (the rank first). What Open MPI 5 reads at MPI_Init is all here (the
// keys below; docs/mpi.md's Open MPI 5 section says what they describe).

// Keys of the PMIx standard the server provides.
const (
	keyJobID       = "pmix.jobid"
	keyJobSize     = "pmix.job.size"
	keyMaxProcs    = "pmix.max.size"
	keyUnivSize    = "pmix.univ.size"
	keyNumNodes    = "pmix.num.nodes"
	keyNumApps     = "pmix.job.napps"
	keyTmpDir      = "pmix.tmpdir"
	keyNodeList    = "pmix.nlist"
	keySessionID   = "pmix.session.id"
	keyNodeArray   = "pmix.node.arr"
	keyHostname    = "pmix.hname"
	keyNodeID      = "pmix.nodeid"
	keyLocalPeers  = "pmix.lpeers"
	keyLocalSize   = "pmix.local.size"
	keyNodeSize    = "pmix.node.size"
	keyLocalLeader = "pmix.lldr"
	keyAppArray    = "pmix.app.arr"
	keyAppNum      = "pmix.appnum"
	keyAppSize     = "pmix.app.size"
	keyAppLeader   = "pmix.aldr"
	keyProcData    = "pmix.pdata"
	keyRank        = "pmix.rank"
	keyLocalRank   = "pmix.lrank"
	keyNodeRank    = "pmix.nrank"
	keyGlobalRank  = "pmix.grank"
	keyAppRank     = "pmix.apprank"
	keyReinc       = "pmix.reinc"
	keySpawned     = "pmix.spawned"
	// The topology as hwloc's XML (v2): where a PMIx client
	// (pmix_hwloc_setup_topology) and Open MPI
	// (opal_hwloc_base_get_topology) look for it at the job level before
	// they discover it.
	keyHwlocXML2 = "pmix.hwlocxml2"
)

func joinRanks(r []int) string {
	var b strings.Builder
	for i, x := range r {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
	}
	return b.String()
}

func (s *Server) buildJobData() []byte {
	var e encoder
	e.packedString(s.cfg.Nspace)
	size := uint32(s.size)
	var names []string
	for _, h := range s.cfg.Hosts {
		names = append(names, h.Name)
	}
	e.kval(keyJobID, String(s.cfg.Nspace))
	e.kval(keyJobSize, Uint32(size))
	e.kval(keyMaxProcs, Uint32(size))
	e.kval(keyUnivSize, Uint32(size))
	e.kval(keySessionID, Uint32(1))
	e.kval(keyNumNodes, Uint32(uint32(len(s.cfg.Hosts))))
	e.kval(keyNumApps, Uint32(1))
	e.kval(keyNodeList, String(strings.Join(names, ",")))
	e.kval(keySpawned, Bool(false))
	if s.cfg.TmpDir != "" {
		// Open MPI 5 makes its session directories under it (and would
		// use a namespace or process directory as given, without
		// making it: those are left to it).
		e.kval(keyTmpDir, String(s.cfg.TmpDir))
	}

	// This node, as lone keys: the client files them under its own
	// hostname.
	me := s.cfg.Hosts[s.cfg.Host]
	mine := sortedRanks(me)
	e.kval(keyNodeID, Uint32(uint32(s.cfg.Host)))
	e.kval(keyLocalPeers, String(joinRanks(mine)))
	e.kval(keyLocalSize, Uint32(uint32(len(mine))))
	e.kval(keyNodeSize, Uint32(uint32(len(mine))))
	e.kval(keyLocalLeader, Rank(uint32(mine[0])))

	// Every node.
	for id, h := range s.cfg.Hosts {
		rs := sortedRanks(h)
		name := h.Name
		if id == s.cfg.Host {
			name = s.cfg.Hostname
		}
		e.kval(keyNodeArray, InfoArray([]Info{
			{Key: keyHostname, Value: String(name)},
			{Key: keyNodeID, Value: Uint32(uint32(id))},
			{Key: keyLocalPeers, Value: String(joinRanks(rs))},
			{Key: keyLocalSize, Value: Uint32(uint32(len(rs)))},
			{Key: keyNodeSize, Value: Uint32(uint32(len(rs)))},
			{Key: keyLocalLeader, Value: Rank(uint32(rs[0]))},
		}))
	}

	// The one application.
	e.kval(keyAppArray, InfoArray([]Info{
		{Key: keyAppNum, Value: Uint32(0)},
		{Key: keyAppSize, Value: Uint32(size)},
		{Key: keyAppLeader, Value: Rank(0)},
	}))

	// Every rank.
	for id, h := range s.cfg.Hosts {
		name := h.Name
		if id == s.cfg.Host {
			name = s.cfg.Hostname
		}
		for lr, r := range sortedRanks(h) {
			in := []Info{
				{Key: keyRank, Value: Rank(uint32(r))},
				{Key: keyLocalRank, Value: Uint16(uint16(lr))},
				{Key: keyNodeRank, Value: Uint16(uint16(lr))},
				{Key: keyNodeID, Value: Uint32(uint32(id))},
				{Key: keyHostname, Value: String(name)},
				{Key: keyAppNum, Value: Uint32(0)},
				{Key: keyGlobalRank, Value: Rank(uint32(r))},
				{Key: keyAppRank, Value: Rank(uint32(r))},
				{Key: keyReinc, Value: Uint32(0)},
			}
			e.kval(keyProcData, InfoArray(in))
		}
	}
	return e.b
}

// jobDataReply is the job data with the topology, which Config.Topology
// gives at the first request: a job-level key appended to the rest (the
// client reads kvals until the buffer ends).
func (s *Server) jobDataReply() []byte {
	s.topoOnce.Do(func() {
		s.jobReply = s.jobData
		if s.cfg.Topology == nil {
			return
		}
		xml := s.cfg.Topology()
		if xml == "" || len(xml) > MaxTopology {
			return
		}
		var e encoder
		e.b = append(e.b, s.jobData...)
		e.kval(keyHwlocXML2, String(xml))
		s.jobReply = e.b
	})
	return s.jobReply
}

// Env is the environment that makes a rank's PMIx client connect to the
// server listening at addr ("127.0.0.1:port") as that rank.
func (s *Server) Env(rank int, addr string) []string {
	uri := s.cfg.Nspace + "-server.0;tcp4://" + addr
	env := []string{
		"PMIX_NAMESPACE=" + s.cfg.Nspace,
		"PMIX_RANK=" + strconv.Itoa(rank),
		"PMIX_SECURITY_MODE=native",
		"PMIX_GDS_MODULE=hash",
		"PMIX_BFROP_BUFFER_TYPE=PMIX_BFROP_BUFFER_NON_DESC",
		"PMIX_HOSTNAME=" + s.cfg.Hostname,
	}
	// Every version's rendezvous, as PMIx servers set them; a client
	// older than 4.1 reads an older one and is refused at the handshake
	// with a message that names both versions.
	for _, v := range []string{"41", "4", "3", "21", "2"} {
		env = append(env, "PMIX_SERVER_URI"+v+"="+uri)
	}
	if s.cfg.TmpDir != "" {
		env = append(env, "PMIX_SERVER_TMPDIR="+s.cfg.TmpDir, "PMIX_SYSTEM_TMPDIR="+s.cfg.TmpDir)
	}
	return env
}
