package pipeline

import "fmt"

// FormatError is a malformed input file: for IDX the byte Offset (in the
// decompressed stream) where decoding failed, for CSV the Line (from 1).
// Exactly one of them is meaningful: Line is 0 for IDX, Offset -1 for
// CSV.
type FormatError struct {
	Format string // "idx" or "csv"
	Offset int64
	Line   int
	Msg    string
	Err    error // the underlying error, if any
}

func (e *FormatError) Error() string {
	where := fmt.Sprintf("offset %d", e.Offset)
	if e.Format == "csv" {
		where = fmt.Sprintf("line %d", e.Line)
	}
	s := fmt.Sprintf("pipeline: %s: %s: %s", e.Format, where, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }
