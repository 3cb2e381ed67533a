package ring

import (
	"math/bits"
	"slices"
	"testing"
)

func TestChunks(t *testing.T) {
	for size := 1; size <= 9; size++ {
		for n := 0; n <= 40; n++ {
			spans := Chunks(n, size)
			off := 0
			for _, s := range spans {
				if s.Off != off || s.Len < n/size || s.Len > n/size+1 {
					t.Fatalf("Chunks(%d, %d) = %v", n, size, spans)
				}
				off += s.Len
			}
			if off != n {
				t.Fatalf("Chunks(%d, %d) covers %d elements", n, size, off)
			}
		}
	}
}

// TestPlanSimulated runs every rank's plan symbolically: each chunk carries
// the set of ranks whose data it holds. A reduce must join disjoint sets
// (nothing counted twice), every message must be the chunk its receiver
// expects, and at the end every rank must hold every chunk from all ranks.
func TestPlanSimulated(t *testing.T) {
	for size := 1; size <= 9; size++ {
		plans := make([][]Step, size)
		state := make([][]uint64, size) // state[rank][chunk] = bitset of contributing ranks
		for r := range size {
			plans[r] = Plan(r, size)
			if want := 2 * (size - 1); len(plans[r]) != want {
				t.Fatalf("size %d: %d steps, want %d", size, len(plans[r]), want)
			}
			state[r] = make([]uint64, size)
			for c := range size {
				state[r][c] = 1 << r
			}
		}
		reduces := make([]int, size)
		for step := range 2 * (size - 1) {
			sent := make([]uint64, size)
			for r := range size {
				st := plans[r][step]
				if step > 0 && st.Send != plans[r][step-1].Recv {
					t.Fatalf("size %d rank %d step %d: sends chunk %d, but received %d last step", size, r, step, st.Send, plans[r][step-1].Recv)
				}
				if want := plans[Left(r, size)][step].Send; st.Recv != want {
					t.Fatalf("size %d rank %d step %d: expects chunk %d, left sends %d", size, r, step, st.Recv, want)
				}
				sent[Right(r, size)] = state[r][st.Send]
			}
			for r := range size {
				st := plans[r][step]
				if st.Reduce {
					if state[r][st.Recv]&sent[r] != 0 {
						t.Fatalf("size %d rank %d step %d: chunk %d reduced twice with %b", size, r, step, st.Recv, state[r][st.Recv]&sent[r])
					}
					state[r][st.Recv] |= sent[r]
					reduces[st.Recv]++
				} else {
					state[r][st.Recv] = sent[r]
				}
			}
			if step == size-2 {
				for r := range size {
					if state[r][r] != 1<<size-1 {
						t.Fatalf("size %d: after reduce-scatter rank %d holds chunk %d from %b", size, r, r, state[r][r])
					}
				}
			}
		}
		for c, n := range reduces {
			if n != size-1 {
				t.Fatalf("size %d: chunk %d reduced %d times, want %d", size, c, n, size-1)
			}
		}
		for r := range size {
			for c := range size {
				if state[r][c] != 1<<size-1 {
					t.Fatalf("size %d: rank %d ends with chunk %d from %b", size, r, c, state[r][c])
				}
			}
		}
	}
}

func TestSegments(t *testing.T) {
	if s := segments(Span{5, 0}, 4); len(s) != 1 || s[0].Len != 0 {
		t.Fatalf("an empty span must give one empty segment, got %v", s)
	}
	s := segments(Span{3, 10}, 4)
	if len(s) != 3 || s[0] != (Span{3, 4}) || s[2] != (Span{11, 2}) {
		t.Fatalf("segments = %v", s)
	}
}

// TestTreeLinks: every rank but the root has one parent, which lists it
// as a child; the tree spans all ranks; no rank has more than
// ceil(log2 N) children, and no path from the root is longer.
func TestTreeLinks(t *testing.T) {
	for size := 1; size <= 70; size++ {
		depthMax := bits.Len(uint(size - 1))
		for _, root := range []int{0, 1 % size, size / 2, size - 1} {
			children := map[int][]int{}
			parent := map[int]int{}
			for r := range size {
				p, cs := TreeLinks(r, root, size)
				parent[r] = p
				children[r] = cs
				if len(cs) > depthMax {
					t.Fatalf("size %d root %d: rank %d has %d children", size, root, r, len(cs))
				}
				if (p < 0) != (r == root) {
					t.Fatalf("size %d root %d: rank %d parent %d", size, root, r, p)
				}
			}
			for r := range size {
				if r == root {
					continue
				}
				if !slices.Contains(children[parent[r]], r) {
					t.Fatalf("size %d root %d: rank %d's parent %d does not list it", size, root, r, parent[r])
				}
				depth := 0
				for x := r; x != root; x = parent[x] {
					if depth++; depth > depthMax {
						t.Fatalf("size %d root %d: rank %d is deeper than %d", size, root, r, depthMax)
					}
				}
			}
		}
	}
}
