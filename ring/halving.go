package ring

import "context"

// Halving is the recursive halving and doubling all-reduce (Rabenseifner's
// algorithm): a reduce-scatter in which every rank swaps half of its
// current range with the rank p/2, p/4, … 1 away and reduces the half it
// keeps, then an all-gather that retraces those steps with growing
// ranges. It moves the ring's bytes, 2(p−1)/p of the buffer per rank, in
// 2·log2(p) steps instead of the ring's 2(N−1), so at 64 ranks 12 steps
// replace 126. When N is not a power of two, the first 2·(N−p) ranks
// fold in pairs first and the result goes back to the ranks that sat
// out, which costs two whole-buffer transfers on those ranks. HalvingWins
// says when it beats the ring. Every element is reduced on one rank only and then
// copied, so every rank ends with the same bits.
func Halving[T Elem](ctx context.Context, tr Transport, buf []T, fold func(dst, src []T), o Options) error {
	rank, size := tr.Rank(), tr.Size()
	if size < 2 {
		return nil
	}
	q := newPow2(size)
	x, cancel := newExchanger[T](ctx, tr, o)
	defer cancel()
	v, err := foldIn(x, q, rank, buf, func(from int) error { return x.recvFold(from, 0, buf, fold) })
	if err != nil {
		return err
	}
	step := uint32(1)
	if v >= 0 {
		chunks := Chunks(len(buf), q.p)
		rng := func(lo, hi int) []T { return buf[chunks[lo].Off : chunks[hi-1].Off+chunks[hi-1].Len] }
		// Reduce-scatter: keep the half of [lo, hi) on this rank's side of
		// dist, send the other; at the end this rank holds chunk v.
		lo, hi := 0, q.p
		for dist := q.p / 2; dist >= 1; dist, step = dist/2, step+1 {
			mid := lo + dist
			keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
			if v&dist != 0 {
				keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
			}
			if err := x.swapFold(q.real(v^dist), step, rng(sendLo, sendHi), rng(keepLo, keepHi), fold); err != nil {
				return err
			}
			lo, hi = keepLo, keepHi
		}
		// All-gather: the same partners in reverse, ranges doubling.
		for dist := 1; dist < q.p; dist, step = dist*2, step+1 {
			plo, phi := lo+dist, hi+dist
			if v&dist != 0 {
				plo, phi = lo-dist, hi-dist
			}
			if err := x.swap(q.real(v^dist), step, rng(lo, hi), rng(plo, phi)); err != nil {
				return err
			}
			lo, hi = min(lo, plo), max(hi, phi)
		}
	} else {
		step += 2 * uint32(log2(q.p))
	}
	return sendBack(x, q, rank, step, buf)
}

// HalvingWins says whether Halving beats the ring for an all-reduce of
// nbytes on size ranks. When size is a power of two the two move the same
// bytes, and Halving takes 2·log2(size) steps against the ring's
// 2(size−1), but its steps do not overlap: a rank sends step k+1's half
// only once step k's is reduced, where the ring forwards each segment as
// soon as it is ready. So Halving wins while a ring step's chunk is small
// enough for its cost to be latency, up to HalvingChunkBytes; past it
// the ring's pipelining wins. Measured on this 2-core machine
// (examples/allreduce -algo ring|halving, alternating, 3 rounds):
// 4 ranks on one host, 64 KiB 35-59 us against 57-110, 128 KiB 47-102
// against 65-161; 8 ranks on one host, 64 KiB 133-137 us against 204-227,
// 512 KiB even; one rank on each of 8 test hosts at 1 Gbit/s, 64 KiB 3.2-
// 3.7 ms against 9.4-10.2, 256 KiB 6.4-6.8 ms against 10.3-13.1, 512 KiB
// even, 16 MiB 1.45x slower. When size is not a power of two, the fold-in
// and send-back add two transfers of the whole buffer on the paired
// ranks, so Halving is picked from 8 ranks up and only up to a quarter of
// that chunk (24 ranks on one host: 48 KiB 0.8-2.2 ms against 1.9-2.5,
// 384 KiB 3.4-4.4 ms against 4.8-5.7).
func HalvingWins(size, nbytes int) bool {
	if size&(size-1) == 0 {
		return size >= 4 && nbytes <= size*HalvingChunkBytes
	}
	return size >= 8 && nbytes <= size*HalvingChunkBytes/4
}

// HalvingChunkBytes is the largest ring chunk (buffer / ranks) for which
// Halving is picked over the ring.
const HalvingChunkBytes = 32 << 10

func log2(p int) int {
	k := 0
	for p > 1 {
		p, k = p/2, k+1
	}
	return k
}
