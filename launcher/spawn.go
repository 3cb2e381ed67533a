package launcher

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun/gorun/launcher/proto"
)

// Spawner makes the command that starts gorun's agent on a host. The
// launcher talks to the agent over the command's stdin and stdout.
type Spawner interface {
	AgentCommand(host string) *exec.Cmd
}

// An Attacher is a Spawner whose agents are running already and have
// dialed in (Rendezvous): the launcher takes a host's agent stream from
// Attach instead of starting a command.
type Attacher interface {
	Spawner
	Attach(host string) (io.ReadWriteCloser, error)
}

// LocalSpawner starts the agent as a child process on this machine.
type LocalSpawner struct {
	Gorun string // path of the gorun binary
}

// AgentCommand implements Spawner.
func (s LocalSpawner) AgentCommand(string) *exec.Cmd {
	cmd := exec.Command(s.Gorun, AgentCommandName)
	// Own process group: a Ctrl-C on the terminal reaches the launcher
	// only, which forwards it once. The agent ends with the launcher: a
	// SIGTERM (as its stream ending does) ends its ranks within the
	// grace period and removes the job's shared memory files, and its
	// ranks die with it if it is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	return cmd
}

// SSHSpawner starts the agent over the system ssh client, so that the
// user's ~/.ssh/config, agent, ProxyJump and known_hosts apply.
type SSHSpawner struct {
	SSH            []string // the ssh command and its own options, e.g. ["ssh", "-F", "cfg"]
	Gorun          string   // path of gorun on the remote host
	ConnectTimeout int      // seconds
}

// AgentCommand implements Spawner.
func (s SSHSpawner) AgentCommand(host string) *exec.Cmd {
	args := append([]string{}, s.SSH[1:]...)
	args = append(args, "-o", "BatchMode=yes", "-T")
	if s.ConnectTimeout > 0 {
		args = append(args, "-o", "ConnectTimeout="+strconv.Itoa(s.ConnectTimeout))
	}
	if strings.Contains(host, ":") { // IPv6
		host = strings.Trim(host, "[]")
	}
	args = append(args, host, "exec "+shellQuote(s.Gorun)+" "+AgentCommandName)
	cmd := exec.Command(s.SSH[0], args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// AgentCommandName is the hidden subcommand of gorun that runs a host's
// agent (package agent's Run).
const AgentCommandName = proto.AgentCommandName

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isLocal reports whether a hostfile name means this machine.
func isLocal(host string) bool {
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	name, err := os.Hostname()
	return err == nil && host == name
}

// SentinelCommandName is the hidden subcommand of gorun that runs an
// agent's sentinel (package agent's Sentinel).
const SentinelCommandName = proto.SentinelCommandName

// HubCommandName is the hidden subcommand of gorun that runs a dedicated
// ParamHub (an agent starts it for Config.Hubs).
const HubCommandName = proto.HubCommandName
