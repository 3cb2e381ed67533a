package chart

import (
	"bytes"
	"image/png"
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

// TestDraw: a line chart and a bar chart encode as PNGs of the asked size,
// the series' colours appear in them, and bad input is an error.
func TestDraw(t *testing.T) {
	dir := t.TempDir()
	bar := &Bar{Title: "Idle share per rank", YLabel: "idle / wall time", Categories: []string{"rank 0", "rank 1", "rank 2"},
		Groups: []string{"BSP", "LB-BSP"}, Values: [][]float64{{0.5, 0.4, 0.1}, {0.2, 0.2, 0.15}}}
	for name, p := range map[string]Plot{"line": sampleLine(), "bar": bar} {
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
			t.Fatalf("%s: %v", name, s)
		}
		for _, col := range Palette[:2] {
			found := false
			for y := 0; y < 480 && !found; y++ {
				for x := 0; x < 800 && !found; x++ {
					r, g, bl, _ := img.At(x, y).RGBA()
					found = uint8(r>>8) == col.R && uint8(g>>8) == col.G && uint8(bl>>8) == col.B
				}
			}
			if !found {
				t.Fatalf("%s: colour %v not drawn", name, col)
			}
		}
		if os.Getenv("CHART_KEEP") != "" {
			_ = os.WriteFile(filepath.Join(os.Getenv("CHART_KEEP"), name+".png"), b, 0o644)
		}
	}
	var buf bytes.Buffer
	for _, bad := range []Plot{
		&Line{Series: []Series{{X: []float64{1}, Y: nil}}},
		&Line{LogX: true, Series: []Series{{X: []float64{0, 1}, Y: []float64{1, 2}}}},
		&Line{},
		&Bar{Categories: []string{"a"}, Groups: []string{"g"}, Values: [][]float64{{-1}}},
		&Bar{Categories: []string{"a"}, Groups: []string{"g", "h"}, Values: [][]float64{{1}}},
	} {
		if err := WritePNG(&buf, bad, 100, 100); err == nil || !strings.HasPrefix(err.Error(), "chart: ") {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

// TestTicks: ticks are 1, 2 or 5 times a power of ten, inside the range,
// and cover most of it.
func TestTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {0.31, 0.92}, {-3, 17}, {1000, 61000}, {0.0012, 0.0013}} {
		ts := ticks(r[0], r[1], 6)
		if len(ts) < 2 || len(ts) > 13 {
			t.Fatalf("%v: %v", r, ts)
		}
		step := ts[1] - ts[0]
		m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
		if math.Abs(m-1) > 1e-6 && math.Abs(m-2) > 1e-6 && math.Abs(m-5) > 1e-6 {
			t.Fatalf("%v: step %v", r, step)
		}
		if ts[0] < r[0]-1e-12 || ts[len(ts)-1] > r[1]+step*1e-6 || ts[len(ts)-1]-ts[0] < (r[1]-r[0])/2 {
			t.Fatalf("%v: %v", r, ts)
		}
	}
}
