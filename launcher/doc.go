// Package launcher is the job side of gorun: it places the ranks on the
// hosts, starts one agent per host, and supervises the job until every
// rank is gone, with mpirun's exit-code and signal rules. It is what
// `gorun PROGRAM` runs on the user's machine; the per-host agent is package
// agent, and the messages between the two are package proto.
//
// # Processes
//
//	user's machine                          each host of the job
//	+--------------------------+           +--------------------------+
//	| gorun (package launcher) |  ssh HOST | gorun __agent            |
//	|  Run: place, pre-flight, |---------->|  (package agent)         |---> rank 0 (PROGRAM)
//	|  supervise               |  stdin:   |  pre-flight, ports, PMI, |---> rank 1 ...
//	|  output, status line,    |  messages |  status pages, signals   |---> gorun __hub (--hubs)
//	|  stall inspector, PMI    |<----------|                          |
//	|  fence, summary          |  stdout   +--------------------------+
//	+--------------------------+            (this machine: a child process, no ssh)
//
// Ranks and hubs talk to each other directly (gossip, ring, ParamHub
// links): the launcher and the agents are not on the data path. Each rank
// runs in a process group of its own with SIGKILL as its parent-death
// signal, so no rank outlives its agent; a local agent gets SIGTERM when
// the launcher dies, a remote one sees its stream end. What a rank starts
// stays in its group; should the agent be killed outright (SIGKILL, the
// OOM killer), its sentinel (gorun __sentinel, started by the agent in a
// group of its own, told every rank's group over a pipe) sees the pipe
// close and kills those groups and removes the job's files on the host.
//
// Agents may also dial in instead of being started (a per-node start,
// gorun --nnodes: Kubernetes pods, containers): Meet accepts them at a
// rendezvous address once they prove the job's secret (DialLauncher is the
// node's side), and the Rendezvous it returns, as Config.Remote, is an
// Attacher that hands each host's connection to the launcher as that
// host's stream. The protocol on it is the same.
//
// # Protocol
//
// One gob stream each way over the agent's stdin and stdout (proto.Conn),
// message kinds in proto.Kind (append-only):
//
//	launcher                                  agent
//	   start `ssh HOST gorun __agent`  ---->
//	                                   <----  "GORUN-AGENT-1" line (shell noise before it is skipped)
//	   MsgSpec {version, job, program, ranks}  ---->  pre-flight: wdir, program, ports
//	                                   <----  MsgReady {addr, ports} | MsgError
//	   (every host ready within Config.Preflight, else the job fails naming each host)
//	   MsgStart {peers, master address}  ---->  start the ranks and hubs
//	                                   <----  MsgStarted {rank, pid}
//	                                   <----  MsgOutput {rank, stream, line}, MsgStatus {rank, page}
//	                                   <----  MsgPMIFence {epoch, host's puts}
//	   MsgPMIRelease {epoch, all puts} ---->  (once every host entered the barrier)
//	   MsgStdin, MsgStdinEOF           ---->  rank 0's stdin
//	                                   <----  MsgStdinAck {count}  (stdin's flow control: at most 1 MiB unacknowledged)
//	   MsgClock                        ---->
//	                                   <----  MsgClock {agent's time}  (--timeline probes; a ping)
//	   MsgDump                         ---->  SIGQUIT to Go ranks; their stderr comes back as dumps
//	   MsgTerminate {signal}           ---->  signal every rank; SIGKILL after the grace period
//	                                   <----  MsgSuspect {rank, target, reason}  (--elastic: a rank's control channel)
//	   MsgSignalRank {rank, signal}    ---->  signal one rank (--elastic: SIGKILL fences it)
//	   MsgView {epoch, live, joined}   ---->  "view E r,r,... [+R ADDR HOST]" to every running rank's control channel
//	   MsgRestart {rank, count, epoch, live, rank spec} -> start the rank again (--max-restarts); "view E r,r,..." first
//	                                   <----  MsgJoin {rank, addr, host}  (a restarted rank's "join ADDR HOST")
//	                                   <----  MsgExit {rank, code, signal, failure}, MsgTimeline
//	                                   <----  MsgDone (every rank gone) | MsgPMIAbort | MsgError
//	   MsgResult {code}                ---->  (a per-node start: the job's outcome, to the nodes that dialed in)
//	   close the stream                ---->  the agent exits
//
// # Supervision
//
// How the job ends is decided by a pure state machine (supervisor.go, with
// the exit-code rules in policy.go): events in (a rank started or exited,
// an agent finished, went away or went silent, a signal, --timeout, a
// stall, the caller's context, time passing), actions out (tell the agents
// to signal or dump their ranks, ping or kill an agent, print a line). The
// driver's loop (driver.go) only turns channel receives into events and
// performs the actions. The rules, in short:
//
//   - The first failure wins: a rank's nonzero exit (128+N for signal N),
//     MPI_Abort, a lost agent (exit 255) or gorun's own signal sets the
//     exit code and the summary, and every other rank gets SIGTERM, then
//     SIGKILL after Config.Grace. A second signal sends SIGKILL.
//   - --timeout and --stall-abort end the job with exit 124, after the Go
//     ranks wrote goroutine dumps (Config.DumpWait).
//   - With --hub-elastic, a lost rank does not end the job while at least
//     --min-np ranks (default 1) are still running.
//   - With --elastic (the ring strategy; with --strategy hub it is
//     --hub-elastic) the launcher sequences the job's membership. Every
//     rank gets GORUN_ELASTIC=1 and a control channel, a unix socket at
//     GORUN_CONTROL_FD (its descriptor is 3 plus the number of inherited
//     descriptors before it: PMI_FD and Open MPI's library, when there),
//     speaking package control's line protocol. Epoch 0 is the start,
//     with every rank. A rank's failure while the job goes on bumps the
//     epoch and sends "view E r,r,..." (the ranks still running, in
//     order) to every running rank, unless it leaves fewer than --min-np
//     running, which fails the job. A rank that finishes (exit 0) makes
//     no view: it took part in every collective, and a view would only
//     interrupt the others' last ones. A rank's "suspect R E reason" line
//     fences rank R (SIGKILL on its host) if it is running and the
//     reporter is too, unless R joined (restarted) in a view newer than
//     E, the newest the reporter had heard of; R's exit then makes the view. A suspect of a rank
//     that finished but is still in the view (it left too early) makes
//     the view at once. The job exits 0 if every rank that was not lost
//     finished with 0. An agent writes views through a short queue per
//     rank, so a rank that does not read its channel only loses older
//     views, and the agent never blocks on it.
//   - With --max-restarts R (--elastic, ring) a lost rank (a failed exit,
//     a kill, a fence) is also restarted, up to R times per rank, by its
//     own host's agent: same rank, same
//     environment and gossip port, GORUN_RESTART_COUNT=k, a fresh control
//     channel whose first line is the view it was restarted in (without
//     it), a status page and timeline file of its own, no PMI socket and
//     no stdin. The survivors get the view without it at once and never
//     wait for the restart. Once it says "join ADDR HOST" the next view
//     holds it and names it ("+R ADDR HOST"), for every running rank, the
//     joiner too; a join from any other rank is ignored. A restarted rank
//     that fails before it joined makes no view and is restarted again
//     while it has restarts left. Until the launcher restarts it (or
//     stops the job) the agent counts it as running, so it is not done.
//     When every rank of the view has finished, restarted ranks that have
//     not joined are stopped and count as lost. The closing note names
//     the restarts ("rank 2 restarted 1 time").
//   - A rank with restarts left whose host's agent is gone (lost, or done
//     before it could restart it) is restarted on another host: of the
//     hosts whose agent is still there, the one with the most free slots
//     (the host's Slots, minus the ranks placed there, minus the restarts
//     moved there), the first on a tie. MsgRestart then carries its
//     RankSpec there: LocalRank the number of ranks the host had before
//     it, LocalSize one more, the host's NodeRank. The new agent picks it
//     a gossip port (FreePort, as at the start) and runs it as one of its
//     own; the launcher's fences, views and later restarts of it go to
//     that agent, and that agent's end is its end. With no free slot
//     anywhere it is lost for good ("no other host has a free slot").
//   - When the ranks are told to stop, every agent is pinged. An agent
//     that says nothing within Config.AgentWait (2 s by default) is on a
//     host that cannot be reached (a network partition): gorun reports
//     "HOST unreachable", kills its SSH session and ends the job without
//     it, with the exit code of the failure that stopped the job (255 if
//     there was none). Agents that answer get the grace period.
//   - Grace plus 10 s after the stop, agents still running are killed.
package launcher
