package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/mem"
)

// TestSplit: children by color, ordered by key, run concurrently with
// each other and with their parent's handles; a child of a child; every
// result against the reference; Undefined gets no child.
func TestSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, size := range []int{1, 2, 3, 5, 8, 9, 16, 17} {
		colors := make([]int, size)
		keys := make([]int, size)
		for r := range size {
			colors[r] = rng.IntN(3) - 1 // Undefined, 0 or 1
			keys[r] = rng.IntN(4)
		}
		n := lengths[rng.IntN(len(lengths))]
		in := make([][]int64, size)
		for r := range in {
			in[r] = gen[int64](rng, n, Sum)
		}
		errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
			ctx := context.Background()
			r := c.Rank()
			// A parent collective in flight across the split.
			pbuf := slices.Clone(in[r])
			h := StartAllReduce(ctx, c, pbuf, Sum)
			child, err := c.Split(ctx, colors[r], keys[r])
			if err != nil {
				return err
			}
			var members []int
			for q := range size {
				if colors[q] == colors[r] {
					members = append(members, q)
				}
			}
			slices.SortStableFunc(members, func(a, b int) int { return keys[a] - keys[b] })
			if colors[r] == Undefined {
				if child != nil {
					return errors.New("a rank with color Undefined got a child")
				}
				return h.Wait(ctx)
			}
			defer child.Close()
			if child.Size() != len(members) || members[child.Rank()] != r {
				return fmt.Errorf("rank %d of %d in the child, want place %d in %v", child.Rank(), child.Size(), slices.Index(members, r), members)
			}
			buf := slices.Clone(in[r])
			if err := AllReduce(ctx, child, buf, Sum); err != nil {
				return err
			}
			var want []int64
			var per [][]int64
			for _, q := range members {
				per = append(per, in[q])
			}
			want = reference(per, Sum)
			if !slices.Equal(buf, want) {
				return fmt.Errorf("child all-reduce %v, want %v", buf, want)
			}
			// A broadcast from the child's last rank, and a grandchild.
			bc := slices.Clone(in[r])
			if err := Broadcast(ctx, child, bc, child.Size()-1); err != nil {
				return err
			}
			if !slices.Equal(bc, in[members[len(members)-1]]) {
				return errors.New("child broadcast differs from its root's buffer")
			}
			g, err := child.Split(ctx, child.Rank()%2, 0)
			if err != nil {
				return err
			}
			defer g.Close()
			gb := []int64{int64(r)}
			if err := AllReduce(ctx, g, gb, Max); err != nil {
				return err
			}
			wantMax := int64(-1)
			for i, q := range members {
				if i%2 == child.Rank()%2 {
					wantMax = max(wantMax, int64(q))
				}
			}
			if gb[0] != wantMax {
				return fmt.Errorf("grandchild max %d, want %d", gb[0], wantMax)
			}
			if err := h.Wait(ctx); err != nil {
				return err
			}
			if !slices.Equal(pbuf, reference(in, Sum)) {
				return errors.New("parent all-reduce across the split differs")
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("size %d colors %v keys %v: %v", size, colors, keys, err)
		}
	}
}

// TestSplitSiblingsConcurrent: two children of four run large
// all-reduces at the same time, each over the ring, with no frame of one
// reaching the other.
func TestSplitSiblingsConcurrent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 4096
	errs := onAll(t, 8, cfg, func(c *Comm) error {
		ctx := context.Background()
		child, err := c.Split(ctx, c.Rank()/4, c.Rank())
		if err != nil {
			return err
		}
		defer child.Close()
		for it := range 5 {
			buf := make([]int32, 100003)
			for i := range buf {
				buf[i] = int32(c.Rank()*7 + i + it)
			}
			if err := AllReduce(ctx, child, buf, Sum); err != nil {
				return err
			}
			base := (c.Rank() / 4) * 4
			for i, x := range buf {
				var want int32
				for q := base; q < base+4; q++ {
					want += int32(q*7 + i + it)
				}
				if x != want {
					return fmt.Errorf("iteration %d [%d] = %d, want %d", it, i, x, want)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestSplitKill: a rank killed inside one child fails the collectives of
// every rank, in both children, naming it.
func TestSplitKill(t *testing.T) {
	nw := mem.NewNetwork(6)
	var once sync.Once
	nw.BeforeSend = func(from, to int, h transport.Header) bool {
		if h.Comm != 0 && from == 4 {
			once.Do(func() { go nw.Kill(4) })
		}
		return true
	}
	errs := onAllNet(t, nw, DefaultConfig(), func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		child, err := c.Split(ctx, c.Rank()%2, 0)
		for i := 0; err == nil && i < 50; i++ {
			if err = AllReduce(ctx, child, make([]float64, 1000), Sum); err == nil {
				err = c.Barrier(ctx)
			}
		}
		if c.Rank() == 4 {
			return nil
		}
		if err == nil || !strings.Contains(err.Error(), "rank 4") {
			return fmt.Errorf("rank %d: %v, want an error naming rank 4", c.Rank(), err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestSplitElastic: a view change invalidates the children with
// ErrViewChanged; splitting again on the new view works.
func TestSplitElastic(t *testing.T) {
	nw := mem.NewNetwork(5)
	cfg := DefaultConfig()
	cfg.Elastic = true
	comms, err := NewLocalOn(nw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 5)
	killed := make(chan struct{})
	var first sync.WaitGroup // every rank's first child all-reduce done
	first.Add(5)
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c.Rank()] = func() error {
				child, err := c.Split(ctx, 0, 0)
				if err != nil {
					return err
				}
				err = AllReduce(ctx, child, []int64{1}, Sum)
				first.Done()
				if err != nil {
					return err
				}
				if c.Rank() == 0 {
					first.Wait()
					nw.Kill(4)
					close(killed)
				}
				if c.Rank() == 4 {
					return nil
				}
				<-killed
				// Until the view comes the child may still run; once it
				// came the child must refuse.
				var cerr error
				for range 200 {
					if cerr = AllReduce(ctx, child, []int64{1}, Sum); cerr != nil {
						break
					}
				}
				if !errors.Is(cerr, ErrViewChanged) {
					return fmt.Errorf("child after the view change: %v", cerr)
				}
				// The parent sees the change once, then resyncs.
				err = AllReduce(ctx, c, []int64{1}, Sum)
				if err != nil && !errors.Is(err, ErrViewChanged) {
					return err
				}
				if err := Resync(ctx, c, []int64{0}); err != nil {
					return err
				}
				again, err := c.Split(ctx, 0, 0)
				if err != nil {
					return err
				}
				buf := []int64{1}
				if err := AllReduce(ctx, again, buf, Sum); err != nil {
					return err
				}
				if buf[0] != 4 {
					return fmt.Errorf("re-split all-reduce %d, want 4", buf[0])
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	errs[4] = nil // the victim may fail anywhere
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestSendRecv: per-tag order, many tags interleaved and received in
// another order, messages larger than one frame, a mismatch that fails
// loudly, and a Recv whose peer dies.
func TestSendRecv(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const tags, per = 5, 4
	msgs := make([][][]float32, tags)
	for tg := range msgs {
		msgs[tg] = make([][]float32, per)
		for i := range msgs[tg] {
			msgs[tg][i] = gen[float32](rng, lengths[rng.IntN(len(lengths))], Sum)
		}
	}
	big := gen[float64](rng, p2pPiece/8*2+3, Sum) // three frames
	errs := onAll(t, 3, DefaultConfig(), func(c *Comm) error {
		ctx := context.Background()
		switch c.Rank() {
		case 0:
			for i := range per {
				for tg := range tags {
					if err := Send(ctx, c, msgs[tg][i], 1, tg); err != nil {
						return err
					}
				}
			}
			return Send(ctx, c, big, 1, 99)
		case 1:
			got := make([]float64, len(big))
			if err := Recv(ctx, c, got, 0, 99); err != nil {
				return err
			}
			if !slices.Equal(got, big) {
				return errors.New("large message differs")
			}
			for tg := tags - 1; tg >= 0; tg-- {
				for i := range per {
					buf := make([]float32, len(msgs[tg][i]))
					if err := Recv(ctx, c, buf, 0, tg); err != nil {
						return err
					}
					if !slices.Equal(buf, msgs[tg][i]) {
						return fmt.Errorf("tag %d message %d differs", tg, i)
					}
				}
			}
			// A message of another length fails, naming the sender.
			err := Recv(ctx, c, make([]int32, 3), 2, 1)
			if !errors.Is(err, ErrSizeMismatch) || !strings.Contains(err.Error(), "rank 2") {
				return fmt.Errorf("mismatched message: %v", err)
			}
			return nil
		default:
			return Send(ctx, c, make([]int32, 4), 1, 1)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// A Recv whose peer dies while it waits (synctest.Wait: once it is
	// blocked, and nothing else runs).
	synctest.Test(t, func(t *testing.T) {
		nw := mem.NewNetwork(2)
		comms, err := NewLocalOn(nw, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(comms)
		got := make(chan error, 1)
		go func() { got <- Recv(context.Background(), comms[0], make([]int64, 1), 1, 0) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("recv returned before its peer died: %v", err)
		default:
		}
		nw.Kill(1)
		if err := <-got; !errors.Is(err, ErrPeerLost) {
			t.Fatalf("recv from a dead peer: %v", err)
		}
	})
}

// TestExchangeReference: AllToAll, AllToAllV, Gather, Scatter and
// AllGatherV against the reference on 1-9, 16 and 17 ranks, in memory
// (the real processes run them through the conformance workload), and a
// count disagreement fails every rank with ErrSizeMismatch.
func TestExchangeReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, size := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17} {
		block := []int{0, 1, 3, 13, 257}[rng.IntN(5)]
		counts := make([][]int, size)
		for i := range counts {
			counts[i] = make([]int, size)
			if i%3 == 1 {
				continue // an all-zero row
			}
			for j := range counts[i] {
				counts[i][j] = rng.IntN(20)
			}
		}
		errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
			ctx := context.Background()
			r := c.Rank()
			val := func(from, to, i int) int64 { return int64(from*1000000 + to*1000 + i) }
			send := make([]int64, block*size)
			for j := range size {
				for i := range block {
					send[j*block+i] = val(r, j, i)
				}
			}
			recv := make([]int64, block*size)
			if err := AllToAll(ctx, c, send, recv); err != nil {
				return err
			}
			for j := range size {
				for i := range block {
					if recv[j*block+i] != val(j, r, i) {
						return fmt.Errorf("alltoall block %d [%d] = %d", j, i, recv[j*block+i])
					}
				}
			}
			var sv []int64
			rc := make([]int, size)
			for j := range size {
				for i := range counts[r][j] {
					sv = append(sv, val(r, j, i))
				}
				rc[j] = counts[j][r]
			}
			got, gotCounts, err := Exchange(ctx, c, sv, counts[r])
			if err != nil {
				return err
			}
			if !slices.Equal(gotCounts, rc) {
				return fmt.Errorf("exchange counts %v, want %v", gotCounts, rc)
			}
			off := 0
			for j := range size {
				for i := range rc[j] {
					if got[off] != val(j, r, i) {
						return fmt.Errorf("alltoallv from %d [%d] = %d", j, i, got[off])
					}
					off++
				}
			}
			root := size - 1
			mine := []int64{int64(r), int64(r * r)}
			var all []int64
			if r == root {
				all = make([]int64, 2*size)
			}
			if err := Gather(ctx, c, mine, all, root); err != nil {
				return err
			}
			if r == root {
				for q := range size {
					if all[2*q] != int64(q) || all[2*q+1] != int64(q*q) {
						return fmt.Errorf("gather %v", all)
					}
				}
			}
			part := make([]int64, 2)
			if err := Scatter(ctx, c, all, part, root); err != nil {
				return err
			}
			if part[0] != int64(r) || part[1] != int64(r*r) {
				return fmt.Errorf("scatter gave %v", part)
			}
			vc := make([]int, size)
			total := 0
			for q := range size {
				vc[q] = q % 4
				total += q % 4
			}
			vs := make([]int64, vc[r])
			for i := range vs {
				vs[i] = val(r, 0, i)
			}
			vr := make([]int64, total)
			if err := AllGatherV(ctx, c, vs, vr, vc); err != nil {
				return err
			}
			off = 0
			for q := range size {
				for i := range vc[q] {
					if vr[off] != val(q, 0, i) {
						return fmt.Errorf("allgatherv from %d [%d] = %d", q, i, vr[off])
					}
					off++
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("size %d block %d: %v", size, block, err)
		}
	}
	// Rank 2 expects one element more from rank 0 than rank 0 sends.
	errs := onAll(t, 4, DefaultConfig(), func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		sc := []int{1, 1, 1, 1}
		rc := []int{1, 1, 1, 1}
		if c.Rank() == 2 {
			rc[0] = 2
		}
		err := AllToAllV(ctx, c, make([]int64, 4), sc, make([]int64, 4+rc[0]-1), rc)
		if err == nil {
			// A rank whose own exchanges all matched may finish first; its
			// next call fails (doc.go).
			err = c.Barrier(ctx)
		}
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, ErrSizeMismatch) {
			t.Fatalf("rank %d: %v, want ErrSizeMismatch", r, err)
		}
	}
	if !strings.Contains(errs[2].Error(), "rank 0") {
		t.Fatalf("the detecting rank's error does not name its peer: %v", errs[2])
	}
}

// TestCreateGroup: overlapping groups made by their members only, in
// different orders, each checked against the reference while the parent
// runs a collective of its own; members that disagree fail loudly; bad
// ranks and tags are refused.
func TestCreateGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, size := range []int{1, 2, 3, 5, 9} {
		// Group g holds a random subset, in a random order.
		var groups [][]int
		for range 3 {
			g := rng.Perm(size)[:1+rng.IntN(size)]
			groups = append(groups, g)
		}
		n := lengths[rng.IntN(len(lengths))]
		in := make([][]float64, size)
		for r := range in {
			in[r] = gen[float64](rng, n, Sum)
		}
		errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := c.Rank()
			pbuf := slices.Clone(in[r])
			h := StartAllReduce(ctx, c, pbuf, Sum)
			for tag, g := range groups {
				if !slices.Contains(g, r) {
					continue
				}
				child, err := c.CreateGroup(ctx, g, tag)
				if err != nil {
					return fmt.Errorf("group %d %v: %w", tag, g, err)
				}
				if child.Size() != len(g) || g[child.Rank()] != r {
					return fmt.Errorf("group %d %v: rank %d of %d", tag, g, child.Rank(), child.Size())
				}
				buf := slices.Clone(in[r])
				if err := AllReduce(ctx, child, buf, Sum); err != nil {
					return err
				}
				var per [][]float64
				for _, q := range g {
					per = append(per, in[q])
				}
				want := reference(per, Sum)
				for i := range want {
					if !near(buf[i], want[i], len(g)) {
						return fmt.Errorf("group %d %v: [%d] = %v, want %v", tag, g, i, buf[i], want[i])
					}
				}
				child.Close()
			}
			if err := h.Wait(ctx); err != nil {
				return err
			}
			want := reference(in, Sum)
			for i := range want {
				if !near(pbuf[i], want[i], size) {
					return fmt.Errorf("parent: [%d] = %v, want %v", i, pbuf[i], want[i])
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("size %d groups %v: rank %d: %v", size, groups, r, err)
			}
		}
	}
	comms, err := NewLocal(3, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(comms)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		ranks []int
		tag   int
		want  string
	}{
		{[]int{0, 0, 1}, 1, "not a distinct rank"},
		{[]int{0, 3}, 1, "not a distinct rank"},
		{[]int{1, 2}, 1, "do not hold this rank"},
		{[]int{0}, -1, "outside"},
		{[]int{0}, MaxGroupTag + 1, "outside"},
	} {
		if _, err := comms[0].CreateGroup(ctx, c.ranks, c.tag); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CreateGroup(%v, %d) = %v, want an error with %q", c.ranks, c.tag, err, c.want)
		}
	}
	// Two members that disagree on the group's ranks fail, naming it.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, ranks := range [][]int{{0, 1}, {1, 0}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = comms[i].CreateGroup(ctx, ranks, 5)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrSizeMismatch) {
			t.Errorf("rank %d: disagreeing groups: %v, want ErrSizeMismatch", i, err)
		}
	}
}

// TestRecvAny: at 2-7 ranks every other rank sends rank 0 several messages
// of one tag (one sender's larger than a frame) while rank 0 receives from
// any source: each message arrives once, whole, with its sender named,
// and each sender's in the order sent; a message of another tag from the
// same senders waits for its own Recv. On one rank it fails at once, and
// a receive whose only peer dies fails naming the loss.
func TestRecvAny(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for size := 2; size <= 7; size++ {
		per := 1 + rng.IntN(4)
		n := lengths[rng.IntN(len(lengths))]
		if size == 4 {
			n = p2pPiece/4 + 5 // two frames each
		}
		msg := func(from, i int) []int32 {
			m := make([]int32, n)
			for j := range m {
				m[j] = int32(from*1000000 + i*1000 + j%1000)
			}
			return m
		}
		errs := onAll(t, size, DefaultConfig(), func(c *Comm) error {
			ctx := context.Background()
			if r := c.Rank(); r != 0 {
				if err := Send(ctx, c, []int64{int64(r)}, 0, 5); err != nil {
					return err
				}
				for i := range per {
					if err := Send(ctx, c, msg(r, i), 0, 9); err != nil {
						return err
					}
				}
				return nil
			}
			next := make([]int, size)
			buf := make([]int32, n)
			for range (size - 1) * per {
				from, err := RecvAny(ctx, c, buf, 9)
				if err != nil {
					return err
				}
				if from < 1 || from >= size || next[from] >= per {
					return fmt.Errorf("size %d: sender %d, next %v", size, from, next)
				}
				if !slices.Equal(buf, msg(from, next[from])) {
					return fmt.Errorf("size %d: message %d of rank %d differs", size, next[from], from)
				}
				next[from]++
			}
			for r := 1; r < size; r++ {
				got := make([]int64, 1)
				if err := Recv(ctx, c, got, r, 5); err != nil || got[0] != int64(r) {
					return fmt.Errorf("size %d: tag 5 from rank %d: %v %v", size, r, got, err)
				}
			}
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	errs := onAll(t, 1, DefaultConfig(), func(c *Comm) error {
		_, err := RecvAny(context.Background(), c, make([]int32, 1), 0)
		if err == nil || !strings.Contains(err.Error(), "no other rank") {
			return fmt.Errorf("recv from any source on one rank: %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		nw := mem.NewNetwork(2)
		comms, err := NewLocalOn(nw, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(comms)
		got := make(chan error, 1)
		go func() {
			_, err := RecvAny(context.Background(), comms[0], make([]int64, 1), 0)
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("recv from any source returned before its peer died: %v", err)
		default:
		}
		nw.Kill(1)
		if err := <-got; !errors.Is(err, ErrPeerLost) {
			t.Fatalf("recv from any source, its peer dead: %v", err)
		}
	})
}
