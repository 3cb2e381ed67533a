package transport

import (
	"math/bits"
	"sync"
)

// pool recycles payload buffers in power-of-two size classes.
var pool [41]sync.Pool

// GetBuf returns a buffer of n bytes from the transport's pool of
// power-of-two size classes, for a frame's payload (as the alloc of
// Reader.Next); its contents are whatever they were. PutBuf gives a
// buffer back once nothing refers to it (a slice whose capacity is not a
// power of two is dropped: give back what GetBuf returned, not a part).
func GetBuf(n int) []byte { return getBuf(n) }

// PutBuf gives b, from GetBuf, back to the pool (see GetBuf).
func PutBuf(b []byte) { putBuf(b) }

func getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if c < len(pool) {
		if b, ok := pool[c].Get().(*[]byte); ok {
			return (*b)[:n]
		}
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

func putBuf(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	if cap(b) == 0 || cap(b) != 1<<c || c >= len(pool) {
		return
	}
	b = b[:cap(b)]
	pool[c].Put(&b)
}
