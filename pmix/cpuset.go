package pmix

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// maxCPUs caps the CPU (and NUMA node) numbers the topology reader
// accepts: Linux's NR_CPUS is at most 8192 on the architectures it
// supports; a file naming a larger one is not this machine's.
const maxCPUs = 1 << 16

var errSetTooLarge = fmt.Errorf("a CPU or node number of %d or more", maxCPUs)

// cpuset is a set of CPU or NUMA node numbers, bit i of word i/64 for i.
// The zero value is the empty set; a set never holds trailing zero words.
type cpuset []uint64

func (s cpuset) has(i int) bool {
	return i >= 0 && i/64 < len(s) && s[i/64]&(1<<(uint(i)%64)) != 0
}

func (s *cpuset) set(i int) {
	for len(*s) <= i/64 {
		*s = append(*s, 0)
	}
	(*s)[i/64] |= 1 << (uint(i) % 64)
}

// trim drops trailing zero words, so that equal sets are equal slices.
func (s cpuset) trim() cpuset {
	for len(s) > 0 && s[len(s)-1] == 0 {
		s = s[:len(s)-1]
	}
	return s
}

func (s cpuset) clone() cpuset { return append(cpuset(nil), s...) }

func (s cpuset) and(t cpuset) cpuset {
	n := min(len(s), len(t))
	r := make(cpuset, n)
	for i := range r {
		r[i] = s[i] & t[i]
	}
	return r.trim()
}

func (s cpuset) or(t cpuset) cpuset {
	if len(s) < len(t) {
		s, t = t, s
	}
	r := s.clone()
	for i, w := range t {
		r[i] |= w
	}
	return r
}

func (s cpuset) equal(t cpuset) bool {
	s, t = s.trim(), t.trim()
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// within reports whether s is a subset of t.
func (s cpuset) within(t cpuset) bool {
	for i, w := range s {
		var u uint64
		if i < len(t) {
			u = t[i]
		}
		if w&^u != 0 {
			return false
		}
	}
	return true
}

func (s cpuset) intersects(t cpuset) bool {
	for i := 0; i < min(len(s), len(t)); i++ {
		if s[i]&t[i] != 0 {
			return true
		}
	}
	return false
}

func (s cpuset) empty() bool { return len(s.trim()) == 0 }

func (s cpuset) weight() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// first is the lowest member, or -1.
func (s cpuset) first() int {
	for i, w := range s {
		if w != 0 {
			return i*64 + bits.TrailingZeros64(w)
		}
	}
	return -1
}

// members lists the set, ascending.
func (s cpuset) members() []int {
	var r []int
	for i, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			r = append(r, i*64+b)
			w &^= 1 << uint(b)
		}
	}
	return r
}

// String is the set as hwloc writes a bitmap (hwloc_bitmap_asprintf):
// 32-bit words in hex, most significant first, separated by commas, from
// the highest nonzero 64-bit word down; within it a zero high half is
// left out when nothing was written before it, a zero word in the middle
// is written as nothing between its commas, and a zero last half as 0x0.
// The empty set is "0x0".
func (s cpuset) String() string {
	s = s.trim()
	if len(s) == 0 {
		return "0x0"
	}
	var b strings.Builder
	written := false
	for i := len(s) - 1; i >= 0; i-- {
		for half := 1; half >= 0; half-- {
			v := uint32(s[i] >> (32 * uint(half)))
			last := i == 0 && half == 0
			switch {
			case v != 0:
				if written {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "0x%08x", v)
				written = true
			case last:
				b.WriteString(",0x0") // written is true: s has a nonzero word
			case written:
				b.WriteByte(',')
			}
		}
	}
	return b.String()
}

// parseCPUMask reads a kernel bitmap ("%*pb": 32-bit hex words, most
// significant first, separated by commas, as in a NUMA node's cpumap and
// a cache's shared_cpu_map).
func parseCPUMask(text string) (cpuset, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, errors.New("empty CPU mask")
	}
	words := strings.Split(text, ",")
	if len(words) > maxCPUs/32 {
		return nil, errSetTooLarge
	}
	var s cpuset
	for i, w := range words {
		if w == "" || len(w) > 8 {
			return nil, fmt.Errorf("CPU mask %q: word %q", short(text), w)
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("CPU mask %q: word %q", short(text), w)
		}
		base := 32 * (len(words) - 1 - i)
		for v != 0 {
			b := bits.TrailingZeros64(v)
			s.set(base + b)
			v &^= 1 << uint(b)
		}
	}
	return s.trim(), nil
}

// parseCPUList reads a kernel list ("%*pbl": "0-3,8,10-11", as in
// .../online and cpuset.cpus); "" is the empty set.
func parseCPUList(text string) (cpuset, error) {
	text = strings.TrimSpace(text)
	var s cpuset
	if text == "" {
		return s, nil
	}
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: %q", short(text), part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: %q", short(text), part)
			}
		}
		if b >= maxCPUs {
			return nil, errSetTooLarge
		}
		for i := a; i <= b; i++ {
			s.set(i)
		}
	}
	return s.trim(), nil
}

// short is text cut for an error message.
func short(text string) string {
	if len(text) > 40 {
		return text[:40] + "..."
	}
	return text
}
