package collective

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/control"
	"github.com/gorun/gorun/transport/mem"

	"github.com/gorun/gorun/transport"
)

// parseViewLine is parseView as the View a Comm reports.
func parseViewLine(line string, size int) (View, error) {
	cv, err := parseView(line, size)
	if err != nil {
		return View{}, err
	}
	return viewOf(cv), nil
}

func TestParseView(t *testing.T) {
	good := map[string]View{
		"view 1 0,1,3":                     {1, []int{0, 1, 3}, nil},
		"view 4095 7":                      {4095, []int{7}, nil},
		"view 3 0,1,2,3,4,5,6,7":           {3, []int{0, 1, 2, 3, 4, 5, 6, 7}, nil},
		"view 5 0,2,5 +5 a:1 h/1 +0 b:2 h": {5, []int{0, 2, 5}, []int{0, 5}},
	}
	for line, want := range good {
		v, err := parseViewLine(line, 8)
		if err != nil || v.Epoch != want.Epoch || !slices.Equal(v.Ranks, want.Ranks) || !slices.Equal(v.Joined, want.Joined) {
			t.Errorf("parseView(%q) = %v, %v; want %v", line, v, err, want)
		}
	}
	for _, line := range []string{
		"", "view", "view 1", "view 0 1,2", "view 4096 1", "view -1 1", "view x 1",
		"view 1 1,1", "view 1 2,1", "view 1 8", "view 1 -1", "view 1 1,,2", "view 1 1,2 extra",
		"suspect 1 x", "view 1 0,1,2,3,4,5,6,7,8", " view  2  2,5 ",
	} {
		if v, err := parseViewLine(line, 8); err == nil {
			t.Errorf("parseView(%q) accepted: %v", line, v)
		}
	}
}

// FuzzParseView: any line either fails or gives a view that is valid for
// the job and prints back to itself.
func FuzzParseView(f *testing.F) {
	for _, s := range []string{"view 1 0,1,3", "view 7 2", "view 1 1,1", "", "view 99999999999999999999 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		v, err := parseViewLine(line, 16)
		if err != nil {
			return
		}
		if v.Epoch < 1 || v.Epoch > maxEpoch || len(v.Ranks) == 0 || len(v.Ranks) > 16 {
			t.Fatalf("%q: %v", line, v)
		}
		for i, r := range v.Ranks {
			if r < 0 || r >= 16 || i > 0 && r <= v.Ranks[i-1] {
				t.Fatalf("%q: ranks %v", line, v.Ranks)
			}
		}
		strs := make([]string, len(v.Ranks))
		for i, r := range v.Ranks {
			strs[i] = fmt.Sprint(r)
		}
		again, err := parseViewLine(fmt.Sprintf("view %d %s", v.Epoch, strings.Join(strs, ",")), 16)
		if err != nil || again.Epoch != v.Epoch || !slices.Equal(again.Ranks, v.Ranks) {
			t.Fatalf("%q: round trip %v, %v", line, again, err)
		}
	})
}

// sequencer plays gorun's part for in-process elastic Comms: it holds
// the other end of every rank's control channel, records the suspects,
// and sends views.
type sequencer struct {
	t     *testing.T
	ends  []net.Conn
	mu    sync.Mutex
	epoch int
	live  []int
	sus   []string
}

func newSequencer(t *testing.T, cfgs []Config) *sequencer {
	s := &sequencer{t: t, ends: make([]net.Conn, len(cfgs))}
	for r := range cfgs {
		a, b := net.Pipe()
		cfgs[r].Elastic, cfgs[r].Control, cfgs[r].ViewTimeout = true, a, 10*time.Second
		s.ends[r] = b
		s.live = append(s.live, r)
		go s.read(r, b)
	}
	return s
}

// read takes rank r's lines from its end of the control channel: a join
// adds r to the view, with its address; anything else is recorded.
func (s *sequencer) read(r int, end net.Conn) {
	sc := bufio.NewScanner(end)
	for sc.Scan() {
		if j, err := control.ParseJoin(sc.Text()); err == nil {
			s.add(control.Joiner{Rank: r, Addr: j.Addr, Host: j.Host})
			continue
		}
		s.mu.Lock()
		s.sus = append(s.sus, fmt.Sprintf("%d: %s", r, sc.Text()))
		s.mu.Unlock()
	}
}

// restart gives rank a new control channel for its restarted process,
// with the current view written first, as gorun's agent does.
func (s *sequencer) restart(cfg Config) Config {
	a, b := net.Pipe()
	cfg.Control, cfg.RestartCount = a, cfg.RestartCount+1
	s.mu.Lock()
	s.ends[cfg.Rank] = b
	line := control.View{Epoch: s.epoch, Live: slices.Clone(s.live)}.String() + "\n"
	s.mu.Unlock()
	go func() {
		io.WriteString(b, line)
		s.read(cfg.Rank, b)
	}()
	return cfg
}

// add puts a joiner back into the view and tells every live rank.
func (s *sequencer) add(j control.Joiner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = append(s.live, j.Rank)
	slices.Sort(s.live)
	s.epoch++
	line := control.View{Epoch: s.epoch, Live: slices.Clone(s.live), Joined: []control.Joiner{j}}.String() + "\n"
	for _, r := range s.live {
		go io.WriteString(s.ends[r], line)
	}
}

// remove takes rank out of the view and tells every live rank.
func (s *sequencer) remove(rank int) View {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = slices.DeleteFunc(s.live, func(r int) bool { return r == rank })
	s.epoch++
	v := View{Epoch: s.epoch, Ranks: slices.Clone(s.live)}
	strs := make([]string, len(v.Ranks))
	for i, r := range v.Ranks {
		strs[i] = fmt.Sprint(r)
	}
	line := fmt.Sprintf("view %d %s\n", v.Epoch, strings.Join(strs, ","))
	for _, r := range s.live {
		go io.WriteString(s.ends[r], line)
	}
	return v
}

// elasticOverTCP starts n elastic ranks over TCP in this process, two to
// a host (sharing memory if shm), with a test sequencer.
func elasticOverTCP(t *testing.T, n int, shm bool) ([]Config, *sequencer, []*Comm) {
	t.Helper()
	cfgs := tcpConfigs(t, n, "a-secret-of-the-right-length")
	for r := range cfgs {
		cfgs[r].Shm = shm
		cfgs[r].HostKey = fmt.Sprint("host", r/2)
	}
	seq := newSequencer(t, cfgs)
	comms, errs := newAll(cfgs)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return cfgs, seq, comms
}

// TestElasticRankLeaves: 4 ranks over TCP (and shared memory between
// some) run all-reduces of several sizes; rank 2 vanishes in the middle
// of one (its Comm closes). Every survivor gets exactly one
// ErrViewChanged, at the same collective, then the sums over the new view
// are exact.
func TestElasticRankLeaves(t *testing.T) {
	for _, shm := range []bool{true, false} {
		t.Run(fmt.Sprint("shm=", shm), func(t *testing.T) {
			const n, victim, at = 4, 2, 5
			_, seq, comms := elasticOverTCP(t, n, shm)
			t.Cleanup(func() { closeAll(comms) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			changedAt := make([]int, n)
			stopHosts := make(chan struct{})
			hostsDone := make(chan struct{})
			go func() { // Hosts beside the collectives that change the view
				defer close(hostsDone)
				for {
					select {
					case <-stopHosts:
						return
					default:
						_ = comms[0].Hosts()
					}
				}
			}()
			err := runAll(comms, func(c *Comm) error {
				changedAt[c.Rank()] = -1
				for it := 0; it < 12; it++ {
					count := []int{1, 7, 5000, 1 << 18}[it%4]
					buf := make([]float64, count)
					for i := range buf {
						buf[i] = float64(c.Rank() + 1)
					}
					if c.Rank() == victim && it == at {
						go func() {
							time.Sleep(50 * time.Millisecond)
							c.Close()
							seq.remove(victim)
						}()
					}
					err := AllReduce(ctx, c, buf, Sum)
					if c.Rank() == victim && it >= at {
						return nil // gone
					}
					if errors.Is(err, ErrViewChanged) {
						if changedAt[c.Rank()] >= 0 {
							return fmt.Errorf("a second view change at %d: %w", it, err)
						}
						changedAt[c.Rank()] = it
						// The documented pattern: take the step (the
						// training state) from the view's first rank, and
						// go on from there.
						step := []int64{int64(it)}
						if err := Resync(ctx, c, step); err != nil {
							return fmt.Errorf("resync after the view change: %w", err)
						}
						it = int(step[0]) - 1
						continue
					}
					if err != nil {
						return fmt.Errorf("iteration %d: %w", it, err)
					}
					var want float64
					for _, r := range c.View().Ranks {
						want += float64(r + 1)
					}
					for i, x := range buf {
						if x != want {
							return fmt.Errorf("iteration %d (view %v): [%d] = %v, want %v", it, c.View(), i, x, want)
						}
					}
				}
				return nil
			})
			close(stopHosts)
			<-hostsDone
			if err != nil {
				t.Fatal(err)
			}
			for r := range n {
				if r == victim {
					continue
				}
				if changedAt[r] < at || changedAt[r] > at+1 {
					t.Fatalf("rank %d saw the view change at step %d, want %d or %d", r, changedAt[r], at, at+1)
				}
				if v := comms[r].View(); v.Epoch != 1 || !slices.Equal(v.Ranks, []int{0, 1, 3}) || comms[r].Size() != 3 {
					t.Fatalf("rank %d: view %v, size %d", r, v, comms[r].Size())
				}
				if h := fmt.Sprint(comms[r].Hosts()); h != "[[0 1] [3]]" {
					t.Fatalf("rank %d: hosts %s after the change, want [[0 1] [3]]", r, h)
				}
			}
		})
	}
}

// TestElasticRejoin: 4 ranks over TCP (and shared memory between some)
// train; rank 2 vanishes, and its restarted process (RestartCount 1, the
// same gossip port, a new data port) joins the running job through the
// sequencer. The survivors see one or two view changes (the loss and the
// join, or both at once), the restarted rank one (its first collective), every sum over
// every view is exact, and after the Resync (ResyncBytes without shared
// memory) every rank holds the same state as the survivors.
func TestElasticRejoin(t *testing.T) {
	for _, shm := range []bool{true, false} {
		t.Run(fmt.Sprint("shm=", shm), func(t *testing.T) {
			const n, victim, at = 4, 2, 5
			cfgs, seq, comms := elasticOverTCP(t, n, shm)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var newcomer atomic.Pointer[Comm]
			t.Cleanup(func() {
				closeAll(comms)
				if c := newcomer.Load(); c != nil {
					c.Close()
				}
			})
			changes := make([]int, n)
			final := make([][]float64, n)
			gone := make(chan struct{})
			// train runs to step 40 once the view is back to 4 ranks;
			// state is (step, sum of every result so far).
			train := func(c *Comm, state []float64) error {
				for steps := 0; state[0] < 40 || c.Size() < n; steps++ {
					if steps > 5000 {
						return fmt.Errorf("the restarted rank never came back (view %v)", c.View())
					}
					it := state[0]
					if c.Restarts() == 0 && c.Rank() == victim && it == at {
						c.Close()
						seq.remove(victim)
						close(gone)
						return nil
					}
					buf := make([]float64, []int{1, 7, 5000, 1 << 16}[int(it)%4])
					for i := range buf {
						buf[i] = float64(c.Rank()+1) * (it + 1)
					}
					err := AllReduce(ctx, c, buf, Sum)
					if errors.Is(err, ErrViewChanged) {
						changes[c.Rank()]++
						if shm {
							if err := Resync(ctx, c, state); err != nil {
								return fmt.Errorf("resync after the view change: %w", err)
							}
							continue
						}
						// The state as text, whose length only its holder
						// knows (Go's shortest float format round-trips).
						got, err := ResyncBytes(ctx, c, []byte(fmt.Sprint(state[0], state[1])))
						if err != nil {
							return fmt.Errorf("resync (bytes) after the view change: %w", err)
						}
						if _, err := fmt.Sscan(string(got), &state[0], &state[1]); err != nil {
							return fmt.Errorf("resync (bytes): %q: %w", got, err)
						}
						continue
					}
					if err != nil {
						return fmt.Errorf("step %v: %w", it, err)
					}
					var want float64
					for _, r := range c.View().Ranks {
						want += float64(r+1) * (it + 1)
					}
					for i, x := range buf {
						if x != want {
							return fmt.Errorf("step %v (view %v): [%d] = %v, want %v", it, c.View(), i, x, want)
						}
					}
					state[0]++
					state[1] += buf[0]
					time.Sleep(time.Millisecond)
				}
				final[c.Rank()] = state
				return nil
			}
			var wg sync.WaitGroup
			var backErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gone
				c, err := New(ctx, seq.restart(cfgs[victim]))
				if err != nil {
					backErr = fmt.Errorf("restarted rank: %w", err)
					return
				}
				newcomer.Store(c)
				if v := c.View(); !slices.Equal(v.Joined, []int{victim}) || v.Index(victim) < 0 {
					backErr = fmt.Errorf("restarted rank starts in view %+v", v)
					return
				}
				backErr = train(c, make([]float64, 2))
			}()
			err := runAll(comms, func(c *Comm) error { return train(c, make([]float64, 2)) })
			wg.Wait()
			if err := errors.Join(err, backErr); err != nil {
				t.Fatal(err)
			}
			for r := range n {
				// A survivor that finds both views (the loss, the join)
				// waiting when it next looks goes straight to the newer.
				lo, hi := 1, 2
				if r == victim {
					hi = 1
				}
				if changes[r] < lo || changes[r] > hi {
					t.Errorf("rank %d saw %d view changes, want %d to %d", r, changes[r], lo, hi)
				}
				if !slices.Equal(final[r], final[0]) {
					t.Errorf("rank %d ends with state %v, rank 0 with %v", r, final[r], final[0])
				}
			}
			if v := comms[0].View(); v.Epoch != 2 || !slices.Equal(v.Ranks, []int{0, 1, 2, 3}) || !slices.Equal(v.Joined, []int{victim}) {
				t.Fatalf("final view %+v", v)
			}
		})
	}
}

// TestElasticKillAnywhere is the deterministic drill on the in-memory
// transport: for 2 to 9 ranks, rank k is killed exactly when the m-th
// frame of the job is about to be sent, at every rank and at several
// points of a run of all-reduces (small, by recursive doubling or direct,
// and large, by the ring). Every survivor must see exactly one
// ErrViewChanged, and after the documented resynchronisation every sum
// must equal the naive sum over the view's ranks.
func TestElasticKillAnywhere(t *testing.T) {
	kills := 0
	for n := 2; n <= 9; n++ {
		for victim := range n {
			for _, at := range []int{0, 1, n, 3 * n, 7 * n, 20 * n} {
				if elasticDrill(t, n, []int{victim}, []int{at}) {
					kills++
				}
			}
		}
	}
	t.Logf("%d drills killed their victim mid-run", kills)
	if kills < 100 {
		t.Fatalf("only %d drills killed: the points are off", kills)
	}
}

func elasticDrill(t *testing.T, n int, victims, ats []int) bool {
	t.Helper()
	nw := mem.NewNetwork(n)
	sent := 0
	struck := 0
	nw.BeforeSend = func(from, to int, h transport.Header) bool {
		for i, at := range ats {
			if sent == at {
				struck++
				nw.Kill(victims[i]) // before this frame leaves: exactly mid-collective
			}
		}
		sent++
		return true
	}
	cfg := DefaultConfig()
	cfg.Elastic, cfg.SmallBytes, cfg.SegmentBytes = true, 64, 32
	comms, err := NewLocalOn(nw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const steps = 8
	changes := make([]int, n)
	done := make(chan error, 1)
	drill := func(c *Comm) error {
		r := c.Rank()
		for it := 0; it < steps; it++ {
			count := []int{1, 3, 40, 97}[it%4]
			buf := make([]int64, count)
			for i := range buf {
				buf[i] = int64((r+1)*1000 + it*10 + i%7)
			}
			err := AllReduce(ctx, c, buf, Sum)
			if errors.Is(err, ErrViewChanged) {
				changes[r]++
				step := []int64{int64(it)}
				before := c.View().Epoch
				if err := Resync(ctx, c, step); err != nil {
					return fmt.Errorf("resync: %w", err)
				}
				changes[r] += c.View().Epoch - before // further changes during the resync
				it = int(step[0]) - 1
				continue
			}
			if err != nil {
				return fmt.Errorf("step %d: %w", it, err)
			}
			for i, x := range buf {
				var want int64
				for _, q := range c.View().Ranks {
					want += int64((q+1)*1000 + it*10 + i%7)
				}
				if x != want {
					return fmt.Errorf("step %d, view %v: [%d] = %d, want %d", it, c.View(), i, x, want)
				}
			}
		}
		return nil
	}
	go func() {
		done <- runAll(comms, func(c *Comm) error {
			if err := drill(c); !slices.Contains(victims, c.Rank()) {
				return err
			}
			return nil // what a victim saw does not count
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("n %d victims %v at %v: %v", n, victims, ats, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("n %d victims %v at %v: hung", n, victims, ats)
	}
	for r := range n {
		if slices.Contains(victims, r) {
			continue
		}
		if changes[r] < min(struck, 1) || changes[r] > struck {
			t.Fatalf("n %d victims %v at %v: rank %d saw %d view changes for %d deaths", n, victims, ats, r, changes[r], struck)
		}
		if struck == len(victims) {
			var want []int
			for q := range n {
				if !slices.Contains(victims, q) {
					want = append(want, q)
				}
			}
			if got := comms[r].View().Ranks; !slices.Equal(got, want) {
				t.Fatalf("n %d victims %v: rank %d ends on view %v, want %v", n, victims, r, got, want)
			}
		}
	}
	if testing.Verbose() && len(victims) > 1 {
		t.Logf("n %d victims %v at %v: %d struck, changes %v, view %v", n, victims, ats, struck, changes, comms[0].View())
	}
	return struck > 0
}

// TestElasticTwoDeaths: two ranks die at once, or the second while the
// survivors resynchronise after the first; every survivor ends on the
// view without both, with exact sums all along.
func TestElasticTwoDeaths(t *testing.T) {
	for n := 3; n <= 7; n++ {
		for _, gap := range []int{0, 1, n, 4 * n} {
			if !elasticDrill(t, n, []int{1, n - 1}, []int{2 * n, 2*n + gap}) {
				t.Fatalf("n %d gap %d: nobody was killed", n, gap)
			}
		}
	}
}

// TestEpochFrames: a view's transport drops the frames of an earlier
// epoch (an interrupted collective's leftovers), keeps a later epoch's
// for when this rank gets there, and hands them over in order.
func TestEpochFrames(t *testing.T) {
	nw := mem.NewNetwork(2)
	ctx := context.Background()
	send := func(epoch, n uint32, payload string) {
		if err := nw.Transport(1).Send(ctx, 0, transport.Header{Seq: epoch<<seqEpochShift | n}, []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 7, "stale")
	send(1, 1, "one")
	send(0, 8, "stale too")
	send(2, 1, "two-a")
	send(2, 2, "two-b")
	e := &elastic{stash: map[int][]transport.Frame{}}
	one := &epochNet{e: e, base: nw.Transport(0), epoch: 1}
	f, err := one.Recv(ctx, 1)
	if err != nil || string(f.Payload) != "one" {
		t.Fatalf("epoch 1 got %q, %v", f.Payload, err)
	}
	f.Release()
	if _, err := one.Recv(ctx, 1); !errors.Is(err, errNewerView) {
		t.Fatalf("a later epoch's frame: %v, want errNewerView", err)
	}
	two := &epochNet{e: e, base: nw.Transport(0), epoch: 2}
	for _, want := range []string{"two-a", "two-b"} {
		f, err := two.Recv(ctx, 1)
		if err != nil || string(f.Payload) != want {
			t.Fatalf("epoch 2 got %q, %v; want %q", f.Payload, err, want)
		}
		f.Release()
	}
}

// TestJoinHosts: a restarted rank places every rank on the host gossip
// gave it, except the ranks that joined in views announced while it
// joined, which it places where their join said (gossip may not have
// them, or have them where their old process ran).
func TestJoinHosts(t *testing.T) {
	for _, c := range []struct{ found, announced, want []string }{
		{[]string{"a", "a", "b", "b"}, []string{"", "", "", ""}, []string{"a", "a", "b", "b"}},
		// Rank 2 joined meanwhile: gossip did not wait for it.
		{[]string{"a", "a", "", "b"}, []string{"", "", "b", ""}, []string{"a", "a", "b", "b"}},
		// Rank 1 moved to host c.
		{[]string{"a", "a", "b", "b"}, []string{"", "c", "", ""}, []string{"a", "c", "b", "b"}},
		{[]string{"a", "b"}, nil, []string{"a", "b"}},
	} {
		found := slices.Clone(c.found)
		got := joinHosts(found, c.announced)
		if !slices.Equal(got, c.want) || !slices.Equal(found, c.found) {
			t.Errorf("joinHosts(%q, %q) = %q (found now %q), want %q", c.found, c.announced, got, found, c.want)
		}
	}
}
