package e2e

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestManyRanksOverSSH: 16 ranks on the 4 test hosts (4 per host) check
// random collectives of every kind against a reference, connecting to
// each other only as the algorithms need; then the last rank is killed in
// the middle of an all-reduce and all 15 survivors, on every host, name
// it, those that never talked to it included (the abort floods). The
// detection delays (kill to each survivor's error) are logged.
func TestManyRanksOverSSH(t *testing.T) {
	r := needRig(t)
	bin := r.selftest(t)
	hf := r.hostfile(t, 4, 4)
	res := r.run(t, "-hostfile", hf, bin, "-rounds", "30", "-seed", "19")
	if res.code != 0 || strings.Count(res.stdout, "30 rounds OK") != 16 ||
		strings.Count(res.stdout, "(hosts [[0 1 2 3] [4 5 6 7] [8 9 10 11] [12 13 14 15]])") != 16 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	r.noLeftovers(t)

	res = r.run(t, "-hostfile", hf, "--grace", "2s", bin, "-drill", "kill", "-mib", "4")
	if res.code == 0 {
		t.Fatalf("job succeeded:\n%s", res.stdout)
	}
	strike := regexp.MustCompile(`STRIKE (\d+)`).FindStringSubmatch(res.stdout)
	lost := regexp.MustCompile(`\[(\d+)\] LOST (\d+) peerlost=(\w+) err=(.*)`).FindAllStringSubmatch(res.stdout, -1)
	if strike == nil || len(lost) != 15 {
		t.Fatalf("want the strike and 15 survivors' reports:\n%s\n%s", res.stdout, res.stderr)
	}
	at, _ := strconv.ParseInt(strike[1], 10, 64)
	var delays []time.Duration
	for _, m := range lost {
		if m[3] != "true" || !strings.Contains(m[4], "rank 15 lost") {
			t.Fatalf("rank %s did not name rank 15 as lost: %s", m[1], m[0])
		}
		ns, _ := strconv.ParseInt(m[2], 10, 64)
		delays = append(delays, time.Duration(ns-at))
	}
	slices.Sort(delays)
	t.Logf("16 ranks on 4 hosts: kill to error, fastest %v, median %v, slowest %v", delays[0], delays[len(delays)/2], delays[len(delays)-1])
	r.noLeftovers(t)
}
