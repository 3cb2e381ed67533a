package launcher

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Batch allocations as host sources. Inside a Slurm or PBS/Torque job,
// with no -hostfile and no -H, gorun runs on the allocated nodes.

// MaxAllocHosts caps what a hostlist may expand to.
const MaxAllocHosts = 1 << 16

// AllocHosts returns the hosts of the batch allocation described by the
// environment (lookup is os.LookupEnv in gorun) and where they came from,
// or no hosts when there is no allocation:
//
//   - Slurm: SLURM_JOB_NODELIST (or SLURM_NODELIST), with slots from
//     SLURM_TASKS_PER_NODE, else SLURM_JOB_CPUS_PER_NODE, else 1 per node.
//   - PBS/Torque: PBS_NODEFILE, a file with one line per slot, read by
//     readFile.
func AllocHosts(lookup func(string) (string, bool), readFile func(string) ([]byte, error)) ([]Host, string, error) {
	list, ok := lookup("SLURM_JOB_NODELIST")
	src := "SLURM_JOB_NODELIST"
	if !ok || list == "" {
		list, ok = lookup("SLURM_NODELIST")
		src = "SLURM_NODELIST"
	}
	if ok && list != "" {
		names, err := ExpandHostlist(list)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", src, err)
		}
		counts := make([]int, len(names))
		for i := range counts {
			counts[i] = 1
		}
		for _, v := range []string{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"} {
			s, ok := lookup(v)
			if !ok || s == "" {
				continue
			}
			if counts, err = ExpandCounts(s); err != nil {
				return nil, "", fmt.Errorf("%s: %w", v, err)
			}
			if len(counts) != len(names) {
				return nil, "", fmt.Errorf("%s %q gives %d counts for the %d nodes of %s", v, s, len(counts), len(names), src)
			}
			src += " and " + v
			break
		}
		hosts := make([]Host, len(names))
		for i, n := range names {
			hosts[i] = Host{Name: n, Slots: counts[i]}
		}
		return hosts, "Slurm allocation (" + src + ")", nil
	}
	if f, ok := lookup("PBS_NODEFILE"); ok && f != "" {
		b, err := readFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("PBS_NODEFILE: %w", err)
		}
		var hosts []Host
		at := map[string]int{}
		for i, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if strings.ContainsAny(l, " \t") {
				return nil, "", fmt.Errorf("PBS_NODEFILE %s:%d: %q is not one host name", f, i+1, l)
			}
			if j, ok := at[l]; ok {
				hosts[j].Slots++
				continue
			}
			at[l] = len(hosts)
			hosts = append(hosts, Host{Name: l, Slots: 1})
		}
		if len(hosts) == 0 {
			return nil, "", fmt.Errorf("PBS_NODEFILE %s: no hosts", f)
		}
		return hosts, "PBS allocation (PBS_NODEFILE " + f + ")", nil
	}
	return nil, "", nil
}

// ExpandHostlist expands a Slurm hostlist: comma-separated names, each
// with any number of bracket groups of numbers and ranges, zero padding
// kept: "node[01-03,07],login" is node01 node02 node03 node07 login, and
// "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2.
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for _, item := range splitTop(s) {
		if item == "" {
			return nil, fmt.Errorf("hostlist %q: empty name", clipStr(s))
		}
		names, err := expandItem(item, len(out))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", clipStr(s), err)
		}
		out = append(out, names...)
	}
	if len(out) == 0 {
		return nil, errors.New("empty hostlist")
	}
	return out, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// expandItem expands one name with bracket groups; have is how many names
// the list already holds (for the cap).
func expandItem(item string, have int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("%q: ']' without '['", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", item)
	}
	end += open
	prefix, group, rest := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsAny(prefix, "]") || strings.ContainsAny(group, "[") {
		return nil, fmt.Errorf("%q: unbalanced brackets", item)
	}
	nums, err := expandRanges(group)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", item, err)
	}
	tails, err := expandItem(rest, have)
	if err != nil {
		return nil, err
	}
	if have+len(nums)*len(tails) > MaxAllocHosts {
		return nil, fmt.Errorf("more than %d hosts", MaxAllocHosts)
	}
	out := make([]string, 0, len(nums)*len(tails))
	for _, n := range nums {
		for _, t := range tails {
			out = append(out, prefix+n+t)
		}
	}
	return out, nil
}

// expandRanges expands "01-03,7" to 01 02 03 7: a range keeps the width of
// its first number.
func expandRanges(g string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(g, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := number(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = number(hi); err != nil {
				return nil, err
			}
		}
		if b < a {
			return nil, fmt.Errorf("range %q runs backwards", r)
		}
		if b-a >= MaxAllocHosts || len(out)+b-a >= MaxAllocHosts {
			return nil, fmt.Errorf("range %q: more than %d hosts", r, MaxAllocHosts)
		}
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), n))
		}
	}
	return out, nil
}

func number(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return strconv.Atoi(s)
}

// ExpandCounts expands Slurm's per-node counts: "2(x3),1" is 2 2 2 1.
func ExpandCounts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasSuffix(part, ")") || !strings.HasPrefix(part[i+1:], "x") {
				return nil, fmt.Errorf("%q: want N or N(xR)", part)
			}
			v, rep = part[:i], part[i+2:len(part)-1]
		}
		n, err := number(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want a count of at least 1", part)
		}
		r, err := number(rep)
		if err != nil || r < 1 || len(out)+r > MaxAllocHosts {
			return nil, fmt.Errorf("%q: bad repeat", part)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}

func clipStr(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
