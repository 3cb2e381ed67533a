package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/chart"
)

// iterRow is one iteration of one rank, for -csv.
type iterRow struct {
	iter               int
	epoch              float64 // passes over the training set so far (the job's)
	wall, compute, idl time.Duration
	bytes              int64 // payload this rank sent
	staleness          int
	loss               float64 // the batch's training loss
}

// csvLog writes -csv's per-iteration rows of this rank to FILE.RANK.csv.
type csvLog struct {
	f *os.File
	w *csv.Writer
}

func openCSV(prefix string, rank int) (*csvLog, error) {
	f, err := os.Create(fmt.Sprintf("%s.%d.csv", prefix, rank))
	if err != nil {
		return nil, err
	}
	w := csv.NewWriter(f)
	err = w.Write([]string{"iteration", "epoch", "wall_s", "compute_s", "idle_s", "bytes_sent", "staleness", "train_loss"})
	return &csvLog{f, w}, err
}

func (l *csvLog) add(r iterRow) error {
	if l == nil {
		return nil
	}
	s := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }
	return l.w.Write([]string{strconv.Itoa(r.iter), strconv.FormatFloat(r.epoch, 'f', 4, 64), s(r.wall), s(r.compute), s(r.idl),
		strconv.FormatInt(r.bytes, 10), strconv.Itoa(r.staleness), strconv.FormatFloat(r.loss, 'f', 6, 64)})
}

// close flushes and closes the file; it is idempotent.
func (l *csvLog) close() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	l.w.Flush()
	if err := l.w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// curvePoint is rank 0's test metrics at one snapshot.
type curvePoint struct {
	t                    time.Duration
	iter                 int
	epoch                float64
	loss, rmse, accuracy float64
}

// writeCurve writes rank 0's learning curve as FILE.curve.csv.
func writeCurve(prefix string, pts []curvePoint) error {
	f, err := os.Create(prefix + ".curve.csv")
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"wall_s", "iteration", "epoch", "test_loss", "test_rmse", "test_accuracy"})
	for _, p := range pts {
		_ = w.Write([]string{strconv.FormatFloat(p.t.Seconds(), 'f', 3, 64), strconv.Itoa(p.iter), strconv.FormatFloat(p.epoch, 'f', 4, 64),
			strconv.FormatFloat(p.loss, 'f', 6, 64), strconv.FormatFloat(p.rmse, 'f', 6, 64), strconv.FormatFloat(p.accuracy, 'f', 6, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotCurve draws test loss and accuracy against time for -plot into
// path (.png or .svg), and for a .png the same chart as SVG beside it.
// A loss that is not a finite number (a run that diverged) is left out.
func plotCurve(path, title string, pts []curvePoint) error {
	loss, acc := chart.Series{Name: "test loss"}, chart.Series{Name: "test accuracy"}
	for _, p := range pts {
		if !math.IsNaN(p.loss) && !math.IsInf(p.loss, 0) {
			loss.X, loss.Y = append(loss.X, p.t.Seconds()), append(loss.Y, p.loss)
		}
		acc.X, acc.Y = append(acc.X, p.t.Seconds()), append(acc.Y, p.accuracy)
	}
	c := &chart.Line{Title: title, XLabel: "seconds", YLabel: "test loss / test accuracy", Series: []chart.Series{loss, acc}}
	paths := []string{path}
	if strings.HasSuffix(path, ".png") {
		paths = append(paths, strings.TrimSuffix(path, ".png")+".svg")
	}
	for _, p := range paths {
		if err := chart.WriteFile(p, c); err != nil {
			return err
		}
	}
	return nil
}
