// Command scalechart draws bench/scale.sh's results: the median over the
// successful runs of one column of its TSV (wall time by default) against
// the number of ranks, one line per runner (and mode, when the file holds
// both), as PNG with the same chart as SVG beside it (or as SVG alone when
// -out ends in .svg).
//
//	go run ./bench/scalechart -in results/scale/DATE-COMMIT.tsv -out results/scale/DATE-COMMIT.png
//	go run ./bench/scalechart -in results/scale/DATE-COMMIT.tsv -out join.png -metric join_ms_max
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/internal/chart"
)

// labels gives each column that can be drawn its title and unit.
var labels = map[string][2]string{
	"wall_s":       {"Wall time of a small job", "seconds"},
	"join_ms_max":  {"Join time (slowest rank)", "ms"},
	"shm_peak_kib": {"Peak /dev/shm during the job", "KiB"},
	"rss_kib_max":  {"Peak RSS (largest rank)", "KiB"},
	"sockets_max":  {"Open sockets (most of a rank)", "sockets"},
	"sockets_mean": {"Open sockets (mean per rank)", "sockets"},
	"exit_ms":      {"Rank 0's Close / MPI_Finalize", "ms"},
}

func main() {
	in := flag.String("in", "", "the TSV bench/scale.sh wrote")
	out := flag.String("out", "", "the PNG to write (and the same chart as SVG beside it), or an SVG")
	metric := flag.String("metric", "wall_s", "the column to draw: wall_s, join_ms_max, shm_peak_kib, rss_kib_max, sockets_max, sockets_mean or exit_ms")
	flag.Parse()
	if *in == "" || *out == "" || labels[*metric][0] == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*in, *out, *metric); err != nil {
		fmt.Fprintln(os.Stderr, "scalechart:", err)
		os.Exit(1)
	}
}

func run(in, out, metric string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	type key struct {
		series string
		n      float64
	}
	vals := map[key][]float64{}
	modes := map[string]bool{}
	var rows [][]string
	col := map[string]int{}
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		fields := strings.Split(s.Text(), "\t")
		if line == 1 {
			for i, name := range fields {
				col[name] = i
			}
			for _, name := range []string{"mode", "n", "runner", "status", metric} {
				if _, ok := col[name]; !ok {
					return fmt.Errorf("%s: no column %q", in, name)
				}
			}
			continue
		}
		if len(fields) != len(col) {
			return fmt.Errorf("%s:%d: %d fields, want %d", in, line, len(fields), len(col))
		}
		rows = append(rows, fields)
		modes[fields[col["mode"]]] = true
	}
	if err := s.Err(); err != nil {
		return err
	}
	var order []string
	for _, r := range rows {
		name := r[col["runner"]]
		if len(modes) > 1 {
			name += " (" + r[col["mode"]] + ")"
		}
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
		n, err1 := strconv.ParseFloat(r[col["n"]], 64)
		v, err2 := strconv.ParseFloat(r[col[metric]], 64)
		if r[col["status"]] != "ok" || err1 != nil || err2 != nil {
			continue
		}
		k := key{name, n}
		vals[k] = append(vals[k], v)
	}
	c := &chart.Line{Title: labels[metric][0] + " against ranks, median of runs",
		XLabel: "ranks (N)", YLabel: labels[metric][1], LogX: true}
	for _, name := range order {
		sr := chart.Series{Name: name}
		var ns []float64
		for k := range vals {
			if k.series == name {
				ns = append(ns, k.n)
			}
		}
		slices.Sort(ns)
		for _, n := range ns {
			sr.X = append(sr.X, n)
			sr.Y = append(sr.Y, median(vals[key{name, n}]))
		}
		c.Series = append(c.Series, sr)
	}
	paths := []string{out}
	if strings.HasSuffix(out, ".png") {
		paths = append(paths, strings.TrimSuffix(out, ".png")+".svg")
	}
	for _, p := range paths {
		if err := chart.WriteFile(p, c); err != nil {
			return err
		}
	}
	return nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
