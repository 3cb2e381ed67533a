package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// header is what the report's first lines say about the run.
type header struct {
	when    time.Time
	commit  string
	machine string
	flags   string
}

// derived holds the figures computed from a result's bytes and times.
type derived struct {
	ratio, cMBps, dMBps float64
	serial, stream      float64   // break-even link speeds, bit/s
	spays, stpays       []bool    // at each of the links
	saved               []float64 // serially, at each of the links
}

func derive(r result, links []float64) derived {
	d := derived{
		ratio:  ratio(r.raw, r.comp),
		cMBps:  mbps(r.raw, r.tc),
		dMBps:  mbps(r.raw, r.td),
		serial: serialBreakEven(r.raw, r.comp, r.tc, r.td),
		stream: streamBreakEven(r.raw, r.comp, r.tc),
	}
	for _, l := range links {
		d.spays = append(d.spays, pays(d.serial, l))
		d.stpays = append(d.stpays, pays(d.stream, l))
		d.saved = append(d.saved, saved(r.raw, r.comp, r.tc, r.td, l))
	}
	return d
}

// kindOf names a payload's kind: its source and format ("grad f32").
func kindOf(p *payload) string { return p.source + " " + p.format }

// kindTitle says in words what a kind is.
func kindTitle(kind string) string {
	src, f, _ := strings.Cut(kind, " ")
	what := map[string]string{"grad": "gradients", "params": "parameters"}[src]
	switch f {
	case "f64":
		return "dense float64 " + what
	case "f32":
		return "dense float32 " + what
	case "fp16", "bf16":
		return "dense " + f + " " + what
	}
	return "sparse " + f + " of the " + what
}

// linkName writes a link speed: 100 Mbit/s, 1 Gbit/s, 2.5 Gbit/s.
func linkName(bps float64) string {
	switch {
	case bps >= 1e9:
		return strconv.FormatFloat(bps/1e9, 'g', 4, 64) + " Gbit/s"
	case bps >= 1e6:
		return strconv.FormatFloat(bps/1e6, 'g', 4, 64) + " Mbit/s"
	}
	return strconv.FormatFloat(bps, 'g', 4, 64) + " bit/s"
}

// shortLink is linkName without spaces and "/s", for column names: 100M, 1G.
func shortLink(bps float64) string {
	return strings.NewReplacer(" Gbit/s", "G", " Mbit/s", "M", " bit/s", "").Replace(linkName(bps))
}

func fmtRatio(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

// fmtRate writes a throughput (MB/s) or a break-even speed (Mbit/s).
func fmtRate(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "∞"
	case x == 0:
		return "0"
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// span writes the range of xs as "lo–hi", or one value if both read the
// same.
func span(xs []float64, f func(float64) string) string {
	lo, hi := f(slices.Min(xs)), f(slices.Max(xs))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// group is the results of one kind and one codec over models and
// snapshots.
type group struct {
	kind, codec string
	rs          []result
	ds          []derived
}

// groups collects rep's results by kind and codec, in the order they
// first appear.
func groups(results []result, links []float64) []*group {
	var out []*group
	at := map[[2]string]*group{}
	for _, r := range results {
		key := [2]string{kindOf(r.p), r.codec}
		g := at[key]
		if g == nil {
			g = &group{kind: key[0], codec: key[1]}
			at[key] = g
			out = append(out, g)
		}
		g.rs = append(g.rs, r)
		g.ds = append(g.ds, derive(r, links))
	}
	return out
}

func (g *group) values(f func(derived) float64) []float64 {
	out := make([]float64, len(g.ds))
	for i, d := range g.ds {
		out[i] = f(d)
	}
	return out
}

// count is how many of g's results pay at link i, serially or streaming.
func (g *group) count(i int, stream bool) int {
	n := 0
	for _, d := range g.ds {
		if (!stream && d.spays[i]) || (stream && d.stpays[i]) {
			n++
		}
	}
	return n
}

// A verdict is what the figures say of one payload kind.
type verdict struct {
	kind      string
	instances int      // payloads of the kind (models × snapshots)
	best      *group   // the codec that pays for every payload up to the fastest link (better)
	anyPays   [][2]int // per link: instances some codec pays at, serially and streaming
}

// better reports whether codec a beats b on a kind: a higher lowest
// serial break-even (the speed below which it pays for every payload),
// then a higher median one.
func better(a, b *group) bool {
	serial := func(d derived) float64 { return d.serial }
	la, lb := slices.Min(a.values(serial)), slices.Min(b.values(serial))
	if la != lb {
		return la > lb
	}
	return median(a.values(serial)) > median(b.values(serial))
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// verdicts judges each kind: its best codec, and at each link in how
// many of its payloads some codec pays.
func verdicts(links []float64, gs []*group) []verdict {
	var out []verdict
	byKind := map[string]int{}
	for _, g := range gs {
		i, ok := byKind[g.kind]
		if !ok {
			i = len(out)
			byKind[g.kind] = i
			out = append(out, verdict{kind: g.kind, instances: len(g.rs)})
		}
		v := &out[i]
		if v.best == nil || better(g, v.best) {
			v.best = g
		}
	}
	// Per payload (the same order in every group of a kind), whether
	// any codec pays.
	for i := range out {
		v := &out[i]
		v.anyPays = make([][2]int, len(links))
		for j := range v.instances {
			for li := range links {
				var s, st bool
				for _, g := range gs {
					if g.kind == v.kind {
						s = s || g.ds[j].spays[li]
						st = st || g.ds[j].stpays[li]
					}
				}
				if s {
					v.anyPays[li][0]++
				}
				if st {
					v.anyPays[li][1]++
				}
			}
		}
	}
	return out
}

// sentence says at which links some codec pays for v: "pays at 100
// Mbit/s in 6 of 6, at 1 Gbit/s in 2 of 6, never at 10 Gbit/s".
func (v verdict) sentence(links []float64, stream bool) string {
	k := 0
	if stream {
		k = 1
	}
	if n := 0; true {
		for li := range links {
			n += v.anyPays[li][k]
		}
		if n == 0 {
			return "never pays at any speed measured"
		}
	}
	var parts []string
	for li, l := range links {
		n := v.anyPays[li][k]
		switch n {
		case 0:
			parts = append(parts, "never at "+linkName(l))
		default:
			parts = append(parts, fmt.Sprintf("at %s in %d of %d", linkName(l), n, v.instances))
		}
	}
	return "pays " + strings.Join(parts, ", ")
}

// reach is the index of the fastest link at which some codec pays
// serially for every payload of v (all) and for some payload (some); -1
// for none.
func (v verdict) reach() (all, some int) {
	all, some = -1, -1
	for li := range v.anyPays {
		if v.anyPays[li][0] == v.instances && v.instances > 0 {
			all = li
		}
		if v.anyPays[li][0] > 0 {
			some = li
		}
	}
	return all, some
}

// conclusion sums v up in a few words: never, on slow links only, ...
func (v verdict) conclusion(links []float64) string {
	all, some := v.reach()
	switch {
	case some < 0:
		return fmt.Sprintf("never pays at %s or faster: leave it out", linkName(links[0]))
	case all == len(links)-1:
		return fmt.Sprintf("pays at every speed measured, up to %s", linkName(links[len(links)-1]))
	case all < 0:
		return fmt.Sprintf("pays for some payloads only, at most at %s", linkName(links[some]))
	case some == all:
		return fmt.Sprintf("pays up to %s, not at %s", linkName(links[all]), linkName(links[all+1]))
	}
	return fmt.Sprintf("pays up to %s for every payload, up to %s for some", linkName(links[all]), linkName(links[some]))
}

// writeMarkdown writes the report.
func writeMarkdown(out io.Writer, rep *report, h header) error {
	w := bufio.NewWriter(out)
	cfg := rep.cfg
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	commit := h.commit
	if commit == "" {
		commit = "unknown"
	}
	p("# Lossless compression of frames: s2 and zstd on real gradients, parameters and sparse payloads, %s\n\n", h.when.Format("2006-01-02T15:04Z"))
	p("Commit %s; `bash bench/compress.sh` (flags beyond the defaults: %s); %.0f s of training and timing.\n\n", commit, h.flags, rep.elapsed.Seconds())
	p("Machine: %s. The codecs were timed on one core (GOMAXPROCS=%s) of this shared machine.\n\n",
		h.machine, map[bool]string{true: "1", false: "unchanged"}[cfg.SingleCore])

	p("## What was measured\n\n")
	p("- Data: %s.\n", rep.source)
	var ms []string
	for _, m := range rep.models {
		acc := "no test set"
		if m.accuracy >= 0 {
			acc = fmt.Sprintf("test accuracy %.4f on %d images", m.accuracy, m.testN)
		}
		var losses []string
		for _, s := range m.snaps {
			losses = append(losses, fmt.Sprintf("%.3f at step %d", s.loss, s.step))
		}
		ms = append(ms, fmt.Sprintf("%s (%d parameters; batch loss %s; %s)", m.model, m.params, strings.Join(losses, ", "), acc))
	}
	p("- Models (examples/fmnist/nn, MLP hidden %v, CNN %v), trained in this process with plain SGD (learning rate %g, batch %d, %d steps, seed %d): %s.\n",
		cfg.MLPHidden, cfg.CNN, cfg.LR, cfg.Batch, cfg.Steps, cfg.Seed, strings.Join(ms, "; "))
	p("- Snapshots at steps %s (early, middle, late): the step's batch gradient and the parameters it was taken at.\n", strings.ReplaceAll(joinInts(cfg.Snapshots), ",", ", "))
	p("- Payloads of each snapshot: the gradient and the parameters as float64 (the model's type), float32, fp16 and bf16 " +
		"(reduce.Encode with WireFP16 and WireBF16 of the float32 values; an fp16 value below 2^-25 in magnitude becomes 0, hence the zeros column), " +
		"and the gradient's top-k by magnitude (ties to the lower index) at ")
	var pcts []string
	for _, x := range cfg.TopK {
		pcts = append(pcts, fmtPct(x)+" %")
	}
	p("%s: k float32 values, then the k indices as sorted uint32 (`u32`) or as the first index and the gaps as uvarints (`delta`). "+
		"This top-k encoding is this bench's own stand-in: package ps's sparse pushes were being built at the same time and have their own format.\n", strings.Join(pcts, " and "))
	p("- Codecs (github.com/klauspost/compress, one block per payload): `s2` is s2.Encode, `s2-better` s2.EncodeBetter (both decoded by s2.Decode), " +
		"`zstd-fastest` and `zstd-default` are zstd EncodeAll at SpeedFastest and SpeedDefault (encoder concurrency 1), decoded by DecodeAll. " +
		"Every payload is decompressed and compared with its bytes before it is timed.\n")
	p("- Timing: careful timing loops, not testing.Benchmark: the best of %d runs, each repeating the call until it took at least %v "+
		"(the first run doubles its count until then). Throughputs are MB/s (10^6 bytes a second) of the uncompressed payload: compress's input, decompress's output.\n", cfg.Runs, cfg.MinTime)
	p("- Ratio: raw bytes / compressed bytes (above 1: smaller).\n")
	p("- Break-even link speed, serial (nothing overlaps): compressing pays when tc + td + compressed/link < raw/link, that is below (raw − compressed)·8 / (tc + td) bit/s. " +
		"Streaming (a pipeline of chunks, only the slower of compression and the link counts, decompression overlapped on the receiver): " +
		"max(tc, compressed/link) < raw/link, that is compressed < raw and link < raw·8 / tc. " +
		"**The verdict uses the serial criterion**: in gorun's ring a step's chunk is received, reduced and sent on as one frame, so its compression and decompression lie on the step's path; " +
		"the streaming figure is the bound for a transport that would cut frames into chunks and overlap them.\n\n")

	if err := w.Flush(); err != nil {
		return err
	}
	return writeBody(out, rep.results, cfg.Links, "")
}

// writeBody writes the report from its verdict on: what the results say,
// then the tables. note, if not empty, opens the verdict section.
func writeBody(out io.Writer, results []result, links []float64, note string) error {
	w := bufio.NewWriter(out)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	gs := groups(results, links)
	vs := verdicts(links, gs)
	p("## Verdict (serial criterion, computed from the tables below)\n\n")
	if note != "" {
		p("%s\n\n", note)
	}
	serial := func(d derived) float64 { return d.serial / 1e6 }
	for _, v := range vs {
		b := v.best
		p("- **%s** (`%s`): %s. ", kindTitle(v.kind), v.kind, v.conclusion(links))
		figures := fmt.Sprintf("ratio %s, break-even %s Mbit/s", span(b.values(func(d derived) float64 { return d.ratio }), fmtRatio), span(b.values(serial), fmtRate))
		if low := slices.Min(b.values(serial)); low > 0 {
			p("%s pays for every payload below %s Mbit/s (its lowest break-even; %s). ", b.codec, fmtRate(low), figures)
		} else {
			p("No codec pays for every payload at any speed; %s does best (%s). ", b.codec, figures)
		}
		var sv []string
		for li, l := range links {
			x := b.values(func(d derived) float64 { return 100 * d.saved[li] })
			sv = append(sv, fmt.Sprintf("at %s %s to %s %%", linkName(l), fmtShare(slices.Min(x)), fmtShare(slices.Max(x))))
		}
		p("Share of the raw send time %s saves (negative: loses): %s. ", b.codec, strings.Join(sv, ", "))
		p("Any codec: %s (of %d payloads: models × snapshots). Streaming, any codec: %s.\n",
			v.sentence(links, false), v.instances, v.sentence(links, true))
	}
	p("\n%s\n\n", answer(vs, links))
	p("%s\n\n", bounds(results, links))
	p("## Summary: each payload kind and codec over models and snapshots (min–max)\n\n")
	p("| payload | codec | ratio | compress MB/s | decompress MB/s | break-even Mbit/s |")
	for _, l := range links {
		p(" %s |", linkName(l))
	}
	p(" streaming break-even Mbit/s |")
	for _, l := range links {
		p(" %s |", linkName(l))
	}
	p("\n|---|---|---:|---:|---:|---:|%s---:|%s\n", strings.Repeat("---:|", len(links)), strings.Repeat("---:|", len(links)))
	for _, g := range gs {
		p("| %s | %s | %s | %s | %s | %s |", g.kind, g.codec,
			span(g.values(func(d derived) float64 { return d.ratio }), fmtRatio),
			span(g.values(func(d derived) float64 { return d.cMBps }), fmtRate),
			span(g.values(func(d derived) float64 { return d.dMBps }), fmtRate),
			span(g.values(func(d derived) float64 { return d.serial / 1e6 }), fmtRate))
		for li := range links {
			p(" %d/%d |", g.count(li, false), len(g.rs))
		}
		p(" %s |", span(g.values(func(d derived) float64 { return d.stream / 1e6 }), fmtRate))
		for li := range links {
			p(" %d/%d |", g.count(li, true), len(g.rs))
		}
		p("\n")
	}
	p("\nA cell a/n: compressing pays for a of the n payloads (models × snapshots) at that link speed.\n\n")

	p("## Every payload\n\n")
	p("Break-even speeds in Mbit/s (0: the codec saves nothing); pays: at that link speed, serially and streaming.\n\n")
	p("| model | step | payload | elems | k | zeros %% | raw B | codec | compressed B | ratio | compress MB/s | decompress MB/s | break-even |")
	for _, l := range links {
		p(" %s |", shortLink(l))
	}
	p(" streaming break-even |")
	for _, l := range links {
		p(" %s |", shortLink(l))
	}
	p("\n|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|%s---:|%s\n", strings.Repeat("---|", len(links)), strings.Repeat("---|", len(links)))
	for _, r := range results {
		for _, c := range markdownRow(r, links) {
			p("| %s ", c)
		}
		p("|\n")
	}
	return w.Flush()
}

// markdownRow is the cells of r's row in the "Every payload" table.
func markdownRow(r result, links []float64) []string {
	d := derive(r, links)
	k := ""
	if r.p.k > 0 {
		k = strconv.Itoa(r.p.k)
	}
	of := r.p.elems
	if r.p.k > 0 {
		of = r.p.k
	}
	zeros := 0.0
	if of > 0 {
		zeros = 100 * float64(r.p.zeros) / float64(of)
	}
	cells := []string{r.p.model, strconv.Itoa(r.p.step), kindOf(r.p), strconv.Itoa(r.p.elems), k,
		strconv.FormatFloat(zeros, 'f', 1, 64), strconv.Itoa(r.raw), r.codec, strconv.Itoa(r.comp),
		fmtRatio(d.ratio), fmtRate(d.cMBps), fmtRate(d.dMBps), fmtRate(d.serial / 1e6)}
	for _, b := range d.spays {
		cells = append(cells, yesNo(b))
	}
	cells = append(cells, fmtRate(d.stream/1e6))
	for _, b := range d.stpays {
		cells = append(cells, yesNo(b))
	}
	return cells
}

// answer is the closing list: the kinds grouped by their conclusion.
func answer(vs []verdict, links []float64) string {
	var order []string
	kinds := map[string][]string{}
	// The kinds that pay the most first.
	vs = slices.Clone(vs)
	slices.SortStableFunc(vs, func(a, b verdict) int {
		aa, as := a.reach()
		ba, bs := b.reach()
		if aa != ba {
			return ba - aa
		}
		return bs - as
	})
	for _, v := range vs {
		c := v.conclusion(links)
		if kinds[c] == nil {
			order = append(order, c)
		}
		kinds[c] = append(kinds[c], "`"+v.kind+"`")
	}
	var b strings.Builder
	b.WriteString("In short, serially:\n\n")
	for _, c := range order {
		fmt.Fprintf(&b, "- %s: %s.\n", strings.ToUpper(c[:1])+c[1:], strings.Join(kinds[c], ", "))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// fmtShare writes a percentage with one decimal, never as -0.0.
func fmtShare(x float64) string {
	s := strconv.FormatFloat(x, 'f', 1, 64)
	if s == "-0.0" {
		return "0.0"
	}
	return s
}

// bounds says how far compression goes at best: the highest ratio of
// any payload, so the most any link speed could save, and the largest
// share of the send time saved at each link.
func bounds(results []result, links []float64) string {
	if len(results) == 0 {
		return "No results."
	}
	name := func(r result) string {
		return fmt.Sprintf("`%s` of the %s at step %d, %s", kindOf(r.p), r.p.model, r.p.step, r.codec)
	}
	top := results[0]
	for _, r := range results {
		if ratio(r.raw, r.comp) > ratio(top.raw, top.comp) {
			top = r
		}
	}
	x := ratio(top.raw, top.comp)
	s := fmt.Sprintf("The highest ratio of any payload is %s (%s): compression can save at most 1 − 1/ratio = %s %% of a send, on however slow a link. "+
		"The largest share of the send time saved, serially:", fmtRatio(x), name(top), fmtShare(100*(1-1/x)))
	for _, l := range links {
		best := results[0]
		for _, r := range results {
			if saved(r.raw, r.comp, r.tc, r.td, l) > saved(best.raw, best.comp, best.tc, best.td, l) {
				best = r
			}
		}
		s += fmt.Sprintf(" at %s %s %% (%s);", linkName(l), fmtShare(100*saved(best.raw, best.comp, best.tc, best.td, l)), name(best))
	}
	return strings.TrimSuffix(s, ";") + "."
}

// tsvHeader is the TSV's first line.
func tsvHeader(links []float64) []string {
	h := []string{"model", "step", "phase", "source", "format", "elems", "k", "zeros", "codec",
		"raw_bytes", "comp_bytes", "ratio", "compress_ns", "decompress_ns", "compress_MBps", "decompress_MBps",
		"serial_breakeven_Mbps", "stream_breakeven_Mbps"}
	for _, l := range links {
		h = append(h, "serial_pays_"+shortLink(l))
	}
	for _, l := range links {
		h = append(h, "stream_pays_"+shortLink(l))
	}
	return append(h, "roundtrip")
}

// writeTSV writes one row per payload and codec. Bytes and times are
// exact integers; the derived columns follow from them (%.6g).
func writeTSV(out io.Writer, rep *report) error {
	w := bufio.NewWriter(out)
	fmt.Fprintln(w, strings.Join(tsvHeader(rep.cfg.Links), "\t"))
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, r := range rep.results {
		d := derive(r, rep.cfg.Links)
		row := []string{r.p.model, strconv.Itoa(r.p.step), r.p.phase, r.p.source, r.p.format,
			strconv.Itoa(r.p.elems), strconv.Itoa(r.p.k), strconv.Itoa(r.p.zeros), r.codec,
			strconv.Itoa(r.raw), strconv.Itoa(r.comp), g(d.ratio),
			strconv.FormatInt(r.tc.Nanoseconds(), 10), strconv.FormatInt(r.td.Nanoseconds(), 10),
			g(d.cMBps), g(d.dMBps), g(d.serial / 1e6), g(d.stream / 1e6)}
		for _, b := range d.spays {
			row = append(row, strconv.FormatBool(b))
		}
		for _, b := range d.stpays {
			row = append(row, strconv.FormatBool(b))
		}
		// measure fails the run on a bad round trip, so every row held.
		row = append(row, "ok")
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

// readTSV reads what writeTSV wrote back into results (their payloads
// without bytes) and the link speeds of its columns.
func readTSV(in io.Reader) ([]result, []float64, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		return nil, nil, fmt.Errorf("compress: TSV: no header: %v", sc.Err())
	}
	head := strings.Split(sc.Text(), "\t")
	var links []float64
	for _, h := range head {
		name, ok := strings.CutPrefix(h, "serial_pays_")
		if !ok {
			continue
		}
		mult := 1.0
		switch {
		case strings.HasSuffix(name, "G"):
			mult, name = 1e9, strings.TrimSuffix(name, "G")
		case strings.HasSuffix(name, "M"):
			mult, name = 1e6, strings.TrimSuffix(name, "M")
		}
		x, err := strconv.ParseFloat(name, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("compress: TSV: column %s: %w", h, err)
		}
		links = append(links, x*mult)
	}
	if !slices.Equal(head, tsvHeader(links)) {
		return nil, nil, fmt.Errorf("compress: TSV: header %q is not this version's", sc.Text())
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	var out []result
	for line := 2; sc.Scan(); line++ {
		cells := strings.Split(sc.Text(), "\t")
		if len(cells) != len(head) {
			return nil, nil, fmt.Errorf("compress: TSV line %d: %d cells, want %d", line, len(cells), len(head))
		}
		var err error
		num := func(name string) int {
			n, e := strconv.Atoi(cells[col[name]])
			if e != nil && err == nil {
				err = fmt.Errorf("compress: TSV line %d: %s: %w", line, name, e)
			}
			return n
		}
		c := func(name string) string { return cells[col[name]] }
		p := &payload{model: c("model"), step: num("step"), phase: c("phase"), source: c("source"), format: c("format"),
			elems: num("elems"), k: num("k"), zeros: num("zeros")}
		r := result{p: p, codec: c("codec"), raw: num("raw_bytes"), comp: num("comp_bytes"),
			tc: time.Duration(num("compress_ns")), td: time.Duration(num("decompress_ns"))}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, r)
	}
	return out, links, sc.Err()
}
