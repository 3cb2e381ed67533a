package agent

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The agent reserves each rank's ports and the rank binds them later, so
// another socket could take one in between. Outgoing connections (the
// ranks' own dials, SSH) take their local ports from the kernel's
// ephemeral range, and so does a listener on port 0; FreePort therefore
// picks ports below that range, where only explicit binds go (tests that
// bind ports later use it too).

// portFloor is the lowest port FreePort hands out.
const portFloor = 10000

// FreePort finds a port that is free for both TCP and UDP (memberlist binds
// both), below the ephemeral range, and not already in taken.
func FreePort(taken []int) (int, error) {
	hi := ephemeralStart()
	for range 500 {
		port := portFloor + rand.IntN(hi-portFloor)
		if !slices.Contains(taken, port) && bindable(port) {
			return port, nil
		}
	}
	return 0, errors.New("no free port found below the ephemeral range")
}

// ephemeralStart is where the kernel's ephemeral port range starts (Linux
// reports it), or 32768, the usual start, if it is unknown or too low to
// leave room below it.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v >= portFloor+1000 {
				return v
			}
		}
	}
	return 32768
}

// bindable reports whether port can be bound on every address for TCP and
// for UDP right now.
func bindable(port int) bool {
	addr := ":" + strconv.Itoa(port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
