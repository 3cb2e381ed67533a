package membership

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"

	"github.com/hashicorp/memberlist"
)

// group starts size members of one job on loopback, each seeded with all
// the others, with the events each one sees recorded.
type group struct {
	ms  []*Member
	rec []*recorder
}

type recorder struct {
	mu    sync.Mutex
	dead  map[int]time.Time
	left  map[int]bool
	alive map[int]time.Time
}

func (r *recorder) events() Events {
	return Events{
		Dead:  func(rank int, _ string) { r.mu.Lock(); r.dead[rank] = time.Now(); r.mu.Unlock() },
		Left:  func(rank int) { r.mu.Lock(); r.left[rank] = true; r.mu.Unlock() },
		Alive: func(rank int) { r.mu.Lock(); r.alive[rank] = time.Now(); r.mu.Unlock() },
	}
}

// sawAlive reports when rank was last reported alive again after a death.
func (r *recorder) sawAlive(rank int) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.alive[rank]
	return t, ok
}

func (r *recorder) sawDead(rank int) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.dead[rank]
	return t, ok
}

func (r *recorder) sawLeft(rank int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left[rank]
}

func testConfig(job string, rank, size int, secret string) Config {
	c := DefaultConfig()
	c.JobID, c.Rank, c.Size, c.Secret = job, rank, size, []byte(secret)
	c.BindAddr, c.AdvertiseAddr = "127.0.0.1", "127.0.0.1"
	c.DataAddr = "127.0.0.1:" + strconv.Itoa(20000+rank)
	return c
}

func start(t *testing.T, cfgs []Config) *group {
	t.Helper()
	g := &group{}
	for _, c := range cfgs {
		r := &recorder{dead: map[int]time.Time{}, left: map[int]bool{}, alive: map[int]time.Time{}}
		m, err := Start(c, r.events())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		g.ms, g.rec = append(g.ms, m), append(g.rec, r)
	}
	var seeds []string
	for _, m := range g.ms {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port())))
	}
	for _, m := range g.ms {
		m.cfg.Seeds = slices.Clone(seeds) // one per rank: each joins a few
	}
	return g
}

// waitAll runs WaitAll on every member at once.
func (g *group) waitAll(timeout time.Duration) ([][]Peer, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addrs, errs := make([][]Peer, len(g.ms)), make([]error, len(g.ms))
	var wg sync.WaitGroup
	for i, m := range g.ms {
		wg.Add(1)
		go func() { defer wg.Done(); addrs[i], errs[i] = m.WaitAll(ctx) }()
	}
	wg.Wait()
	return addrs, errs
}

func TestJoinAll(t *testing.T) {
	for _, n := range []int{1, 2, 4, 33} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var cfgs []Config
			for r := range n {
				c := testConfig("job1", r, n, "secret-secret-secret")
				c.Host = "host" + strconv.Itoa(r/2)
				cfgs = append(cfgs, c)
			}
			g := start(t, cfgs)
			addrs, errs := g.waitAll(20 * time.Second)
			for i := range g.ms {
				if errs[i] != nil {
					t.Fatalf("rank %d: %v", i, errs[i])
				}
				for r, a := range addrs[i] {
					if a.Data != cfgs[r].DataAddr || a.Host != cfgs[r].Host {
						t.Fatalf("rank %d sees rank %d at %+v, want %q on %q", i, r, a, cfgs[r].DataAddr, cfgs[r].Host)
					}
				}
			}
		})
	}
}

// TestSeedsByRank: with a seed per rank, a rank joins its parent in the
// join tree first (with a random other every fifth try), then, once
// joined, repairs once a second with a known rank, and sometimes a
// missing one when no rank has appeared for a while; never itself.
func TestSeedsByRank(t *testing.T) {
	all8 := []int{0, 1, 2, 3, 4, 5, 6, 7}
	seeds8 := []string{"h:0", "h:1", "h:2", "h:3", "h:4", "h:5", "h:6", "h:7"}
	m := &Member{cfg: Config{Rank: 5, Size: 8, Seeds: seeds8}, peers: map[int]Peer{}}
	if got, repair := m.seedsFor(all8, attempt{}); !slices.Equal(got, []string{"h:2"}) || repair {
		t.Fatalf("first seeds %v (repair %v), want its parent h:2", got, repair)
	}
	if got, _ := m.seedsFor(all8, attempt{n: 5}); len(got) != 2 || got[0] != "h:2" || slices.Contains(got, "h:5") {
		t.Fatalf("fifth try's seeds %v, want h:2 and another, never itself", got)
	}
	for r := range 8 {
		if r != 3 && r != 6 {
			m.peers[r] = Peer{}
		}
	}
	joined := attempt{n: 1, joined: true}
	if got, _ := m.seedsFor(all8, joined); len(got) != 0 {
		t.Fatalf("joined, ranks appearing: joins %v", got)
	}
	every := repairEvery(8) // a job of 8 repairs every retryInterval; one of 256, every repairAfter
	if every != retryInterval || repairEvery(256) != repairAfter || repairEvery(100) != 400*time.Millisecond {
		t.Fatalf("repairEvery: 8 ranks %v, 100 ranks %v, 256 ranks %v", every, repairEvery(100), repairEvery(256))
	}
	joined.idle, joined.sinceRepair = repairAfter, every/2
	if got, _ := m.seedsFor(all8, joined); len(got) != 0 {
		t.Fatalf("joined, repaired recently: joins %v", got)
	}
	joined.sinceRepair = every
	got, repair := m.seedsFor(all8, joined)
	if len(got) != 1 || !repair || slices.Contains([]string{"h:3", "h:5", "h:6"}, got[0]) {
		t.Fatalf("first repair joins %v (repair %v), want one known rank", got, repair)
	}
	// After a long stall, a repair also joins a missing rank, with a
	// chance of two in the six ranks known.
	joined.idle = 3 * repairAfter
	withMissing := 0
	for range 300 {
		got, _ = m.seedsFor(all8, joined)
		if len(got) < 1 || len(got) > 2 || slices.Contains([]string{"h:3", "h:5", "h:6"}, got[0]) {
			t.Fatalf("long stall's repair joins %v, want a known rank first", got)
		}
		if len(got) == 2 {
			if !slices.Contains([]string{"h:3", "h:6"}, got[1]) {
				t.Fatalf("long stall's repair joins %v, want a missing rank second", got)
			}
			withMissing++
		}
	}
	if withMissing == 0 || withMissing == 300 {
		t.Fatalf("long stall: %d repairs of 300 joined a missing rank, want some, not all", withMissing)
	}
	m0 := &Member{cfg: Config{Rank: 0, Size: 2, Seeds: []string{"s0", "s1"}}, peers: map[int]Peer{0: {}}}
	if got, _ := m0.seedsFor([]int{0, 1}, attempt{}); len(got) != 0 {
		t.Fatalf("rank 0 joins %v, want no one (it is the root)", got)
	}
	if got, _ := m0.seedsFor([]int{0, 1}, attempt{idle: repairAfter, sinceRepair: repairAfter}); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("rank 0, alone for a while, joins %v, want the missing s1", got)
	}
	other := &Member{cfg: Config{Rank: 0, Size: 4, Seeds: []string{"a", "b"}}}
	if got, _ := other.seedsFor([]int{0, 1, 2, 3}, attempt{n: 3, joined: true}); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("seeds not one per rank: %v, want all", got)
	}
	// A restarted rank 5 waits for the view's ranks 1, 3 and 5: it joins
	// the first of them (its tree parent, 2, was lost), and repairs only
	// with ranks of the view.
	back := &Member{cfg: m.cfg, peers: map[int]Peer{5: {}}}
	if got, _ := back.seedsFor([]int{1, 3, 5}, attempt{rejoin: true}); !slices.Equal(got, []string{"h:1"}) {
		t.Fatalf("restarted rank's first seeds %v, want h:1", got)
	}
	got, _ = back.seedsFor([]int{1, 3, 5}, attempt{n: 5, joined: true, rejoin: true, idle: repairAfter, sinceRepair: repairAfter})
	if len(got) != 1 || got[0] != "h:1" && got[0] != "h:3" {
		t.Fatalf("restarted rank repairs with %v, want h:1 or h:3", got)
	}
	// A restarted rank 0 is no root: it joins the view's first other rank
	// (before, it joined no one and never came back), and while that
	// fails, two others of the view every fifth try.
	back0 := &Member{cfg: Config{Rank: 0, Size: 8, Seeds: seeds8}, peers: map[int]Peer{}}
	if got, _ := back0.seedsFor([]int{0, 2, 4, 6}, attempt{rejoin: true}); !slices.Equal(got, []string{"h:2"}) {
		t.Fatalf("restarted rank 0's first seeds %v, want h:2", got)
	}
	got, _ = back0.seedsFor([]int{0, 2, 4, 6}, attempt{n: 5, rejoin: true})
	if len(got) < 2 || got[0] != "h:2" || slices.Contains(got, "h:0") {
		t.Fatalf("restarted rank 0's seeds while unjoined %v, want h:2 and others of the view, never itself", got)
	}
}

// TestMissingChance: no direct joins of missing ranks while ranks appear,
// then a chance of two in the ranks known, doubling every two seconds.
func TestMissingChance(t *testing.T) {
	for _, c := range []struct {
		idle  time.Duration
		known int
		want  float64
	}{
		{0, 256, 0}, {2999 * time.Millisecond, 2, 0},
		{3 * time.Second, 256, 2.0 / 256}, {5 * time.Second, 256, 4.0 / 256},
		{17 * time.Second, 256, 1}, {16 * time.Second, 256, 1 / math.Sqrt2},
		{3 * time.Second, 2, 1}, {3 * time.Second, 0, 1}, {time.Hour, 1024, 1},
	} {
		if got := missingChance(c.idle, c.known); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("missingChance(%v, %d) = %v, want %v", c.idle, c.known, got, c.want)
		}
	}
}

// TestJoinTree: the join tree spans every rank from rank 0, keeps joins
// on their host but for one per host, and no rank is the parent of more
// than four, for any layout: one host, a rank a host, hosts of 4, hosts
// of unequal sizes with ranks interleaved across them.
func TestJoinTree(t *testing.T) {
	layouts := map[string]func(r int) string{
		"one host":    func(int) string { return "10.0.0.1" },
		"rank a host": func(r int) string { return "10.0.1." + strconv.Itoa(r) },
		"4 a host":    func(r int) string { return "10.0.2." + strconv.Itoa(r/4) },
		"round robin": func(r int) string { return "host" + strconv.Itoa(r%7) },
		"uneven":      func(r int) string { return "h" + strconv.Itoa(min(r/3, r/11)) },
	}
	for name, hostOf := range layouts {
		for _, n := range []int{1, 2, 3, 5, 16, 33, 256, 1024} {
			seeds := make([]string, n)
			for r := range seeds {
				seeds[r] = net.JoinHostPort(hostOf(r), strconv.Itoa(7000+r))
			}
			parent := joinTree(seeds)
			children := make([]int, n)
			cross := 0
			for r, p := range parent {
				if r == 0 {
					if p != -1 {
						t.Fatalf("%s, %d ranks: rank 0 joins %d, want the root", name, n, p)
					}
					continue
				}
				if p < 0 || p >= n || p == r {
					t.Fatalf("%s, %d ranks: rank %d joins %d", name, n, r, p)
				}
				children[p]++
				if hostOf(p) != hostOf(r) {
					cross++
				}
				// Following parents from r reaches rank 0 in fewer than n
				// steps: no cycle, one tree.
				q, steps := r, 0
				for q != 0 && steps < n {
					q, steps = parent[q], steps+1
				}
				if q != 0 {
					t.Fatalf("%s, %d ranks: rank %d does not reach rank 0", name, n, r)
				}
			}
			hosts := map[string]bool{}
			for r := range n {
				hosts[hostOf(r)] = true
			}
			if most := slices.Max(children); most > 4 {
				t.Fatalf("%s, %d ranks: a rank is the parent of %d", name, n, most)
			}
			if cross != len(hosts)-1 {
				t.Fatalf("%s, %d ranks: %d joins cross hosts, want %d (hosts - 1)", name, n, cross, len(hosts)-1)
			}
		}
	}
}

// TestWrongSecret: a member with another secret never joins, and the
// errors say which ranks are missing and that the secret is wrong.
func TestWrongSecret(t *testing.T) {
	cfgs := []Config{testConfig("job2", 0, 3, "secret-secret-secret"), testConfig("job2", 1, 3, "secret-secret-secret"), testConfig("job2", 2, 3, "another-secret-entirely")}
	g := start(t, cfgs)
	_, errs := g.waitAll(2 * time.Second)
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "ranks [0 1] never appeared") || !strings.Contains(errs[2].Error(), "wrong job secret") {
		t.Fatalf("rank 2: %v", errs[2])
	}
	for _, r := range []int{0, 1} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "ranks [2] never appeared") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
}

// TestOtherJob: a member of another job (same secret, other job id, so
// another label) is never taken for one of this job's ranks.
func TestOtherJob(t *testing.T) {
	cfgs := []Config{testConfig("jobA", 0, 3, "secret-secret-secret"), testConfig("jobA", 1, 3, "secret-secret-secret"), testConfig("jobB", 2, 3, "secret-secret-secret")}
	g := start(t, cfgs)
	_, errs := g.waitAll(2 * time.Second)
	for _, r := range []int{0, 1} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "ranks [2] never appeared") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "ranks [0 1] never appeared") {
		t.Fatalf("the other job's member: %v", errs[2])
	}
}

// TestBadMetadata: members whose metadata is short, names no valid
// address, claims a rank out of range or a name that does not match its
// rank are ignored.
func TestBadMetadata(t *testing.T) {
	g := start(t, []Config{testConfig("job3", 0, 2, "secret-secret-secret")})
	meta := func(rank int, addr string) []byte {
		return encodeMeta(rank, addr, "h")
	}
	_ = func(rank int, addr string) []byte {
		b := []byte{byte(rank), byte(rank >> 8), byte(rank >> 16), byte(rank >> 24)}
		return append(b, addr...)
	}
	for _, n := range []*memberlist.Node{
		{Name: "job3-1", Meta: []byte{1, 0}},
		{Name: "job3-1", Meta: meta(1, "no-port")},
		{Name: "job3-7", Meta: meta(7, "127.0.0.1:1")},
		{Name: "job3-0", Meta: meta(1, "127.0.0.1:1")},
		{Name: "other-1", Meta: meta(1, "127.0.0.1:1")},
	} {
		(*events)(g.ms[0]).NotifyJoin(n)
	}
	if miss := g.ms[0].missing([]int{0, 1}); !slices.Equal(miss, []int{1}) {
		t.Fatalf("after bad members, missing %v, want [1]", miss)
	}
	(*events)(g.ms[0]).NotifyJoin(&memberlist.Node{Name: "job3-1", Meta: meta(1, "127.0.0.1:1")})
	if miss := g.ms[0].missing([]int{0, 1}); len(miss) != 0 {
		t.Fatalf("a good member was not taken: missing %v", miss)
	}
	if r, ok := parseBye(encodeBye(5)); !ok || r != 5 {
		t.Fatal("goodbye does not round-trip")
	}
	for _, b := range [][]byte{nil, {'B'}, {'X', 1, 0, 0, 0}, append(encodeBye(1), 0)} {
		if _, ok := parseBye(b); ok {
			t.Fatalf("parseBye(%q) accepted", b)
		}
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, meta(0, ""), meta(0, "host")} {
		if _, _, ok := parseMeta(b); ok {
			t.Fatalf("parseMeta(%q) accepted", b)
		}
	}
}

// TestDeadAndLeft: a member that vanishes without leaving is reported
// dead by every other member within the configured timers' bound; one that
// closes cleanly is reported as left, not dead.
func TestDeadAndLeft(t *testing.T) {
	var cfgs []Config
	for r := range 4 {
		cfgs = append(cfgs, testConfig("job4", r, 4, "secret-secret-secret"))
	}
	g := start(t, cfgs)
	if _, errs := g.waitAll(10 * time.Second); errs[0] != nil || errs[3] != nil {
		t.Fatal(errs)
	}
	// Suspicion runs SuspicionMult probe intervals (at most twice that),
	// after a probe cycle over the members: about 2 s with the defaults.
	c := cfgs[0]
	bound := time.Duration(c.SuspicionMult*2+len(cfgs)+2)*c.ProbeInterval + c.ProbeTimeout
	t0 := time.Now()
	kill(g.ms[3])                         // no goodbye: as SIGKILL
	g.ms[2].Close()                       // a clean goodbye
	deadline := time.Now().Add(4 * bound) // slack for a loaded machine
	for _, i := range []int{0, 1} {
		for {
			at, ok := g.rec[i].sawDead(3)
			if ok {
				t.Logf("rank %d saw rank 3 dead after %v (configured bound %v)", i, at.Sub(t0).Round(time.Millisecond), bound)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d: rank 3 not declared dead within %v", i, 4*bound)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for !g.rec[i].sawLeft(2) {
			if time.Now().After(deadline) {
				_, d := g.rec[i].sawDead(2)
				t.Fatalf("rank %d: rank 2's clean leave not reported (reported dead: %v)", i, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, dead := g.rec[i].sawDead(2); dead {
			t.Fatalf("rank %d: rank 2 left cleanly but was reported dead", i)
		}
	}
}

// TestRestartedElsewhere: a rank that dies (no goodbye) and is restarted
// on another host, under its name at a new gossip address, is taken back
// by the others once gossip declared the old one dead: they see its new
// data address, and it sees theirs. (With DeadNodeReclaimTime they take it
// at once, about 2 s here; without, only once memberlist has dropped the
// dead node, about 10 s here: this test passes either way.)
func TestRestartedElsewhere(t *testing.T) {
	const secret = "secret-secret-secret"
	g := start(t, []Config{testConfig("job9", 0, 3, secret), testConfig("job9", 1, 3, secret), testConfig("job9", 2, 3, secret)})
	if _, errs := g.waitAll(10 * time.Second); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	kill(g.ms[1]) // a death: no leave, no goodbye
	proctest.WaitFor(t, 15*time.Second, func() bool { _, ok := g.rec[0].sawDead(1); return ok }, "rank 0 sees rank 1 dead")
	cfg := testConfig("job9", 1, 3, secret)
	cfg.DataAddr = "127.0.0.1:29999"
	cfg.Seeds = g.ms[0].cfg.Seeds
	back, err := Start(cfg, Events{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close() })
	if back.Port() == g.ms[1].Port() {
		t.Fatalf("the restarted member listens at the old port %d: not a new address", back.Port())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peers, err := back.WaitFor(ctx, []int{0, 1, 2})
	if err != nil || peers[0].Data != g.ms[0].cfg.DataAddr {
		t.Fatalf("restarted member: %v, %v", peers, err)
	}
	proctest.WaitFor(t, 15*time.Second, func() bool {
		g.ms[0].mu.Lock()
		defer g.ms[0].mu.Unlock()
		return g.ms[0].peers[1].Data == "127.0.0.1:29999"
	}, "rank 0 takes the restarted rank's new address")
}

// TestGossipPortTaken: a rank whose reserved gossip port another socket
// took before it bound it listens on a port the kernel picks and still
// joins: the others learn its address by gossip, though their seed for it
// is the reserved port.
func TestGossipPortTaken(t *testing.T) {
	const n = 3
	ports := make([]int, n)
	for r := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[r] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	thief, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Close()
	var seeds []string
	for _, p := range ports {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	var ms []*Member
	for r := range n {
		c := testConfig("job-taken", r, n, "secret-secret-secret")
		c.BindPort, c.Seeds = ports[r], seeds
		m, err := Start(c, Events{})
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	if ms[1].Port() == ports[1] || ms[1].Port() == 0 {
		t.Fatalf("rank 1 listens on %d (its taken port %d)", ms[1].Port(), ports[1])
	}
	g := &group{ms: ms}
	_, errs := g.waitAll(20 * time.Second)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// scaleRanks sizes TestJoinAtScale: go test -run TestJoinAtScale
// ./membership/ -args -scale=256 (12-16 s here beside other tests; 5-8 s
// on an idle machine).
var scaleRanks = flag.Int("scale", 0, "members in TestJoinAtScale (0: 128, 64 under the race detector)")

// TestJoinAtScale: 128 members (64 under the race detector) on loopback
// start waiting at once, as a job's ranks do, and each finds every other,
// through the join tree and its repairs, while no member serves more
// than a few of the state exchanges. Every rank used to join rank 0,
// which so served at least one per rank: at 256 ranks on 64 test hosts
// sharing 2 cores, rank 0, one process among 256, could not serve them
// within memberlist's stream timeout, and ranks timed out joining it
// (the 256-rank runs of results/scale/README.md, 2026-11-26): the old
// plan fails this test with rank 0 serving one a member (255 at -scale
// 256). In one process the members share its CPU, so rank 0 is not
// starved as on the rig; at 256 members with
// memberlist's LAN timers the old plan still took 13 s here on an idle
// machine and 22-63 s beside other tests (a run in three failing at
// 60 s), the new one 5-8 s and 9-16 s.
func TestJoinAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of members; skipped under -short")
	}
	n := 128
	if raceDetector {
		n = 64
	}
	if *scaleRanks > 0 {
		n = *scaleRanks
	}
	var cfgs []Config
	streams := make([]*streamCounter, n)
	for r := range n {
		c := testConfig("job-scale", r, n, "secret-secret-secret")
		c.Host = "host" + strconv.Itoa(r/4)
		// Timers slower than a LAN's: a process of hundreds of members
		// on a loaded machine misses probes, and suspicion and its
		// refutation would take CPU from the join this test is about.
		c.ProbeInterval, c.ProbeTimeout = 2*time.Second, time.Second
		streams[r] = &streamCounter{}
		c.Logger = slog.New(streams[r])
		cfgs = append(cfgs, c)
	}
	g := start(t, cfgs)
	defer func() {
		// At once: one by one, each goodbye's linger adds up to minutes.
		var wg sync.WaitGroup
		for _, m := range g.ms {
			wg.Add(1)
			go func() { defer wg.Done(); m.Close() }()
		}
		wg.Wait()
	}()
	t0 := time.Now()
	addrs, errs := g.waitAll(2 * time.Minute) // a safety net, not a bound
	t.Logf("%d members joined in %v", n, time.Since(t0).Round(time.Millisecond))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range g.ms {
		for r, a := range addrs[i] {
			if a.Data != cfgs[r].DataAddr || a.Host != cfgs[r].Host {
				t.Fatalf("rank %d sees rank %d at %+v, want %q on %q", i, r, a, cfgs[r].DataAddr, cfgs[r].Host)
			}
		}
	}
	total, most, at := 0, 0, 0
	for r, s := range streams {
		k := int(s.n.Load())
		total += k
		if k > most {
			most, at = k, r
		}
	}
	t.Logf("state exchanges served: %d in all, rank 0 %d, at most %d (rank %d)", total, streams[0].n.Load(), most, at)
	if total < n-1 {
		t.Fatalf("%d state exchanges served in all, fewer than one a rank: are streams still counted?", total)
	}
	if most >= n/3 {
		t.Fatalf("rank %d served %d state exchanges, want fewer than %d: joins converge on one member", at, most, n/3)
	}
}

// streamCounter counts the stream connections a member accepted (state
// exchanges and goodbyes), from memberlist's debug line for each.
type streamCounter struct{ n atomic.Int64 }

func (c *streamCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *streamCounter) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "msg" && strings.Contains(a.Value.String(), "memberlist: Stream connection") {
			c.n.Add(1)
		}
		return true
	})
	return nil
}
func (c *streamCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *streamCounter) WithGroup(string) slog.Handler      { return c }

// TestStall: WaitFor waits for a start that keeps making progress past
// StallTimeout (here members start one at a time, each well over half of
// it after the last appeared, so the whole start takes twice as long),
// and gives up once no rank has appeared for StallTimeout, its ctx
// notwithstanding, naming the ranks missing.
func TestStall(t *testing.T) {
	const n, stall = 5, 2 * time.Second
	ports := make([]int, n)
	for r := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[r] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	var seeds []string
	for _, p := range ports {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	startRank := func(r, size int) *Member {
		c := testConfig("job-stall", r, size, "secret-secret-secret")
		c.BindPort, c.Seeds, c.StallTimeout = ports[r], seeds[:size], stall
		m, err := Start(c, Events{})
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	var first *Member
	for r := range n {
		if r > 0 {
			time.Sleep(stall / 2)
		}
		m := startRank(r, n)
		if r == 0 {
			first = m
		}
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[r] = m.WaitAll(context.Background()) }()
		proctest.WaitFor(t, 30*time.Second, func() bool { return len(first.missing([]int{r})) == 0 }, "rank 0 sees rank "+strconv.Itoa(r))
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("a start that kept making progress for %v failed: %v", time.Duration(n-1)*stall/2, err)
	}

	// A job of two whose rank 1 never starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := l.Addr().String()
	l.Close()
	c := testConfig("job-alone", 0, 2, "secret-secret-secret")
	c.Seeds, c.StallTimeout = []string{"127.0.0.1:0", nobody}, 300*time.Millisecond
	alone, err := Start(c, Events{})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	_, err = alone.WaitAll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ranks [1] never appeared: none appeared for 300ms") {
		t.Fatalf("got %v, want a stall naming rank 1", err)
	}
}

// TestLogWriterLevels: memberlist's lines about a foreign label or a failed
// decryption are warnings about the job secret; a stream that ended before
// its first byte (the empty label: a dial given up on an overloaded host),
// or whose label did not come in time, is not, and neither is the rest of
// memberlist's chatter.
func TestLogWriterLevels(t *testing.T) {
	for _, c := range []struct {
		line string
		warn bool
	}{
		{`[ERR] memberlist: discarding stream with unacceptable label "": from=10.0.0.2:4000`, false},
		{`[ERR] memberlist: failed to receive and remove the stream label header: read tcp 198.18.0.68:12147->198.18.0.12:33884: i/o timeout from=198.18.0.12:33884`, false},
		{`[ERR] memberlist: discarding stream with unacceptable label "otherjob": from=10.0.0.2:4000`, true},
		{`[ERR] memberlist: discarding packet with unacceptable label "": from=10.0.0.2:4000`, true},
		{`[ERR] memberlist: Failed to decrypt packet: No installed keys could decrypt the message`, true},
		{`[DEBUG] memberlist: Stream connection from=10.0.0.2:4000`, false},
	} {
		var b strings.Builder
		w := &logWriter{log: slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		if _, err := w.Write([]byte(c.line + "\n")); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "level=WARN"); got != c.warn {
			t.Errorf("%s: logged %q, want a warning: %v", c.line, b.String(), c.warn)
		}
	}
}

// TestGossipStretch: gossip's timers hold up to 64 ranks and stretch with
// the job beyond, at most 4 times.
func TestGossipStretch(t *testing.T) {
	for size, want := range map[int]time.Duration{1: 1, 2: 1, 63: 1, 64: 1, 127: 1, 128: 2, 200: 3, 256: 4, 4096: 4} {
		if got := gossipStretch(size); got != want {
			t.Errorf("gossipStretch(%d) = %d, want %d", size, got, want)
		}
	}
}
