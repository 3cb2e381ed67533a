// Package chart draws the studies' and benchmarks' charts with
// gonum.org/v1/plot: line charts (one line per series, optional log x
// axis) and grouped bar charts, with a title, axis labels and a legend
// beside the plot, in the Liberation Sans font that gonum/plot embeds.
// WriteFile writes a chart as PNG or SVG, as the file name says.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one line: points (X[i], Y[i]) joined in order. Every value
// must be a finite number; on a Line with fixed YMin and YMax, what lies
// outside is clipped.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (e.g. a projection beside a measure).
	Dashed bool
}

// Line is a line chart.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	LogX                  bool // log10 x axis (all x must be positive)
	// YMin and YMax fix the y range when YMax > YMin.
	YMin, YMax float64
}

// Bar is a grouped bar chart: for each category, one bar per group.
type Bar struct {
	Title, YLabel string
	Categories    []string    // along the x axis
	Groups        []string    // the legend
	Values        [][]float64 // Values[group][category], finite and >= 0
}

// Plot is a chart this package draws: a *Line or a *Bar.
type Plot interface {
	figure() (*figure, error)
}

// The size of every chart: pixels of a PNG, CSS pixels of an SVG.
const (
	width, height = 800, 480
	dpi           = 96
)

// WriteFile draws p into path in the format its extension names: .png
// (800x480 pixels) or .svg (the same size). Nothing is written when p
// cannot be drawn.
func WriteFile(path string, p Plot) error {
	var buf bytes.Buffer
	if err := render(&buf, p, strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// render draws p as "png" or "svg" into w.
func render(w io.Writer, p Plot, format string) error {
	if format != "png" && format != "svg" {
		return fmt.Errorf("chart: format %q: want png or svg", format)
	}
	if p == nil {
		return errors.New("chart: no chart to draw")
	}
	f, err := p.figure()
	if err != nil {
		return err
	}
	wd, ht := vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi
	var c vg.CanvasWriterTo
	if format == "png" {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(wd, ht), vgimg.UseDPI(dpi))}
	} else {
		c = vgsvg.New(wd, ht)
	}
	if err := f.drawTo(draw.New(c)); err != nil {
		return err
	}
	if format == "png" {
		_, err = c.WriteTo(w)
		return err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	// The SVG names the font without embedding it (that would add over
	// 500 KB a file): give viewers without Liberation Sans its metric
	// twins.
	_, err = w.Write(bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;")))
	return err
}

// palette is the series colours, in order.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// maxMarked is the most points a series may have to get a marker on
// each: more would blur into a thick line.
const maxMarked = 40

var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	gridGrey = color.RGBA{215, 215, 215, 255}
)

// figure is a gonum plot with its legend, which is drawn to the right
// of the plot rather than over its data.
type figure struct {
	title   string
	p       *plot.Plot
	legend  plot.Legend
	entries int
}

func newFigure(title, xlabel, ylabel string) *figure {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 12)
		a.Tick.Label.Font = font.From(sans, 10)
		a.Label.Padding = vg.Points(4)
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{8}, niceTicks{6}
	p.Title.TextStyle.Font = font.From(sans, 14)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal.Color, grid.Horizontal.Width = gridGrey, vg.Points(0.6)
	p.Add(grid)
	f := &figure{title: title, p: p, legend: plot.NewLegend()}
	f.legend.TextStyle.Font = font.From(sans, 11)
	f.legend.Top, f.legend.Left = true, true
	f.legend.Padding = vg.Points(3)
	f.legend.ThumbnailWidth = vg.Points(24)
	return f
}

func (f *figure) addLegend(name string, thumbs ...plot.Thumbnailer) {
	if name != "" {
		f.legend.Add(name, thumbs...)
		f.entries++
	}
}

// drawTo draws the figure on c: the title across the top, the legend at
// the right and the plot in the rest. gonum/plot panics on some input
// the figures' checks should have turned away; such a panic is
// returned as an error.
func (f *figure) drawTo(c draw.Canvas) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("chart: gonum/plot: %v", r)
		}
	}()
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	margin := vg.Points(8)
	c = draw.Crop(c, margin, -margin, margin/2, -margin)
	if f.title != "" {
		sty := f.p.Title.TextStyle
		c.FillText(sty, vg.Point{X: c.Center().X, Y: c.Max.Y + sty.FontExtents().Descent}, f.title)
		c.Max.Y -= sty.Rectangle(f.title).Size().Y + vg.Points(8)
	}
	if f.entries > 0 {
		r := f.legend.Rectangle(c)
		lw := r.Max.X - r.Min.X
		f.legend.Draw(draw.Crop(c, c.Max.X-c.Min.X-lw, 0, 0, -vg.Points(4)))
		c.Max.X -= lw + vg.Points(14)
	}
	f.p.Draw(c)
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (l *Line) figure() (*figure, error) {
	if len(l.Series) == 0 {
		return nil, errors.New("chart: a line chart with no series")
	}
	f := newFigure(l.Title, l.XLabel, l.YLabel)
	points := 0
	for i, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("chart: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if !finite(x) || !finite(y) {
				return nil, fmt.Errorf("chart: series %q: point %d is (%v, %v), want finite numbers", s.Name, j, x, y)
			}
			if l.LogX && x <= 0 {
				return nil, fmt.Errorf("chart: series %q: x = %v on a log axis", s.Name, x)
			}
			xys[j] = plotter.XY{X: x, Y: y}
		}
		points += len(xys)
		col := palette[i%len(palette)]
		line := &plotter.Line{XYs: xys, LineStyle: draw.LineStyle{Color: col, Width: vg.Points(1.5)}}
		if s.Dashed {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		f.p.Add(line)
		thumbs := []plot.Thumbnailer{line}
		if len(xys) <= maxMarked {
			dots := &plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{Color: col, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}}
			f.p.Add(dots)
			thumbs = append(thumbs, dots)
		}
		f.addLegend(s.Name, thumbs...)
	}
	if points == 0 {
		return nil, errors.New("chart: no points to draw")
	}
	x, y := &f.p.X, &f.p.Y
	if l.LogX {
		x.Scale, x.Tick.Marker = plot.LogScale{}, logTicks{}
		if x.Min == x.Max {
			x.Min, x.Max = x.Min/2, x.Max*2
		}
	}
	if l.YMax > l.YMin {
		y.Min, y.Max = l.YMin, l.YMax
	} else if y.Min == y.Max {
		pad := math.Max(math.Abs(y.Max)*0.1, 1e-9)
		if y.Max == 0 {
			pad = 1
		}
		y.Min, y.Max = y.Min-pad, y.Max+pad
	}
	return f, nil
}

// niceTicks labels about n values, 1, 2 or 5 times a power of ten
// apart, written with the decimals that step needs.
type niceTicks struct{ n int }

func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	raw := (hi - lo) / float64(t.n)
	e := math.Floor(math.Log10(raw))
	step := math.Pow(10, e)
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * math.Pow(10, e)
	}
	decimals := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var out []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	return out
}

// logTicks labels 1, 2 and 5 times the powers of ten on a log axis, or
// every integer multiple when that gives fewer than two labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var major, all []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)}
			all = append(all, t)
			if m == 1 || m == 2 || m == 5 {
				major = append(major, t)
			} else {
				major = append(major, plot.Tick{Value: v})
			}
		}
	}
	labelled := 0
	for _, t := range major {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 {
		return all
	}
	return major
}

func (b *Bar) figure() (*figure, error) {
	if len(b.Values) != len(b.Groups) {
		return nil, fmt.Errorf("chart: %d groups of values for %d group names", len(b.Values), len(b.Groups))
	}
	if len(b.Groups) == 0 || len(b.Categories) == 0 {
		return nil, fmt.Errorf("chart: a bar chart with %d groups and %d categories", len(b.Groups), len(b.Categories))
	}
	hi := 0.0
	for g, vs := range b.Values {
		if len(vs) != len(b.Categories) {
			return nil, fmt.Errorf("chart: group %q has %d values for %d categories", b.Groups[g], len(vs), len(b.Categories))
		}
		for _, v := range vs {
			if !finite(v) || v < 0 {
				return nil, fmt.Errorf("chart: group %q: bar value %v, want a finite number >= 0", b.Groups[g], v)
			}
			hi = math.Max(hi, v)
		}
	}
	if hi == 0 {
		hi = 1
	}
	f := newFigure(b.Title, "", b.YLabel)
	for g, name := range b.Groups {
		bs := &bars{values: b.Values[g], index: g, groups: len(b.Groups), color: palette[g%len(palette)]}
		f.p.Add(bs)
		f.addLegend(name, bs)
	}
	f.p.NominalX(b.Categories...)
	f.p.X.LineStyle.Width = vg.Points(0.5) // the bars' baseline
	f.p.X.Padding, f.p.Y.Padding = 0, 0
	f.p.X.Min, f.p.X.Max = -0.5, float64(len(b.Categories))-0.5
	f.p.Y.Min, f.p.Y.Max = 0, hi*1.08
	return f, nil
}

// barSpan is the share of a category's slot its bars take.
const barSpan = 0.8

// bars is one group of a grouped bar chart: its bar in category i stands
// in the index-th of groups slices of the span around x = i.
type bars struct {
	values        []float64
	index, groups int
	color         color.Color
}

func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	w := barSpan / float64(b.groups)
	for i, v := range b.values {
		x0 := float64(i) - barSpan/2 + float64(b.index)*w
		left, right := trX(x0), trX(x0+w)-vg.Points(1)
		bottom, top := trY(0), trY(v)
		c.FillPolygon(b.color, c.ClipPolygonXY([]vg.Point{{X: left, Y: bottom}, {X: left, Y: top}, {X: right, Y: top}, {X: right, Y: bottom}}))
	}
}

func (b *bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	ymax = 0
	for _, v := range b.values {
		ymax = math.Max(ymax, v)
	}
	return -0.5, float64(len(b.values)) - 0.5, 0, ymax
}

// Thumbnail draws the legend's swatch.
func (b *bars) Thumbnail(c *draw.Canvas) {
	mid := (c.Min.Y + c.Max.Y) / 2
	h := (c.Max.Y - c.Min.Y) * 0.4
	x1 := c.Min.X + (c.Max.X-c.Min.X)*0.75
	c.FillPolygon(b.color, []vg.Point{{X: c.Min.X, Y: mid - h}, {X: c.Min.X, Y: mid + h}, {X: x1, Y: mid + h}, {X: x1, Y: mid - h}})
}
