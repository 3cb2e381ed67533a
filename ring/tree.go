package ring

import "context"

// TreeBroadcast copies root's buf into every rank's buf down a binomial
// tree: a rank receives once, from its parent, and sends to at most
// log2(N) children, so the root no longer talks to every rank and the
// broadcast ends after ceil(log2 N) hops. It suits small buffers; large
// ones pipeline better down Broadcast's chain.
func TreeBroadcast[T Elem](ctx context.Context, tr Transport, buf []T, root int, o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	x, cancel := newExchanger[T](ctx, tr, o)
	defer cancel()
	parent, children := TreeLinks(rank, root, size)
	if parent >= 0 {
		if err := x.recv(parent, 0, buf); err != nil {
			return err
		}
	}
	for _, c := range children {
		if err := x.send(c, 0, buf); err != nil {
			return err
		}
	}
	return nil
}

// TreeLinks is rank's place in the binomial tree of size ranks rooted at
// root: its parent (-1 for the root) and its children, farthest subtree
// first (so the deepest subtree starts earliest).
func TreeLinks(rank, root, size int) (parent int, children []int) {
	v := (rank - root + size) % size
	parent = -1
	mask := 1
	for mask < size {
		if v&mask != 0 {
			parent = (v - mask + root) % size
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < size {
			children = append(children, (v+mask+root)%size)
		}
	}
	return parent, children
}
