package membership

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/proctest"

	"github.com/hashicorp/memberlist"
)

// cutNet is a member's network that can be cut off: while cut, nothing
// goes out and nothing that comes in is read (a host whose link is down).
type cutNet struct {
	memberlist.Transport
	cut     atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{}
	once    sync.Once
}

func newCutNet(inner memberlist.Transport) *cutNet {
	c := &cutNet{Transport: inner, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), stop: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-inner.PacketCh():
				if c.cut.Load() {
					continue
				}
				select {
				case c.packets <- p:
				case <-c.stop:
					return
				}
			case <-c.stop:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case conn := <-inner.StreamCh():
				if c.cut.Load() {
					conn.Close()
					continue
				}
				select {
				case c.streams <- conn:
				case <-c.stop:
					conn.Close()
					return
				}
			case <-c.stop:
				return
			}
		}
	}()
	return c
}

func (c *cutNet) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.cut.Load() {
		return time.Now(), nil // lost on the way
	}
	return c.Transport.WriteTo(b, addr)
}

func (c *cutNet) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if c.cut.Load() {
		return nil, errors.New("network is unreachable")
	}
	return c.Transport.DialTimeout(addr, d)
}

func (c *cutNet) PacketCh() <-chan *memberlist.Packet { return c.packets }
func (c *cutNet) StreamCh() <-chan net.Conn           { return c.streams }

func (c *cutNet) Shutdown() error {
	c.once.Do(func() { close(c.stop) })
	return c.Transport.Shutdown()
}

// members lists the ranks m's gossip holds alive, itself included: those
// its join events made known and no leave event has declared dead or gone
// since. (Not memberlist's Members: the nodes it returns are its own,
// which gossip updates under a lock the caller cannot take.)
func members(m *Member) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []int
	for r := range m.nodes {
		if _, dead := m.dead[r]; !dead && !m.leaving[r] {
			rs = append(rs, r)
		}
	}
	slices.Sort(rs)
	return rs
}

// kill ends m as SIGKILL would: no goodbye, no leave.
func kill(m *Member) {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		close(m.done)
		m.mu.Unlock()
		_ = m.ml.Shutdown()
		m.joins.Wait()
	})
}

// TestPartitionHeals: a member cut off long enough that both sides
// declare each other dead is taken back by gossip once its link is up
// again, whether the sides still remember each other as dead or have
// dropped each other (memberlist does when its probe round wraps, here
// within a second), though no probe or gossip crosses by itself: both
// sides hold each other alive again, a rank restarted afterwards that
// joins one side finds every rank, and gossip reports the member's later
// death.
func TestPartitionHeals(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration // from both verdicts to the link's return
	}{{"remembered", 0}, {"dropped", 3 * time.Second}} {
		t.Run(c.name, func(t *testing.T) { partitionHeals(t, c.after) })
	}
}

func partitionHeals(t *testing.T, after time.Duration) {
	const secret = "secret-secret-secret"
	var cfgs []Config
	for r := range 3 {
		cfgs = append(cfgs, testConfig("jobp", r, 4, secret))
	}
	var cut *cutNet
	cfgs[2].wrapNet = func(inner memberlist.Transport) memberlist.Transport { cut = newCutNet(inner); return cut }
	g := start(t, cfgs)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, m := range g.ms {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = m.WaitFor(ctx, []int{0, 1, 2}) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	cutAt := time.Now()
	cut.cut.Store(true)
	deadSince := func(i, r int, since time.Time) bool {
		at, ok := g.rec[i].sawDead(r)
		return ok && at.After(since)
	}
	proctest.WaitFor(t, 20*time.Second, func() bool {
		return deadSince(0, 2, cutAt) && deadSince(2, 0, cutAt) && deadSince(2, 1, cutAt)
	}, "both sides of the cut declare the other dead")
	time.Sleep(after)
	if a, b := members(g.ms[0]), members(g.ms[2]); !slices.Equal(a, []int{0, 1}) || !slices.Equal(b, []int{2}) {
		t.Fatalf("gossip during the cut: rank 0 holds %v alive, rank 2 %v", a, b)
	}
	cut.cut.Store(false)
	healed := time.Now()
	proctest.WaitFor(t, 30*time.Second, func() bool {
		return slices.Equal(members(g.ms[0]), []int{0, 1, 2}) && slices.Equal(members(g.ms[2]), []int{0, 1, 2})
	}, "both sides hold each other alive after the cut")
	t.Logf("healed %v after the link came back", time.Since(healed).Round(time.Millisecond))
	// A member that saw another declared dead was told it is alive again
	// (the transport stops checking a verdict gossip took back), and no
	// member was told so of a rank it never saw dead. Rank 0 saw rank 2
	// dead and rank 2 both others (the wait above); rank 1 may or may not
	// have, as its probes fell.
	toldAlive := func() bool {
		for i := range g.ms {
			for r := range 3 {
				alive, ok := g.rec[i].sawAlive(r)
				dead, wasDead := g.rec[i].sawDead(r)
				if wasDead && dead.After(cutAt) && (!ok || alive.Before(dead)) {
					return false
				}
			}
		}
		return true
	}
	proctest.WaitFor(t, 30*time.Second, toldAlive, "every member that saw another dead told that it is alive again")
	for i := range g.ms {
		for r := range 3 {
			alive, ok := g.rec[i].sawAlive(r)
			dead, wasDead := g.rec[i].sawDead(r)
			if ok && (!wasDead || dead.After(alive)) {
				t.Errorf("rank %d was told that rank %d is alive again without a death before", i, r)
			}
		}
	}

	// A rank that joins the side of rank 0 finds rank 2 too.
	c3 := testConfig("jobp", 3, 4, secret)
	c3.Seeds = []string{g.ms[0].cfg.Seeds[0]} // rank 0's side only
	joiner, err := Start(c3, Events{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Close() })
	jctx, jcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer jcancel()
	if _, err := joiner.WaitFor(jctx, []int{0, 1, 2, 3}); err != nil {
		t.Fatalf("a rank joining after the cut: %v", err)
	}

	// Gossip watches rank 2 again: its death is reported anew.
	since := time.Now()
	kill(g.ms[2])
	proctest.WaitFor(t, 20*time.Second, func() bool { return deadSince(0, 2, since) }, "rank 0 sees rank 2's death after the cut")
}

func TestReconnectChance(t *testing.T) {
	for _, c := range []struct {
		alive int
		want  float64
	}{{0, 1}, {1, 1}, {2, 1}, {4, 0.5}, {256, 2.0 / 256}} {
		if got := reconnectChance(c.alive); got != c.want {
			t.Errorf("reconnectChance(%d) = %v, want %v", c.alive, got, c.want)
		}
	}
}
