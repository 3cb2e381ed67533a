package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleLine() *Line {
	var a, b Series
	a.Name, b.Name, b.Dashed = "ring (measured)", "hub BSP (projected)", true
	for i := 1; i <= 6; i++ {
		x := float64(i * 10000)
		a.X, a.Y = append(a.X, x), append(a.Y, 0.7+0.03*math.Log(float64(i)))
		b.X, b.Y = append(b.X, x), append(b.Y, 0.69+0.035*math.Log(float64(i)))
	}
	return &Line{Title: "Test accuracy vs training-set size", XLabel: "training samples", YLabel: "accuracy (0-1)", Series: []Series{a, b}}
}

func sampleBar() *Bar {
	return &Bar{Title: "Idle share per rank", YLabel: "idle / wall time", Categories: []string{"rank 0", "rank 1", "rank 2"},
		Groups: []string{"BSP", "LB-BSP"}, Values: [][]float64{{0.5, 0.4, 0.1}, {0.2, 0.2, 0.15}}}
}

// texts are the words a chart must show: title, axis labels, legend and
// bar categories.
func texts(p Plot) []string {
	switch p := p.(type) {
	case *Line:
		out := []string{p.Title, p.XLabel, p.YLabel}
		for _, s := range p.Series {
			out = append(out, s.Name)
		}
		return out
	case *Bar:
		return append(append([]string{p.Title, p.YLabel}, p.Groups...), p.Categories...)
	}
	return nil
}

// count returns how many pixels of img are within 8 of c in each channel.
func count(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if absDiff(uint8(r>>8), c.R) <= 8 && absDiff(uint8(g>>8), c.G) <= 8 && absDiff(uint8(bl>>8), c.B) <= 8 {
				n++
			}
		}
	}
	return n
}

// countDark returns how many pixels of img are near black (text, axes).
func countDark(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r < 0x6000 && g < 0x6000 && bl < 0x6000 {
				n++
			}
		}
	}
	return n
}

func absDiff(a, b uint8) uint8 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestPNG: a line chart and a bar chart decode as PNGs of 800x480 pixels,
// mostly white, with plenty of each series' colour and of black text.
func TestPNG(t *testing.T) {
	dir := t.TempDir()
	for name, p := range map[string]Plot{"line": sampleLine(), "bar": sampleBar()} {
		path := filepath.Join(dir, name+".png")
		if err := WriteFile(path, p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if s := img.Bounds().Size(); s.X != 800 || s.Y != 480 {
			t.Fatalf("%s: size %v, want 800x480", name, s)
		}
		total := 800 * 480
		if white := count(img, color.RGBA{255, 255, 255, 255}); white < total/2 || white == total {
			t.Fatalf("%s: %d of %d pixels white", name, white, total)
		}
		if dark := countDark(img); dark < 1000 {
			t.Fatalf("%s: %d dark pixels: no text or axes?", name, dark)
		}
		for _, col := range palette[:2] {
			if n := count(img, col); n < 100 {
				t.Fatalf("%s: %d pixels of colour %v", name, n, col)
			}
		}
		if n := count(img, palette[2]); n != 0 {
			t.Fatalf("%s: %d pixels of a third series' colour %v", name, n, palette[2])
		}
		if dir := os.Getenv("CHART_KEEP"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
		}
	}
}

// TestSVG: the SVG is well-formed XML of 600x360 pt (800x480 CSS
// pixels) whose text elements hold the title, the axis labels, the
// legend and the categories.
func TestSVG(t *testing.T) {
	dir := t.TempDir()
	for name, p := range map[string]Plot{"line": sampleLine(), "bar": sampleBar()} {
		path := filepath.Join(dir, name+".svg")
		if err := WriteFile(path, p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(bytes.NewReader(b))
		var got []string
		inText, root := false, ""
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				if root == "" {
					root = tok.Name.Local
					for _, a := range tok.Attr {
						if a.Name.Local == "width" && a.Value != "600pt" || a.Name.Local == "height" && a.Value != "360pt" {
							t.Fatalf("%s: %s=%q", name, a.Name.Local, a.Value)
						}
					}
				}
				inText = tok.Name.Local == "text"
			case xml.CharData:
				if inText {
					got = append(got, string(tok))
				}
			case xml.EndElement:
				inText = false
			}
		}
		if root != "svg" {
			t.Fatalf("%s: root element %q", name, root)
		}
		all := "\n" + strings.Join(got, "\n") + "\n"
		for _, want := range texts(p) {
			if !strings.Contains(all, "\n"+want+"\n") {
				t.Fatalf("%s: no text %q in %q", name, want, got)
			}
		}
		if !strings.Contains(string(b), "'Liberation Sans',Arimo,Arial") {
			t.Fatalf("%s: no fallback fonts", name)
		}
		if dir := os.Getenv("CHART_KEEP"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, name+".svg"), b, 0o644)
		}
	}
}

// TestLogX: a log x axis labels 1, 2 and 5 times the powers of ten in
// range, or every integer multiple when the range is too narrow for two
// such labels; the chart draws.
func TestLogX(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{2, 64, "2 5 10 20 50"},
		{1, 1000, "1 2 5 10 20 50 100 200 500 1000"},
		{3, 4, "3 4"},
		{0.02, 0.3, "0.02 0.05 0.1 0.2"},
	} {
		var labels []string
		for _, tk := range (logTicks{}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != c.want {
			t.Fatalf("[%v, %v]: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	l := &Line{Title: "wall time", XLabel: "ranks (N)", YLabel: "seconds", LogX: true, Series: []Series{
		{Name: "gorun", X: []float64{2, 4, 8, 16, 32, 64}, Y: []float64{1, 1.2, 1.5, 2, 3, 5}},
		{Name: "one point", X: []float64{8}, Y: []float64{2}},
	}}
	if err := render(io.Discard, l, "png"); err != nil {
		t.Fatal(err)
	}
	l.Series = l.Series[1:] // a single x
	if err := render(io.Discard, l, "svg"); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: what cannot be drawn is an error starting "chart: " that
// names the problem, and WriteFile leaves no file behind.
func TestBadInput(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		p    Plot
		want string
	}{
		{nil, "no chart"},
		{&Line{}, "no series"},
		{&Line{Series: []Series{{Name: "a"}}}, "no points"},
		{&Line{Series: []Series{{Name: "a", X: []float64{1}, Y: nil}}}, `series "a" has 1 x and 0 y values`},
		{&Line{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1, nan}}}}, `series "a": point 1 is (2, NaN)`},
		{&Line{Series: []Series{{Name: "a", X: []float64{math.Inf(1)}, Y: []float64{1}}}}, `point 0 is (+Inf, 1)`},
		{&Line{LogX: true, Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{1, 2}}}}, "x = 0 on a log axis"},
		{&Bar{}, "0 groups and 0 categories"},
		{&Bar{Categories: []string{"a"}, Groups: []string{"g"}, Values: [][]float64{{-1}}}, `group "g": bar value -1`},
		{&Bar{Categories: []string{"a"}, Groups: []string{"g"}, Values: [][]float64{{nan}}}, `bar value NaN`},
		{&Bar{Categories: []string{"a"}, Groups: []string{"g", "h"}, Values: [][]float64{{1}}}, "1 groups of values for 2 group names"},
		{&Bar{Categories: []string{"a", "b"}, Groups: []string{"g"}, Values: [][]float64{{1}}}, `group "g" has 1 values for 2 categories`},
	} {
		err := render(io.Discard, c.p, "png")
		if err == nil || !strings.HasPrefix(err.Error(), "chart: ") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want an error with %q", c.p, err, c.want)
		}
	}
	dir := t.TempDir()
	for _, name := range []string{"bad.png", "chart.pdf", "chart"} {
		var p Plot = sampleLine()
		if name == "bad.png" {
			p = &Line{}
		}
		path := filepath.Join(dir, name)
		err := WriteFile(path, p)
		if err == nil || !strings.HasPrefix(err.Error(), path+": chart: ") {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: written anyway (%v)", name, err)
		}
	}
}

// TestClip: with a fixed y range, points outside it are clipped, not an
// error, and nothing is drawn outside the plot.
func TestClip(t *testing.T) {
	l := &Line{Title: "clipped", YMin: 0.5, YMax: 1, Series: []Series{{Name: "a", X: []float64{0, 1, 2, 3}, Y: []float64{0.1, 0.6, 0.9, 3}}}}
	var buf bytes.Buffer
	if err := render(&buf, l, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// The top 40 pixels hold the title only.
	top := img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(0, 0, 800, 40))
	if n := count(top, palette[0]); n != 0 {
		t.Fatalf("%d pixels of the series above the plot", n)
	}
}

// TestTicks: linear ticks are 1, 2 or 5 times a power of ten apart,
// inside the range, cover most of it, and their labels carry the
// decimals the step needs and no more.
func TestTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{0.31, 0.92, "0.4 0.6 0.8"},
		{-3, 17, "0 5 10 15"},
		{1000, 61000, "10000 20000 30000 40000 50000 60000"},
		{0.0012, 0.0013, "0.00120 0.00122 0.00124 0.00126 0.00128 0.00130"},
	} {
		var labels []string
		for _, tk := range (niceTicks{6}).Ticks(c.lo, c.hi) {
			if tk.Value < c.lo-1e-12 || tk.Value > c.hi+1e-12 {
				t.Fatalf("[%v, %v]: tick %v outside", c.lo, c.hi, tk.Value)
			}
			labels = append(labels, tk.Label)
		}
		if got := strings.Join(labels, " "); got != c.want {
			t.Fatalf("[%v, %v]: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}
