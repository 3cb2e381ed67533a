package pipeline

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ReadCSV reads numeric features and an integer label per line, raw or
// gzipped: the label column is cfg.Label (by name, with cfg.Header) or
// cfg.LabelIndex; every other column is a feature, parsed as float32.
// Every line must have the first line's number of fields. A malformed
// line gives a *FormatError with its line number (from 1).
func ReadCSV(r io.Reader, cfg ReadConfig) (*Dataset, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b, err := readAll(r, cfg.MaxBytes)
	if err != nil {
		return nil, err
	}
	return decodeCSV(b, cfg)
}

func decodeCSV(b []byte, cfg ReadConfig) (*Dataset, error) {
	cr := csv.NewReader(bytes.NewReader(b))
	cr.Comma = cfg.Comma
	cr.ReuseRecord = true
	bad := func(line int, err error, format string, a ...any) error {
		return &FormatError{Format: "csv", Offset: -1, Line: line, Msg: fmt.Sprintf(format, a...), Err: err}
	}
	label := -1
	ds := &Dataset{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, bad(pe.Line, pe.Err, "malformed")
			}
			return nil, bad(0, err, "read")
		}
		line, _ := cr.FieldPos(0)
		if label < 0 { // the first record
			label = cfg.LabelIndex
			if cfg.Label != "" {
				label = -1
				for i, name := range rec {
					if strings.TrimSpace(name) == cfg.Label {
						label = i
					}
				}
				if label < 0 {
					return nil, bad(line, nil, "no column named %q", cfg.Label)
				}
			} else if label < 0 {
				label += len(rec)
			}
			if label < 0 || label >= len(rec) {
				return nil, bad(line, nil, "label column %d of %d", cfg.LabelIndex, len(rec))
			}
			ds.D = len(rec) - 1
			if cfg.Header {
				continue
			}
		}
		for i, f := range rec {
			f = strings.TrimSpace(f)
			if i == label {
				y, err := strconv.Atoi(f)
				if err != nil {
					return nil, bad(line, nil, "label %q is not an integer", f)
				}
				ds.Y = append(ds.Y, y)
				continue
			}
			x, err := strconv.ParseFloat(f, 32)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, bad(line, nil, "field %d: %q is not a finite number", i+1, f)
			}
			ds.X = append(ds.X, float32(x))
		}
		ds.N++
	}
	return ds, nil
}
