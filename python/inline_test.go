package python_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestInline: small operations that run in the calling thread
// (gorun.torch.INLINE_BYTES) give the threaded path's bits and the
// reference's, at sizes around the threshold, every native dtype and
// op, beside a large nonblocking all-reduce; on 1, 2, 3 and 5 ranks. The
// all-reduces go through allreduce's fast path, which must have run (and
// not for the sizes above the threshold: fast < checks), and through the
// native fast path, which must have run every inline one (the script
// checks the count).
func TestInline(t *testing.T) {
	setup(t)
	okRE := regexp.MustCompile(`gorun-inline-ok rank=(\d+) checks=(\d+) inline=(\d+) fast=(\d+) native=(-?\d+)`)
	for _, np := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint(np), func(t *testing.T) {
			out, code := job(t, np, nil, "tests/inline.py")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for r, m := range everyRank(t, out, np, okRE) {
				checks, _ := strconv.Atoi(m[2])
				fast, _ := strconv.Atoi(m[4])
				if checks == 0 || m[3] == "0" || fast == 0 || fast >= checks {
					t.Fatalf("rank %s: nothing checked, nothing ran inline, or the fast path ran none or all: %v", r, m)
				}
				if native, _ := strconv.Atoi(m[5]); native <= 0 {
					t.Fatalf("rank %s: the native fast path ran nothing: %v", r, m)
				}
			}
		})
	}
}

// TestInlineFailures: an inline operation ends with its timeout (Timeout)
// and with a lost rank (PeerLost naming it), as a threaded one does;
// through the native fast path and through Python's, small (in the
// calling thread) and large (on gorun's goroutines).
func TestInlineFailures(t *testing.T) {
	setup(t)
	for _, native := range []string{"1", "0"} {
		for _, bytes := range []string{"256", "4194304"} {
			t.Run("native="+native+"/bytes="+bytes, func(t *testing.T) {
				t.Setenv("GORUN_TORCH_NATIVE", native)
				inlineFailures(t, bytes)
			})
		}
	}
}

func inlineFailures(t *testing.T, bytes string) {
	seenRE := regexp.MustCompile(`gorun-inline-seen rank=(\d+) error=(\w+) after=([0-9.]+): (.*)`)
	out, code := job(t, 3, nil, "tests/inline.py", "--mode", "timeout", "--bytes", bytes)
	if code == 0 {
		t.Fatalf("exit 0:\n%s", out)
	}
	if m := lines(out, seenRE)["0"]; m == nil || m[2] != "Timeout" {
		t.Fatalf("rank 0 did not time out:\n%s", out)
	}
	out, code = job(t, 3, nil, "tests/inline.py", "--mode", "kill", "--bytes", bytes)
	if code == 0 {
		t.Fatalf("exit 0:\n%s", out)
	}
	seen := lines(out, seenRE)
	for _, r := range []string{"0", "1"} {
		m := seen[r]
		if m == nil || m[2] != "PeerLost" || !strings.Contains(m[4], "rank 2") {
			t.Fatalf("rank %s: %v, want PeerLost naming rank 2:\n%s", r, m, out)
		}
	}
}
