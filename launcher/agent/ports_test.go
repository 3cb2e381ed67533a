package agent

import (
	"net"
	"slices"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeral: reserved ports lie below the ephemeral range
// (where no outgoing connection can take them before the rank binds),
// avoid the ports already taken, and can be bound.
func TestFreePortBelowEphemeral(t *testing.T) {
	hi := ephemeralStart()
	var taken []int
	for range 30 {
		p, err := FreePort(taken)
		if err != nil {
			t.Fatal(err)
		}
		if p < portFloor || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, portFloor, hi)
		}
		if slices.Contains(taken, p) {
			t.Fatalf("port %d handed out twice", p)
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
		taken = append(taken, p)
	}
	// A port that is in use is never handed out.
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if bindable(l.Addr().(*net.TCPAddr).Port) {
		t.Fatal("a port in use counted as bindable")
	}
}

// TestIdleEnv: Open MPI ranks yield when idle once a host holds more of
// them than cores, as mpirun makes them, unless the user said otherwise.
func TestIdleEnv(t *testing.T) {
	for _, c := range []struct {
		ranks, cpus int
		env         []string
		want        bool
	}{
		{2, 2, nil, false},
		{3, 2, nil, true},
		{64, 8, nil, true},
		{4, 2, []string{"OMPI_MCA_mpi_yield_when_idle=0"}, false},
		{1, 1, nil, false},
	} {
		got := idleEnv(c.ranks, c.cpus, c.env)
		if (got != nil) != c.want || got != nil && got[0] != "OMPI_MCA_mpi_yield_when_idle=1" {
			t.Errorf("%d ranks on %d cpus, env %v: %v", c.ranks, c.cpus, c.env, got)
		}
	}
}
