package pipeline

import (
	"encoding/binary"
	"fmt"
	"io"
)

// IDX magics: unsigned bytes (type 0x08) with 3 and 1 dimensions.
const (
	idxImages = 0x00000803
	idxLabels = 0x00000801
	maxItem   = 1 << 30 // bytes in one sample: it must fit an int on 32 bits
)

// ReadIDX reads an IDX image file ([n][rows][cols] uint8, magic
// 0x00000803) and its label file ([n] uint8, magic 0x00000801), each raw
// or gzipped, into a Dataset of n samples with rows×cols features scaled
// to [0, 1] (pixel/255). Only cfg.MaxBytes applies. A malformed file
// gives a *FormatError with the byte offset; a header's sizes are checked
// against the file's real length before anything is allocated.
func ReadIDX(images, labels io.Reader, cfg ReadConfig) (*Dataset, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ib, err := readAll(images, cfg.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	idims, pix, err := decodeIDX(ib, idxImages)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	lb, err := readAll(labels, cfg.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	ldims, lab, err := decodeIDX(lb, idxLabels)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	if idims[0] != ldims[0] {
		return nil, fmt.Errorf("pipeline: idx: %d images but %d labels", idims[0], ldims[0])
	}
	n, d := idims[0], idims[1]*idims[2]
	ds := &Dataset{N: n, D: d, X: make([]float32, len(pix)), Y: make([]int, n)}
	for i, p := range pix {
		ds.X[i] = float32(p) / 255
	}
	for i, l := range lab {
		ds.Y[i] = int(l)
	}
	return ds, nil
}

// decodeIDX checks b's magic and dimensions and returns them with the
// payload, a subslice of b. It allocates only the dimensions (at most 3)
// and never trusts a size the bytes do not hold.
func decodeIDX(b []byte, magic uint32) (dims []int, payload []byte, err error) {
	bad := func(off int, format string, a ...any) error {
		return &FormatError{Format: "idx", Offset: int64(off), Msg: fmt.Sprintf(format, a...)}
	}
	if len(b) < 4 {
		return nil, nil, bad(len(b), "file ends in the magic (%d bytes)", len(b))
	}
	if m := binary.BigEndian.Uint32(b); m != magic {
		return nil, nil, bad(0, "magic %#08x, want %#08x", m, magic)
	}
	nd := int(magic & 0xff)
	hdr := 4 + 4*nd
	if len(b) < hdr {
		return nil, nil, bad(len(b), "file ends in the header (%d of %d bytes)", len(b), hdr)
	}
	dims = make([]int, nd)
	room := int64(len(b) - hdr)
	item := int64(1) // bytes per sample: the product of the dimensions after the first
	for i := nd - 1; i >= 0; i-- {
		v := int64(binary.BigEndian.Uint32(b[4+4*i:]))
		if i == 0 {
			break
		}
		if v == 0 {
			return nil, nil, bad(4+4*i, "dimension %d is 0", i)
		}
		item *= v // item <= maxItem < 2^30 before, v < 2^32: no overflow
		if item > maxItem {
			return nil, nil, bad(4+4*i, "a sample of more than %d bytes", maxItem)
		}
		dims[i] = int(v) // v <= item <= maxItem: fits an int
	}
	size := int64(binary.BigEndian.Uint32(b[4:])) * item // < 2^32 * 2^30: no overflow
	if size > room {
		return nil, nil, bad(len(b), "file ends early: header claims %d bytes of data, file holds %d", size, room)
	}
	dims[0] = int(size / item) // <= room: fits an int
	if size < room {
		return nil, nil, bad(hdr+int(size), "%d trailing bytes after the data", room-size)
	}
	return dims, b[hdr:], nil
}
