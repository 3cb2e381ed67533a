package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// idx encodes an IDX file: magic, dimensions, payload, gzipped; cut
// drops that many bytes from the end of the uncompressed file.
func idx(magic uint32, dims []int, payload []byte, cut int) []byte {
	var raw bytes.Buffer
	_ = binary.Write(&raw, binary.BigEndian, magic)
	for _, d := range dims {
		_ = binary.Write(&raw, binary.BigEndian, uint32(d))
	}
	raw.Write(payload)
	b := raw.Bytes()[:raw.Len()-cut]
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write(b)
	_ = w.Close()
	return z.Bytes()
}

// writeSet writes prefix's two files into dir: n images of h x w and
// labels (n of them unless given).
func writeSet(t *testing.T, dir, prefix string, imgMagic uint32, n, h, w int, labels []byte, cut int) {
	t.Helper()
	img := make([]byte, n*h*w)
	for i := range img {
		img[i] = byte(i)
	}
	if labels == nil {
		labels = make([]byte, n)
		for i := range labels {
			labels[i] = byte(i % classes)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), idx(imgMagic, []int{n, h, w}, img, cut), 0o644))
	must(os.WriteFile(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), idx(0x801, []int{len(labels)}, labels, 0), 0o644))
}

// TestLoadIDX: a good file loads (pixels scaled to [0, 1], limit honoured);
// truncated, wrong magic, wrong sizes, bad labels, not gzip and a missing
// directory each give an error that names the problem.
func TestLoadIDX(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
	d, err := loadIDX(dir, "train", 0)
	if err != nil || d.len() != 5 || d.y[3] != 3 || d.x[1] != 1.0/255 || d.x[pixels*5-1] != float64((pixels*5-1)%256)/255 {
		t.Fatalf("good file: %v, %d samples", err, d.len())
	}
	if d, err := loadIDX(dir, "train", 2); err != nil || d.len() != 2 || len(d.x) != 2*pixels {
		t.Fatalf("limit 2: %v", err)
	}
	for _, c := range []struct {
		name  string
		write func(dir string)
		want  string
	}{
		{"truncated", func(dir string) { writeSet(t, dir, "train", 0x803, 5, side, side, nil, 100) }, "truncated in its data"},
		{"truncated header", func(dir string) {
			writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
			_ = os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), idx(0x803, nil, []byte{0, 0}, 0), 0o644)
		}, "truncated in its header"},
		{"wrong magic", func(dir string) { writeSet(t, dir, "train", 0x801, 5, side, side, nil, 0) }, "magic 0x801, want 0x803"},
		{"wrong image size", func(dir string) { writeSet(t, dir, "train", 0x803, 5, 27, side, nil, 0) }, "images of 27x28"},
		{"labels do not match", func(dir string) { writeSet(t, dir, "train", 0x803, 5, side, side, []byte{1, 2, 3, 4}, 0) }, "5 images for 4 labels"},
		{"bad label", func(dir string) { writeSet(t, dir, "train", 0x803, 2, side, side, []byte{1, 10}, 0) }, "label 10 of sample 1"},
		{"not gzip", func(dir string) {
			writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
			_ = os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), []byte("P5 28 28 255\n"), 0o644)
		}, "not a gzipped IDX file"},
		{"missing", func(string) {}, "apt-get install dataset-fashion-mnist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.write(dir)
			_, err := loadIDX(dir, "train", 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
