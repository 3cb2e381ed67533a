package launcher

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func hostsOf(slots ...int) []Host {
	var hs []Host
	for i, s := range slots {
		hs = append(hs, Host{Name: "h" + strconv.Itoa(i+1), Slots: s})
	}
	return hs
}

func hostSeq(p []Placement) []int {
	out := make([]int, len(p))
	for i, x := range p {
		out[i] = x.Host
	}
	return out
}

func TestPlaceBySlotAndNode(t *testing.T) {
	p, err := Place(hostsOf(2, 2, 2), 6, MapBySlot, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostSeq(p); !slices.Equal(got, []int{0, 0, 1, 1, 2, 2}) {
		t.Fatalf("by slot: %v", got)
	}
	p, err = Place(hostsOf(2, 2, 2), 5, MapByNode, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostSeq(p); !slices.Equal(got, []int{0, 1, 2, 0, 1}) {
		t.Fatalf("by node: %v", got)
	}
	if p[3].LocalRank != 1 || p[3].LocalSize != 2 || p[4].NodeRank != 1 || p[2].LocalSize != 1 {
		t.Fatalf("local ranks wrong: %+v", p)
	}
}

func TestPlaceOversubscribe(t *testing.T) {
	if _, err := Place(hostsOf(1, 1), 3, MapBySlot, false); err == nil || !strings.Contains(err.Error(), "--oversubscribe") {
		t.Fatalf("want an oversubscribe error, got %v", err)
	}
	p, err := Place(hostsOf(1, 1), 5, MapBySlot, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostSeq(p); !slices.Equal(got, []int{0, 1, 0, 1, 0}) {
		t.Fatalf("oversubscribed: %v", got)
	}
	capped := []Host{{Name: "a", Slots: 1, MaxSlots: 2}, {Name: "b", Slots: 1, MaxSlots: 1}}
	if _, err := Place(capped, 4, MapBySlot, true); err == nil || !strings.Contains(err.Error(), "max_slots") {
		t.Fatalf("max_slots must cap oversubscription, got %v", err)
	}
	if _, err := Place(hostsOf(1), 0, MapBySlot, false); err == nil {
		t.Fatal("np 0 accepted")
	}
}

// TestPlaceInvariants checks random placements against properties every
// placement must have.
func TestPlaceInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		n := 1 + rng.IntN(6)
		hosts := make([]Host, n)
		total := 0
		for i := range hosts {
			hosts[i] = Host{Name: "h" + strconv.Itoa(i), Slots: 1 + rng.IntN(4)}
			total += hosts[i].Slots
		}
		np := 1 + rng.IntN(total*2)
		by := MapBy(rng.IntN(3))
		over := rng.IntN(2) == 0
		p, err := Place(hosts, np, by, over)
		if np > total && !over {
			if err == nil {
				t.Fatalf("iter %d: np %d > %d slots accepted", iter, np, total)
			}
			continue
		}
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		count := make([]int, n)
		for r, x := range p {
			if x.Rank != r || x.LocalRank != count[x.Host] {
				t.Fatalf("iter %d: rank %d: %+v", iter, r, x)
			}
			count[x.Host]++
		}
		for _, x := range p {
			if x.LocalSize != count[x.Host] {
				t.Fatalf("iter %d: local size %+v, count %d", iter, x, count[x.Host])
			}
			if np <= total && count[x.Host] > hosts[x.Host].Slots {
				t.Fatalf("iter %d: host %d got %d ranks for %d slots", iter, x.Host, count[x.Host], hosts[x.Host].Slots)
			}
		}
	}
}

// TestPlaceBySpeed: --map-by speed gives a host twice as fast twice the
// ranks, within its slots, numbered host by host; on random hosts its
// slowest host finishes as early as the best of every split (brute
// force), and never later than slot or node mapping's.
func TestPlaceBySpeed(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: 4, Speed: 1}, {Name: "b", Slots: 4, Speed: 2}, {Name: "c", Slots: 4}}
	p, err := Place(hosts, 8, MapBySpeed, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostSeq(p); !slices.Equal(got, []int{0, 0, 1, 1, 1, 1, 2, 2}) {
		t.Fatalf("by speed: %v", got)
	}
	if p[5].LocalRank != 3 || p[5].LocalSize != 4 || p[6].NodeRank != 2 {
		t.Fatalf("local ranks wrong: %+v", p)
	}
	makespan := func(hosts []Host, count []int) float64 {
		m := 0.0
		for i, c := range count {
			s := hosts[i].Speed
			if s == 0 {
				s = 1
			}
			m = max(m, float64(c)/s)
		}
		return m
	}
	counts := func(p []Placement, n int) []int {
		c := make([]int, n)
		for _, x := range p {
			c[x.Host]++
		}
		return c
	}
	rng := rand.New(rand.NewPCG(37, 1))
	speeds := []float64{0, 0.5, 1, 1.5, 2, 3}
	for iter := range 300 {
		n := 1 + rng.IntN(4)
		hs := make([]Host, n)
		total := 0
		for i := range hs {
			hs[i] = Host{Name: "h" + strconv.Itoa(i), Slots: 1 + rng.IntN(4), Speed: speeds[rng.IntN(len(speeds))]}
			total += hs[i].Slots
		}
		np := 1 + rng.IntN(total)
		p, err := Place(hs, np, MapBySpeed, false)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		got := makespan(hs, counts(p, n))
		best := -1.0
		var walk func(i, left int, c []int)
		walk = func(i, left int, c []int) {
			if i == n {
				if left == 0 {
					if m := makespan(hs, c); best < 0 || m < best {
						best = m
					}
				}
				return
			}
			for k := 0; k <= min(left, hs[i].Slots); k++ {
				c[i] = k
				walk(i+1, left-k, c)
			}
		}
		walk(0, np, make([]int, n))
		if got > best+1e-9 {
			t.Fatalf("iter %d: hosts %+v np %d: slowest host takes %v, best split %v", iter, hs, np, got, best)
		}
		for _, by := range []MapBy{MapBySlot, MapByNode} {
			q, _ := Place(hs, np, by, false)
			if other := makespan(hs, counts(q, n)); got > other+1e-9 {
				t.Fatalf("iter %d: by speed %v, later than map-by %d's %v", iter, got, by, other)
			}
		}
	}
	if _, err := Place(hosts, 13, MapBySpeed, false); err == nil || !strings.Contains(err.Error(), "--oversubscribe") {
		t.Fatalf("13 ranks on 12 slots: %v", err)
	}
	p, err = Place(hosts, 16, MapBySpeed, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := counts(p, 3); !slices.Equal(got, []int{4, 8, 4}) {
		t.Fatalf("oversubscribed by speed: %v", got)
	}
	capped := []Host{{Name: "a", Slots: 1, MaxSlots: 2, Speed: 4}, {Name: "b", Slots: 1, MaxSlots: 2}}
	if _, err := Place(capped, 5, MapBySpeed, true); err == nil || !strings.Contains(err.Error(), "--map-by speed: -np 5 does not fit") {
		t.Fatalf("max_slots under --map-by speed: %v", err)
	}
	if m, err := ParseMapBy("speed"); err != nil || m != MapBySpeed {
		t.Fatalf("ParseMapBy(speed): %v %v", m, err)
	}
}
