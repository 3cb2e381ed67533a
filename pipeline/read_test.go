package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// idxFile encodes an IDX file: magic, dimensions, payload.
func idxFile(magic uint32, dims []uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, payload...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	z.Write(b)
	z.Close()
	return buf.Bytes()
}

func TestReadIDX(t *testing.T) {
	img := idxFile(idxImages, []uint32{2, 2, 3}, []byte{0, 255, 51, 0, 0, 0, 1, 2, 3, 4, 5, 6})
	lab := idxFile(idxLabels, []uint32{2}, []byte{7, 9})
	for name, wrap := range map[string]func([]byte) []byte{"raw": func(b []byte) []byte { return b }, "gzip": gz} {
		d, err := ReadIDX(bytes.NewReader(wrap(img)), bytes.NewReader(wrap(lab)), DefaultReadConfig())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.N != 2 || d.D != 6 || d.X[1] != 1 || d.X[2] != 0.2 || d.Y[0] != 7 || d.Y[1] != 9 {
			t.Fatalf("%s: %+v", name, d)
		}
	}
}

// TestReadIDXMalformed: every malformed file is a *FormatError at the
// offset where it goes wrong; a header claiming 2^31 items in a small
// file fails before allocating them.
func TestReadIDXMalformed(t *testing.T) {
	lab := idxFile(idxLabels, []uint32{2}, []byte{1, 2})
	for _, tc := range []struct {
		name string
		img  []byte
		off  int64
		msg  string
	}{
		{"empty", nil, 0, "in the magic"},
		{"short magic", []byte{0, 0, 8}, 3, "in the magic"},
		{"bad magic", idxFile(0x801, []uint32{2}, []byte{1, 2}), 0, "magic"},
		{"short header", idxFile(idxImages, []uint32{2, 1}, nil), 12, "in the header"},
		{"truncated data", idxFile(idxImages, []uint32{2, 2, 2}, []byte{1, 2, 3}), 19, "ends early"},
		{"trailing", idxFile(idxImages, []uint32{1, 1, 1}, []byte{1, 2}), 17, "trailing"},
		{"zero rows", idxFile(idxImages, []uint32{2, 0, 3}, make([]byte, 6)), 8, "dimension 1 is 0"},
		{"huge", idxFile(idxImages, []uint32{1 << 31, 28, 28}, make([]byte, 100)), 116, "ends early"},
		{"huge sample", idxFile(idxImages, []uint32{1<<32 - 1, 1<<32 - 1, 1<<32 - 1}, nil), 12, "a sample of more than"},
		{"none of a huge sample", idxFile(idxImages, []uint32{0, 1 << 31, 1 << 31}, nil), 12, "a sample of more than"},
	} {
		var err error
		allocs := testing.AllocsPerRun(1, func() {
			_, err = ReadIDX(bytes.NewReader(tc.img), bytes.NewReader(lab), DefaultReadConfig())
		})
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset != tc.off || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want a FormatError at offset %d with %q", tc.name, err, tc.off, tc.msg)
		}
		if allocs > 40 {
			t.Errorf("%s: %v allocations", tc.name, allocs)
		}
	}
	img := idxFile(idxImages, []uint32{3, 1, 1}, []byte{1, 2, 3})
	if _, err := ReadIDX(bytes.NewReader(img), bytes.NewReader(lab), DefaultReadConfig()); err == nil || !strings.Contains(err.Error(), "3 images but 2 labels") {
		t.Errorf("count mismatch: %v", err)
	}
	cfg := DefaultReadConfig()
	cfg.MaxBytes = 10
	if _, err := ReadIDX(bytes.NewReader(gz(img)), bytes.NewReader(lab), cfg); err == nil || !strings.Contains(err.Error(), "MaxBytes") {
		t.Errorf("over MaxBytes: %v", err)
	}
	if _, err := ReadIDX(bytes.NewReader([]byte{0x1f, 0x8b, 1}), bytes.NewReader(lab), DefaultReadConfig()); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("bad gzip: %v", err)
	}
}

func TestReadCSV(t *testing.T) {
	cfg := DefaultReadConfig()
	cfg.Header, cfg.Label = true, "class"
	d, err := ReadCSV(strings.NewReader("a, class ,b\n1.5,3,-2\n0,1,1e3\n"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 2 || d.D != 2 || !equalF(d.X, []float32{1.5, -2, 0, 1000}) || d.Y[0] != 3 || d.Y[1] != 1 {
		t.Fatalf("%+v", d)
	}
	d, err = ReadCSV(bytes.NewReader(gz([]byte("1;2;5\n3;4;6\n"))), ReadConfig{MaxBytes: 100, Comma: ';', LabelIndex: 0})
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 2 || !equalF(d.X, []float32{2, 5, 4, 6}) || d.Y[0] != 1 || d.Y[1] != 3 {
		t.Fatalf("%+v", d)
	}
	if d, err := ReadCSV(strings.NewReader(""), DefaultReadConfig()); err != nil || d.N != 0 {
		t.Fatalf("empty: %+v %v", d, err)
	}
}

func equalF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadCSVMalformed: errors name the line.
func TestReadCSVMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		header   bool
		label    string
		line     int
		msg      string
	}{
		{"not a number", "1,2,3\n4,x,5\n", false, "", 2, "not a finite number"},
		{"nan", "1,2,3\n\n4,NaN,5\n", false, "", 3, "not a finite number"},
		{"label", "1,2,3\n4,5,6.5\n", false, "", 2, "not an integer"},
		{"fields", "1,2,3\n4,5\n", false, "", 2, "malformed"},
		{"quote", "1,2,3\n1,\"2,3\n", false, "", 2, "malformed"},
		{"no column", "a,b\n1,2\n", true, "c", 1, "no column"},
		{"header then bad", "a,b\n1,2\n1,b\n", true, "b", 3, "not an integer"},
	} {
		cfg := DefaultReadConfig()
		cfg.Header, cfg.Label = tc.header, tc.label
		_, err := ReadCSV(strings.NewReader(tc.in), cfg)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want a FormatError on line %d with %q", tc.name, err, tc.line, tc.msg)
		}
	}
	if _, err := ReadCSV(strings.NewReader("1,2\n"), ReadConfig{MaxBytes: 1, Comma: ','}); err == nil {
		t.Error("over MaxBytes: no error")
	}
	if _, err := ReadCSV(strings.NewReader("1,2\n"), ReadConfig{MaxBytes: 10, Comma: ',', Label: "x"}); err == nil {
		t.Error("Label without Header: no error")
	}
	if _, err := ReadCSV(strings.NewReader("1,2\n"), ReadConfig{MaxBytes: 10, Comma: ',', LabelIndex: 5}); err == nil {
		t.Error("label index out of range: no error")
	}
}

func FuzzIDX(f *testing.F) {
	f.Add(idxFile(idxImages, []uint32{2, 1, 2}, []byte{1, 2, 3, 4}))
	f.Add(idxFile(idxImages, []uint32{1 << 31, 28, 28}, nil))
	f.Add(gz(idxFile(idxImages, []uint32{1, 1, 1}, []byte{9})))
	f.Add([]byte{0, 0, 8, 3, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		dims, payload, err := decodeIDX(b, idxImages)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > int64(len(b)) {
				t.Fatalf("error %v: not a FormatError within the file", err)
			}
			return
		}
		if len(dims) != 3 || dims[0]*dims[1]*dims[2] != len(payload) || 16+len(payload) != len(b) {
			t.Fatalf("dims %v, payload %d of %d bytes", dims, len(payload), len(b))
		}
		// Every split of a good file is an error at or before its cut.
		for cut := range len(b) {
			if _, _, err := decodeIDX(b[:cut], idxImages); err == nil {
				t.Fatalf("prefix of %d bytes decoded", cut)
			}
		}
		lab := idxFile(idxLabels, []uint32{uint32(dims[0])}, make([]byte, dims[0]))
		d, err := ReadIDX(bytes.NewReader(b), bytes.NewReader(lab), DefaultReadConfig())
		if err != nil || d.check() != nil || d.N != dims[0] {
			t.Fatalf("ReadIDX: %v", err)
		}
	})
}

func FuzzCSV(f *testing.F) {
	f.Add([]byte("a,b,c\n1,2,3\n"), true)
	f.Add([]byte("1,2,3\n4,5,6\n"), false)
	f.Add([]byte("1,\"2\n"), false)
	f.Add([]byte("\n\n1\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, header bool) {
		cfg := DefaultReadConfig()
		cfg.Header = header
		lines := bytes.Count(b, []byte("\n")) + 1
		d, err := ReadCSV(bytes.NewReader(b), cfg)
		if err != nil {
			var fe *FormatError
			if errors.As(err, &fe) && (fe.Line < 0 || fe.Line > lines) {
				t.Fatalf("error on line %d of %d: %v", fe.Line, lines, err)
			}
			return
		}
		if err := d.check(); err != nil {
			t.Fatal(err)
		}
	})
}
