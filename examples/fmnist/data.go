package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
)

const (
	side    = 28
	pixels  = side * side
	classes = 10
)

// dataset is images (pixels floats in [0, 1] each) and their labels.
type dataset struct {
	x []float64
	y []int
}

func (d *dataset) len() int                    { return len(d.y) }
func (d *dataset) image(i int) []float64       { return d.x[i*pixels : (i+1)*pixels] }
func (d *dataset) append(img []float64, l int) { d.x, d.y = append(d.x, img...), append(d.y, l) }

// DefaultData is where Debian's dataset-fashion-mnist package puts the
// original files.
const DefaultData = "/usr/share/datasets/fashion-mnist"

// loadIDX reads Fashion-MNIST (or MNIST) in its original IDX files,
// gzipped as distributed: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
// limit > 0 keeps the first limit samples.
func loadIDX(dir, prefix string, limit int) (*dataset, error) {
	images := filepath.Join(dir, prefix+"-images-idx3-ubyte.gz")
	if _, err := os.Stat(images); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no Fashion-MNIST here (on Debian or Ubuntu: apt-get install dataset-fashion-mnist, which puts it in %s; or -data DIR with the original .gz files, or -data synthetic)", images, DefaultData)
	}
	imgs, idims, err := readIDX(images, 0x803)
	if err != nil {
		return nil, err
	}
	labels, _, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 0x801)
	if err != nil {
		return nil, err
	}
	if idims[1] != side || idims[2] != side {
		return nil, fmt.Errorf("%s: images of %dx%d, want %dx%d", images, idims[1], idims[2], side, side)
	}
	if len(imgs) != len(labels)*pixels {
		return nil, fmt.Errorf("%s: %d images for %d labels", prefix, len(imgs)/pixels, len(labels))
	}
	if limit > 0 && limit < len(labels) {
		imgs, labels = imgs[:limit*pixels], labels[:limit]
	}
	d := &dataset{x: make([]float64, len(imgs)), y: make([]int, len(labels))}
	for i, b := range imgs {
		d.x[i] = float64(b) / 255
	}
	for i, l := range labels {
		if l >= classes {
			return nil, fmt.Errorf("%s: label %d of sample %d", prefix, l, i)
		}
		d.y[i] = int(l)
	}
	return d, nil
}

// readIDX returns the payload of a gzipped IDX file with the given magic
// and its dimensions, checking the dimensions before allocating.
func readIDX(path string, magic uint32) ([]byte, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not a gzipped IDX file: %w", path, err)
	}
	truncated := func(what string, err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: truncated in its %s", path, what)
		}
		return fmt.Errorf("%s: %s: %w", path, what, err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(z, hdr[:]); err != nil {
		return nil, nil, truncated("header", err)
	}
	if m := binary.BigEndian.Uint32(hdr[:]); m != magic {
		return nil, nil, fmt.Errorf("%s: magic %#x, want %#x", path, m, magic)
	}
	dims := make([]int, magic&0xff)
	n := 1
	for i := range dims {
		if _, err := io.ReadFull(z, hdr[:]); err != nil {
			return nil, nil, truncated("header", err)
		}
		dims[i] = int(binary.BigEndian.Uint32(hdr[:]))
		n *= dims[i]
		if n > 1<<30 {
			return nil, nil, fmt.Errorf("%s: implausibly large (%d bytes)", path, n)
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(z, b); err != nil {
		return nil, nil, truncated(fmt.Sprintf("data (%d bytes declared)", n), err)
	}
	return b, dims, nil
}

// synthetic makes a Fashion-MNIST-shaped stand-in when the real files are
// not at hand: each class is a fixed pattern of a few soft blobs on the
// 28x28 grid, and each sample is its class's pattern, shifted by up to a
// pixel, with noise. Every rank makes the same data from seed.
func synthetic(seed uint64, n int) *dataset {
	rng := rand.New(rand.NewPCG(seed, 99))
	proto := make([][]float64, classes)
	prng := rand.New(rand.NewPCG(12345, 6789)) // the classes never change
	for k := range proto {
		proto[k] = make([]float64, pixels)
		for range 4 {
			cx, cy, r := 4+prng.Float64()*20, 4+prng.Float64()*20, 2+prng.Float64()*4
			for y := range side {
				for x := range side {
					d2 := (float64(x)-cx)*(float64(x)-cx) + (float64(y)-cy)*(float64(y)-cy)
					proto[k][y*side+x] += math.Exp(-d2 / (2 * r * r))
				}
			}
		}
	}
	d := &dataset{}
	img := make([]float64, pixels)
	for range n {
		k := rng.IntN(classes)
		dx, dy := rng.IntN(3)-1, rng.IntN(3)-1
		for y := range side {
			for x := range side {
				sx, sy := min(max(x+dx, 0), side-1), min(max(y+dy, 0), side-1)
				v := 0.5*proto[k][sy*side+sx] + 0.8*rng.NormFloat64()
				img[y*side+x] = min(max(v, 0), 1)
			}
		}
		d.append(img, k)
	}
	return d
}
