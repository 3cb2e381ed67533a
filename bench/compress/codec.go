package main

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// A codec compresses a whole payload into one block and back, as a frame
// would carry it: klauspost/compress's block APIs (s2.Encode,
// s2.EncodeBetter, s2.Decode; zstd's EncodeAll and DecodeAll), each call
// on one goroutine.
type codec struct {
	name string
	// compress appends src's compressed form to dst[:0] and returns it.
	compress func(dst, src []byte) []byte
	// decompress writes src's decompressed form into dst[:0]; it fails
	// rather than write past cap(dst), which the caller sets to the
	// payload's known length.
	decompress func(dst, src []byte) ([]byte, error)
}

// codecNames are the codecs, in the order the report lists them.
var codecNames = []string{"s2", "s2-better", "zstd-fastest", "zstd-default"}

// errTooLarge reports a compressed block that claims more bytes than the
// payload can have.
var errTooLarge = errors.New("compress: block decompresses past its cap")

// codecs holds the codecs and the zstd encoders and decoder behind them.
type codecs struct {
	list   []codec
	encs   []*zstd.Encoder
	dec    *zstd.Decoder
	closed bool
}

// newCodecs builds the named codecs (every one of codecNames if names is
// empty). Close releases them.
func newCodecs(names []string) (*codecs, error) {
	if len(names) == 0 {
		names = codecNames
	}
	cs := &codecs{}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, err
	}
	cs.dec = dec
	zdec := func(dst, src []byte) ([]byte, error) {
		out, err := dec.DecodeAll(src, dst[:0])
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, fmt.Errorf("%w: %w", errTooLarge, err)
		}
		return out, err
	}
	s2dec := func(dst, src []byte) ([]byte, error) {
		n, err := s2.DecodedLen(src)
		if err != nil {
			return nil, err
		}
		if n > cap(dst) {
			return nil, fmt.Errorf("%w: %d bytes, cap %d", errTooLarge, n, cap(dst))
		}
		return s2.Decode(dst[:cap(dst)], src)
	}
	for _, name := range names {
		var c codec
		switch name {
		case "s2":
			c = codec{name, func(dst, src []byte) []byte { return s2.Encode(dst[:0], src) }, s2dec}
		case "s2-better":
			c = codec{name, func(dst, src []byte) []byte { return s2.EncodeBetter(dst[:0], src) }, s2dec}
		case "zstd-fastest", "zstd-default":
			level := zstd.SpeedFastest
			if name == "zstd-default" {
				level = zstd.SpeedDefault
			}
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
			if err != nil {
				cs.Close()
				return nil, err
			}
			cs.encs = append(cs.encs, enc)
			c = codec{name, func(dst, src []byte) []byte { return enc.EncodeAll(src, dst[:0]) }, zdec}
		default:
			cs.Close()
			return nil, fmt.Errorf("compress: unknown codec %q (want one of %v)", name, codecNames)
		}
		cs.list = append(cs.list, c)
	}
	return cs, nil
}

// Close releases the zstd encoders and decoder; it is idempotent.
func (cs *codecs) Close() {
	if cs.closed {
		return
	}
	cs.closed = true
	for _, e := range cs.encs {
		e.Close()
	}
	if cs.dec != nil {
		cs.dec.Close()
	}
}
