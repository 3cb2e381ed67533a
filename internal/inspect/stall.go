package inspect

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RankView is the launcher's view of one rank: its page's state, with
// Since in the launcher's clock.
type RankView struct {
	Rank   int
	Host   string
	State  State
	Exited bool
}

// Stall says whether the job is stalled at now and why. It is stalled when
// some rank is inside a collective and no rank that declared a page began
// or ended one for warn or longer (warn > 0). for is how long nothing has
// moved; report names the ranks that are behind and where every rank is,
// in groups, as
//
//	no progress for 41s; behind: rank 3 (h2); rank 3: not in a collective for 41s (last: #1199); ranks 0-2,4-7: allreduce #1200 float32 16 MiB for 41s
func Stall(ranks []RankView, now time.Time, warn time.Duration) (stalled bool, stuck time.Duration, report string) {
	var last time.Time
	in := false
	for _, r := range ranks {
		if r.Exited || !r.State.Declared {
			continue
		}
		if r.State.Since.After(last) {
			last = r.State.Since
		}
		in = in || r.State.In
	}
	if warn <= 0 || !in || now.Sub(last) < warn {
		return false, 0, ""
	}
	stuck = now.Sub(last)
	return true, stuck, fmt.Sprintf("no progress for %s; %s", Round(stuck), Where(ranks, now))
}

// Where describes every running rank's state, behind ranks first.
func Where(ranks []RankView, now time.Time) string {
	type group struct {
		key      string
		progress uint64 // 2*seq, +1 inside
		declared bool
		ranks    []int
		hosts    []string
	}
	groups := map[string]*group{}
	for _, r := range ranks {
		if r.Exited {
			continue
		}
		s := r.State
		var key string
		var progress uint64
		switch {
		case !s.Declared:
			key = "not using gorun's collectives (no status)"
		case s.In:
			key = fmt.Sprintf("%s #%d %s%s for %s", s.Kind, s.Seq, optional(s.DType), Bytes(s.Bytes), Round(now.Sub(s.Since)))
			progress = 2*s.Seq + 1
		case s.Seq == 0:
			key = fmt.Sprintf("before its first collective, for %s", Round(now.Sub(s.Since)))
		default:
			key = fmt.Sprintf("not in a collective for %s (last: #%d)", Round(now.Sub(s.Since)), s.Seq)
			progress = 2 * s.Seq
		}
		g := groups[key]
		if g == nil {
			g = &group{key: key, progress: progress, declared: s.Declared}
			groups[key] = g
		}
		g.ranks = append(g.ranks, r.Rank)
		g.hosts = append(g.hosts, r.Host)
	}
	var gs []*group
	for _, g := range groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].declared != gs[j].declared {
			return gs[i].declared
		}
		if gs[i].progress != gs[j].progress {
			return gs[i].progress < gs[j].progress
		}
		return gs[i].ranks[0] < gs[j].ranks[0]
	})
	var parts []string
	declared := 0
	for _, g := range gs {
		if g.declared {
			declared++
		}
	}
	if declared > 1 {
		behind := gs[0]
		hosts := uniq(behind.hosts)
		parts = append(parts, fmt.Sprintf("behind: %s (%s)", Ranks(behind.ranks), strings.Join(hosts, ", ")))
	}
	for _, g := range gs {
		parts = append(parts, Ranks(g.ranks)+": "+g.key)
	}
	return strings.Join(parts, "; ")
}

func optional(dtype string) string {
	if dtype == "" {
		return ""
	}
	return dtype + " "
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Ranks writes a sorted set of ranks with runs as ranges: "rank 3",
// "ranks 0-2,4-7".
func Ranks(rs []int) string {
	rs = append([]int(nil), rs...)
	sort.Ints(rs)
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	if len(rs) == 1 {
		return "rank " + b.String()
	}
	return "ranks " + b.String()
}

// Bytes writes a payload size: "16 MiB", "4 KiB", "12 B".
func Bytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Round shortens a duration for a person: whole seconds from 10 s up,
// tenths from 1 s, milliseconds from 1 ms, else microseconds.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// NextReport is when to repeat a stall report after the k-th (from 1):
// warn, then twice as long each time, at most ten minutes apart.
func NextReport(k int, warn time.Duration) time.Duration {
	d := warn
	for i := 1; i < k && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}
