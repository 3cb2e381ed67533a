// Package pmix is a PMIx server: what Open MPI 5's MPI_Init (and any
// other PMIx 4.1 to 5.x client) needs from the process manager that
// started it, written from the protocol as OpenPMIx speaks it, without
// libpmix.
//
// One Server serves one host's ranks of one job (one namespace). The
// caller owns the sockets: it listens, accepts a client's connection,
// decides which of its ranks the client is (gorun's agent: the process
// group of the process holding the socket), and hands the connection to
// Serve with that rank. Serve then reads the client's handshake and
// answers its commands until the client goes away:
//
//   - the handshake: the client's PMIx version (4.1 to 5.x), buffer format
//     ("v41", NON_DESC), job-data module ("hash") and native credential
//     (this server's uid and gid) are checked, and it must name the
//     rank Serve was given; otherwise it is refused with a status, and
//     Serve returns an error naming the rank and why (ServedVersions);
//   - its job data (PMIx_Init): size, placement, node and process maps,
//     local and node ranks, the application, the session directory, and
//     the host's topology (below);
//   - commit (the rank's puts, by scope), fence, get, abort, finalize,
//     event registration, cleanup registration (job control);
//   - anything else (spawn, publish, lookup, groups, queries, tools) gets
//     PMIX_ERR_NOT_SUPPORTED at once, and Config.Refused hears of it
//     first, told whether the refusal strands other ranks (Refusal): one
//     rank's spawn, connect or name lookup is made for others that wait
//     in MPI for its answer, and only ending the job frees them.
//
// One rank, several clients: a child of a rank that calls PMIx_Init
// inherits the rank's PMIX_RANK and is served as that rank. The rank's
// first live client speaks for it: only that one commits and fences
// (another gets PMIX_ERR_NOT_SUPPORTED, and Config.Refused hears of it),
// so a child can neither overwrite the rank's data nor enter a fence in
// its place. Each session's Result is its own.
//
// Fences: fences count ranks, not connections. A rank's fence waits until
// every local rank entered the same fence (a rank entering twice waits
// with its first entry); the last one hands the host's data (each local
// rank's remote and global puts since the previous fence, only those) to
// Config.Relay. The caller
// gathers every host's data (one message per host and fence) and calls
// Release on every host's Server with all of it; then the local ranks'
// fences return; each host adds what a fence brings to what earlier ones
// did. A fence over part of the job is refused, and a fence ignores
// PMIX_TIMEOUT (it ends when the job's fence does, or fails). A get's
// PMIX_TIMEOUT is honoured, capped at a century. A get of a
// local rank's data waits for its commit; of another host's rank, it is
// answered from the data fences brought, and "not found" if none did yet
// (no direct modex: there is nothing to wait for that would come without
// another fence).
//
// Nothing blocks forever: a fence or get waiting when the Server is
// closed, when Serve's context ends, or when its own client goes away,
// answers with an error status (if anyone is left to hear it), and Serve
// returns. A rank that dies closes its socket (EOF, a reset or a broken
// pipe all count as its going away, not as an error); Serve returns its
// Result, which says whether it initialized, finalized or aborted, so the
// caller can fail a rank that exited without finalizing. A peer's death
// elsewhere is the caller's to act on (gorun ends the job); Fail ends a
// fence in progress with an error for the local ranks in it, and every
// later fence at once. Serve refuses a rank that is not this host's, and
// its errors are *RankError, naming the rank. Close waits for every
// Serve to return.
//
// Host names: the job data names every node by Config.Hosts, but this
// host by Config.Hostname (its own os.Hostname, by which a rank's PMIx
// client files its node's data). When a hostfile names a host otherwise
// (an address, an alias), PMIX_HOSTNAME of that node differs by who asks:
// its own ranks see its os.Hostname, the others the hostfile's name.
// Node ids and ranks agree everywhere; only the names may not (gorun's
// agent protocol does not carry each host's own name).
//
// Topology: the job data carries the host's hardware topology as hwloc's
// XML (v2) under PMIX_HWLOC_XML_V2 ("pmix.hwlocxml2"), at the job level
// (the wildcard rank), where both a rank's PMIx client (at PMIx_Init in
// OpenPMIx 5, at PMIx_Load_topology in 4.2) and Open MPI 5
// (opal_hwloc_base_get_topology) look before discovering the machine
// themselves, which costs every rank tens of milliseconds of reading
// /sys. Each loads the XML with hwloc_topology_set_xmlbuffer and
// HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM: binding works as with a discovered
// topology, and the allowed sets in the XML (the cpuset cgroup's CPUs and
// nodes) restrict it as discovery would. No other key goes with it.
// Config.Topology gives the XML, asked once per Server, when the first
// rank asks for its job data; LocalTopology reads it from /sys as hwloc's
// Linux discovery does. Without it, or when /sys cannot be read or does
// not add up (LocalTopology's error), none is served and every rank
// discovers the topology itself. The XML holds the machine, packages,
// dies, cluster groups, caches, cores, PUs and NUMA nodes with their
// memory, page sizes and distances, as hwloc finds them; not I/O devices
// (PCI, NICs, GPUs: hwloc's own discovery adds those Open MPI uses to
// pick a NIC near a bound rank, and gorun binds none), CPU kinds, or the
// groups hwloc makes from NUMA distances on large machines. The keys of
// hwloc's shared-memory topology (pmix.hwlocfile, .hwlocaddr,
// .hwlocsize) are not served: they need hwloc's own memory layout. Nor
// are a rank's PMIX_CPUSET and PMIX_LOCALITY_STRING: gorun does not bind
// ranks, and for an unbound rank prterun sends an empty locality, which
// Open MPI takes as none (its local peers are on the same node, nothing
// finer).
//
// Buffers: Relay's data and Release's are owned by the callee once
// passed. Decoders never allocate beyond what a message holds, messages
// are capped (MaxMessage, MaxHello), and both are fuzzed.
package pmix
