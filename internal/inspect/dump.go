package inspect

import "strings"

// TopFrames picks from a Go goroutine dump (what SIGQUIT prints) the
// goroutine that is inside gorun's collectives (or, if none is, goroutine
// 1, the main one) and returns its header and its top frames (up to n
// function and file line pairs), or "" if the dump holds no goroutine.
// When the call into the collective package (its outermost frame) is
// deeper than n, "..." follows, then that frame and its caller's.
func TopFrames(dump string, n int) string {
	var blocks [][]string
	var cur []string
	for _, l := range strings.Split(dump, "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.HasPrefix(l, "goroutine ") && strings.HasSuffix(l, ":") {
			if cur != nil {
				blocks = append(blocks, cur)
			}
			cur = []string{l}
			continue
		}
		if cur != nil {
			if strings.TrimSpace(l) == "" {
				blocks = append(blocks, cur)
				cur = nil
				continue
			}
			cur = append(cur, l)
		}
	}
	if cur != nil {
		blocks = append(blocks, cur)
	}
	pick := -1
	for i, b := range blocks {
		if strings.Contains(strings.Join(b, "\n"), "CatchQuit") {
			continue // the goroutine that wrote a dump (CatchQuit), not the rank's
		}
		for _, l := range b[1:] {
			if strings.Contains(l, "gorun/gorun/collective.") || strings.Contains(l, "gorun/gorun/ring.") || strings.Contains(l, "gorun/gorun/ps.") {
				pick = i
				break
			}
		}
		if pick >= 0 {
			break
		}
	}
	if pick < 0 {
		for i, b := range blocks {
			if strings.HasPrefix(b[0], "goroutine 1 ") {
				pick = i
			}
		}
	}
	if pick < 0 {
		return ""
	}
	b := blocks[pick]
	end := min(len(b), 1+2*n)
	out := append([]string(nil), b[:end]...)
	entry := -1
	for i := 1; i < len(b); i += 2 {
		if strings.HasPrefix(b[i], "github.com/gorun/gorun/collective.") {
			entry = i
		}
	}
	if entry >= end {
		out = append(out, "...")
		out = append(out, b[entry:min(len(b), entry+4)]...)
	}
	for i, l := range out {
		// Under GOTRACEBACK=system or crash, file lines carry registers.
		if j := strings.Index(l, " fp=0x"); j > 0 {
			out[i] = l[:j]
		}
	}
	return strings.Join(out, "\n")
}
