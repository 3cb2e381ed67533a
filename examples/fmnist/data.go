package main

import (
	"encoding/binary"
	"fmt"
	"io"
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

// loadIDX reads Fashion-MNIST (or MNIST) in its original IDX files,
// gzipped as distributed: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
func loadIDX(dir, prefix string) (*dataset, error) {
	imgs, err := readIDX(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), 0x803)
	if err != nil {
		return nil, err
	}
	labels, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 0x801)
	if err != nil {
		return nil, err
	}
	if len(imgs) != len(labels)*pixels {
		return nil, fmt.Errorf("%s: %d image bytes for %d labels", prefix, len(imgs), len(labels))
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

// readIDX returns the payload of a gzipped IDX file with the given magic,
// checking the dimensions against the payload before allocating it.
func readIDX(path string, magic uint32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(z, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m := binary.BigEndian.Uint32(hdr[:]); m != magic {
		return nil, fmt.Errorf("%s: magic %#x, want %#x", path, m, magic)
	}
	dims := int(magic & 0xff)
	n := 1
	for range dims {
		if _, err := io.ReadFull(z, hdr[:]); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		n *= int(binary.BigEndian.Uint32(hdr[:]))
		if n > 1<<30 {
			return nil, fmt.Errorf("%s: implausibly large (%d bytes)", path, n)
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(z, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
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
