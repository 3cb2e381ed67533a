package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// ReadConfig bounds and shapes the readers.
type ReadConfig struct {
	// MaxBytes caps one file's size after decompression; a larger file
	// is an error, read no further than MaxBytes+1 bytes.
	MaxBytes int64

	// CSV only.
	Comma  rune   // field separator
	Header bool   // the first line names the columns
	Label  string // the label column's name (needs Header); "" uses LabelIndex
	// LabelIndex is the label column's index when Label is ""; negative
	// counts from the end (-1 is the last column).
	LabelIndex int
}

// DefaultReadConfig is 1 GiB per file, comma-separated, no header, the
// label in the last column.
func DefaultReadConfig() ReadConfig {
	return ReadConfig{MaxBytes: 1 << 30, Comma: ',', LabelIndex: -1}
}

func (c ReadConfig) validate() error {
	if c.MaxBytes <= 0 {
		return fmt.Errorf("pipeline: ReadConfig.MaxBytes %d, want > 0", c.MaxBytes)
	}
	if c.Label != "" && !c.Header {
		return errors.New("pipeline: ReadConfig.Label needs Header")
	}
	return nil
}

// readAll reads r whole, gunzipping it when it starts with gzip's magic,
// and fails when it holds more than max bytes.
func readAll(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("pipeline: read: %w", err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("pipeline: file larger than MaxBytes (%d)", max)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return b, nil
	}
	z, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("pipeline: gzip: %w", err)
	}
	defer z.Close()
	u, err := io.ReadAll(io.LimitReader(z, max+1))
	if err != nil {
		return nil, fmt.Errorf("pipeline: gzip: %w", err)
	}
	if int64(len(u)) > max {
		return nil, fmt.Errorf("pipeline: decompressed file larger than MaxBytes (%d)", max)
	}
	return u, nil
}
