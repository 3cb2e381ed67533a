// Package chart draws the studies' charts as PNG files with the standard
// library alone: line charts (one line per series, optional log x axis)
// and grouped bar charts, with axes, "nice" ticks, a title, axis labels
// and a legend in a small built-in bitmap font.
package chart

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
)

// Palette is the series colours, in order.
var Palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// Series is one line: points (X[i], Y[i]) joined in order. NaN values
// leave a gap.
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
	Values        [][]float64 // Values[group][category]
}

// Plot is anything this package draws.
type Plot interface {
	Draw(width, height int) (*image.RGBA, error)
}

// WritePNG draws p and writes it as PNG.
func WritePNG(w io.Writer, p Plot, width, height int) error {
	img, err := p.Draw(width, height)
	if err != nil {
		return err
	}
	return png.Encode(w, img)
}

// WriteFile draws p at 800x480 into a PNG file.
func WriteFile(path string, p Plot) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WritePNG(f, p, 800, 480); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// canvas is an image with the plot area's mapping.
type canvas struct {
	img                    *image.RGBA
	left, top, right, bott int // the plot area in pixels
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{225, 225, 225, 255}
)

func newCanvas(w, h, legendW int) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	return &canvas{img: img, left: 70, top: 34, right: w - 16 - legendW, bott: h - 46}
}

func (c *canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.img.Rect) {
		c.img.SetRGBA(x, y, col)
	}
}

// line draws from (x0, y0) to (x1, y1), thick pixels wide; dash > 0
// leaves gaps of dash pixels every 2*dash.
func (c *canvas) line(x0, y0, x1, y1 float64, col color.RGBA, thick, dash int) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		if dash > 0 && (i/dash)%2 == 1 {
			continue
		}
		t := float64(i) / float64(n)
		x, y := int(math.Round(x0+t*(x1-x0))), int(math.Round(y0+t*(y1-y0)))
		for dy := range thick {
			for dx := range thick {
				c.set(x+dx-thick/2, y+dy-thick/2, col)
			}
		}
	}
}

func (c *canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		for x := min(x0, x1); x <= max(x0, x1); x++ {
			c.set(x, y, col)
		}
	}
}

// text draws s with its top-left corner at (x, y); vertical turns it a
// quarter anticlockwise (reading upwards), with (x, y) its bottom-left.
func (c *canvas) text(s string, x, y int, col color.RGBA, vertical bool) {
	for i, r := range []rune(s) {
		g := glyph(r)
		for gy := range glyphH {
			for gx := range glyphW {
				if g[gy]&(1<<(glyphW-1-gx)) == 0 {
					continue
				}
				if vertical {
					c.set(x+gy, y-i*advance-gx, col)
				} else {
					c.set(x+i*advance+gx, y+gy, col)
				}
			}
		}
	}
}

// ticks returns about n "nice" values (1, 2 or 5 times a power of ten)
// spanning [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{2, 5, 10} {
		if step >= raw {
			break
		}
		step = m * p
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// label formats a tick value compactly.
func label(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e6 || a < 1e-3:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func (c *canvas) frame(title, xlabel, ylabel string) {
	c.text(title, (c.left+c.right-textWidth(title))/2, 10, black, false)
	c.text(xlabel, (c.left+c.right-textWidth(xlabel))/2, c.bott+30, black, false)
	c.text(ylabel, 8, (c.top+c.bott+textWidth(ylabel))/2, black, true)
	c.line(float64(c.left), float64(c.bott), float64(c.right), float64(c.bott), black, 1, 0)
	c.line(float64(c.left), float64(c.top), float64(c.left), float64(c.bott), black, 1, 0)
}

func (c *canvas) legend(names []string, dashed func(i int) bool) {
	x := c.right + 12
	for i, n := range names {
		y := c.top + 4 + i*14
		col := Palette[i%len(Palette)]
		d := 0
		if dashed != nil && dashed(i) {
			d = 3
		}
		c.line(float64(x), float64(y+3), float64(x+16), float64(y+3), col, 3, d)
		c.text(n, x+22, y, black, false)
	}
}

func legendWidth(names []string) int {
	w := 0
	for _, n := range names {
		w = max(w, textWidth(n))
	}
	if w == 0 {
		return 0
	}
	return w + 40
}

// Draw implements Plot.
func (l *Line) Draw(w, h int) (*image.RGBA, error) {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	var names []string
	for _, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("chart: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		names = append(names, s.Name)
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
				continue
			}
			if l.LogX {
				if x <= 0 {
					return nil, fmt.Errorf("chart: series %q: x = %v on a log axis", s.Name, x)
				}
				x = math.Log10(x)
			}
			xlo, xhi, ylo, yhi = math.Min(xlo, x), math.Max(xhi, x), math.Min(ylo, y), math.Max(yhi, y)
		}
	}
	if math.IsInf(xlo, 0) {
		return nil, errors.New("chart: no points to draw")
	}
	if l.YMax > l.YMin {
		ylo, yhi = l.YMin, l.YMax
	} else {
		pad := (yhi - ylo) * 0.05
		if pad == 0 {
			pad = math.Max(math.Abs(yhi)*0.1, 1)
		}
		ylo, yhi = ylo-pad, yhi+pad
	}
	if xhi == xlo {
		xlo, xhi = xlo-1, xhi+1
	}
	c := newCanvas(w, h, legendWidth(names))
	px := func(x float64) float64 {
		if l.LogX {
			x = math.Log10(x)
		}
		return float64(c.left) + (x-xlo)/(xhi-xlo)*float64(c.right-c.left)
	}
	py := func(y float64) float64 { return float64(c.bott) - (y-ylo)/(yhi-ylo)*float64(c.bott-c.top) }
	for _, t := range ticks(ylo, yhi, 6) {
		y := py(t)
		c.line(float64(c.left), y, float64(c.right), y, grey, 1, 0)
		s := label(t)
		c.text(s, c.left-6-textWidth(s), int(y)-3, black, false)
	}
	var xt []float64
	if l.LogX {
		for e := math.Floor(xlo); e <= math.Ceil(xhi); e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := math.Log10(m) + e; v >= xlo-1e-9 && v <= xhi+1e-9 {
					xt = append(xt, m*math.Pow(10, e))
				}
			}
		}
	} else {
		xt = ticks(xlo, xhi, 8)
	}
	for _, t := range xt {
		x := px(t)
		c.line(x, float64(c.bott), x, float64(c.bott+4), black, 1, 0)
		s := label(t)
		c.text(s, int(x)-textWidth(s)/2, c.bott+8, black, false)
	}
	c.frame(l.Title, l.XLabel, l.YLabel)
	for i, s := range l.Series {
		col := Palette[i%len(Palette)]
		dash := 0
		if s.Dashed {
			dash = 4
		}
		prev := -1
		for j := range s.X {
			if math.IsNaN(s.X[j]) || math.IsNaN(s.Y[j]) {
				prev = -1
				continue
			}
			x, y := px(s.X[j]), py(s.Y[j])
			c.rect(int(x)-2, int(y)-2, int(x)+2, int(y)+2, col)
			if prev >= 0 {
				c.line(px(s.X[prev]), py(s.Y[prev]), x, y, col, 2, dash)
			}
			prev = j
		}
	}
	c.legend(names, func(i int) bool { return l.Series[i].Dashed })
	return c.img, nil
}

// Draw implements Plot.
func (b *Bar) Draw(w, h int) (*image.RGBA, error) {
	if len(b.Values) != len(b.Groups) {
		return nil, fmt.Errorf("chart: %d groups of values for %d group names", len(b.Values), len(b.Groups))
	}
	hi := 0.0
	for g, vs := range b.Values {
		if len(vs) != len(b.Categories) {
			return nil, fmt.Errorf("chart: group %q has %d values for %d categories", b.Groups[g], len(vs), len(b.Categories))
		}
		for _, v := range vs {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("chart: bar value %v (bars start at 0)", v)
			}
			hi = math.Max(hi, v)
		}
	}
	if hi == 0 {
		hi = 1
	}
	hi *= 1.08
	c := newCanvas(w, h, legendWidth(b.Groups))
	py := func(y float64) int { return c.bott - int(y/hi*float64(c.bott-c.top)) }
	for _, t := range ticks(0, hi, 6) {
		y := py(t)
		c.line(float64(c.left), float64(y), float64(c.right), float64(y), grey, 1, 0)
		s := label(t)
		c.text(s, c.left-6-textWidth(s), y-3, black, false)
	}
	nc := max(1, len(b.Categories))
	slot := float64(c.right-c.left) / float64(nc)
	bw := int(slot * 0.8 / float64(max(1, len(b.Groups))))
	for ci, cat := range b.Categories {
		x0 := float64(c.left) + slot*float64(ci) + slot*0.1
		for g := range b.Groups {
			x := int(x0) + g*bw
			c.rect(x, py(b.Values[g][ci]), x+bw-2, c.bott-1, Palette[g%len(Palette)])
		}
		mid := int(x0 + slot*0.4)
		c.text(cat, mid-textWidth(cat)/2, c.bott+8, black, false)
	}
	c.frame(b.Title, "", b.YLabel)
	c.legend(b.Groups, nil)
	return c.img, nil
}
