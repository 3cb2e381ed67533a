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
		by := MapBy(rng.IntN(2))
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
