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

// TestReadSet: a good file loads through pipeline.ReadIDX (pixels
// scaled to [0, 1], limit honoured); truncated, wrong magic, wrong sizes,
// bad labels, not an IDX file and a missing directory each give an error
// that names the problem.
func TestReadSet(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
	d, err := readSet(dir, "train", 0)
	if err != nil || d.N != 5 || d.Y[3] != 3 || d.X[1] != float32(1)/255 || d.X[pixels*5-1] != float32((pixels*5-1)%256)/255 {
		t.Fatalf("good file: %v, %+v", err, d)
	}
	if d, err := readSet(dir, "train", 2); err != nil || d.N != 2 || len(d.X) != 2*pixels || len(d.Y) != 2 {
		t.Fatalf("limit 2: %v", err)
	}
	for _, c := range []struct {
		name  string
		write func(dir string)
		want  string
	}{
		{"truncated", func(dir string) { writeSet(t, dir, "train", 0x803, 5, side, side, nil, 100) }, "file ends early"},
		{"truncated header", func(dir string) {
			writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
			_ = os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), idx(0x803, nil, []byte{0, 0}, 0), 0o644)
		}, "file ends in the header"},
		{"wrong magic", func(dir string) { writeSet(t, dir, "train", 0x801, 5, side, side, nil, 0) }, "images: pipeline: idx: offset 0: magic 0x00000801, want 0x00000803"},
		{"wrong image size", func(dir string) { writeSet(t, dir, "train", 0x803, 5, 27, side, nil, 0) }, "images of 756 pixels, want 28x28"},
		{"labels do not match", func(dir string) { writeSet(t, dir, "train", 0x803, 5, side, side, []byte{1, 2, 3, 4}, 0) }, "5 images but 4 labels"},
		{"bad label", func(dir string) { writeSet(t, dir, "train", 0x803, 2, side, side, []byte{1, 10}, 0) }, "label 10 of sample 1"},
		{"not IDX", func(dir string) {
			writeSet(t, dir, "train", 0x803, 5, side, side, nil, 0)
			_ = os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte.gz"), []byte("P5 28 28 255\n"), 0o644)
		}, "magic 0x50352032, want 0x00000803"},
		{"missing", func(string) {}, "apt-get install dataset-fashion-mnist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.write(dir)
			_, err := readSet(dir, "train", 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
