package cpu

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMoveOff runs on a thread of its own: MoveOff(c) takes the thread off
// CPU c and leaves its affinity as it was; a thread bound to c alone
// stays, and says so.
func TestMoveOff(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.SchedSetaffinity(0, &orig) }()
	c, ok := Current()
	if !ok || !orig.IsSet(c) {
		t.Fatalf("Current: %d, %v; the thread may run on %d CPUs", c, ok, orig.Count())
	}
	affinity := func() unix.CPUSet {
		t.Helper()
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			t.Fatal(err)
		}
		return set
	}
	if orig.Count() >= 2 {
		// Off c, then where it is: the scheduler may move it back at any
		// time after, so a move is seen at least once in a few tries.
		moved := false
		for i := 0; i < 5 && !moved; i++ {
			c, _ = Current()
			if !MoveOff(c) {
				t.Fatalf("MoveOff(%d) did not move a thread that may run on %d CPUs", c, orig.Count())
			}
			if affinity() != orig {
				t.Fatal("MoveOff changed the thread's affinity")
			}
			now, _ := Current()
			moved = now != c
		}
		if !moved {
			t.Fatal("MoveOff left the thread on its CPU five times")
		}
	}
	var one unix.CPUSet
	c, _ = Current()
	one.Set(c)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	if MoveOff(c) {
		t.Fatalf("MoveOff(%d) moved a thread bound to it", c)
	}
	if affinity() != one {
		t.Fatal("MoveOff changed a bound thread's affinity")
	}
}
