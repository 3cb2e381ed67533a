package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/gorun/gorun/transport"
)

func randomFrames(rng *rand.Rand, n int) ([]transport.Header, [][]byte, []byte) {
	var hs []transport.Header
	var ps [][]byte
	var stream []byte
	for range n {
		h := transport.Header{Type: transport.Type(1 + rng.IntN(int(transport.TypeReady))), DType: uint8(rng.Uint32()), Op: uint8(rng.Uint32()),
			Kind: uint8(rng.Uint32()), Seq: rng.Uint32(), Step: rng.Uint32(), Count: rng.Uint64(), Comm: rng.Uint32()}
		p := make([]byte, rng.IntN(64))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		h.Len = uint32(len(p))
		hs, ps = append(hs, h), append(ps, p)
		stream = AppendFrame(stream, h, p)
	}
	return hs, ps, stream
}

// splitReader returns the stream in two reads split at k.
type splitReader struct {
	b []byte
	k int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := len(s.b)
	if s.k > 0 && s.k < n {
		n = s.k
	}
	n = copy(p, s.b[:n])
	s.b = s.b[n:]
	s.k -= n
	return n, nil
}

// TestReaderEverySplit decodes a valid stream split at every byte offset,
// and byte by byte.
func TestReaderEverySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	hs, ps, stream := randomFrames(rng, 5)
	check := func(r io.Reader, what string) {
		fr := NewReader(r, 1<<10)
		for i := range hs {
			h, p, err := fr.Next(nil)
			if err != nil {
				t.Fatalf("%s: frame %d: %v", what, i, err)
			}
			if h != hs[i] || !bytes.Equal(p, ps[i]) {
				t.Fatalf("%s: frame %d: got %+v %x, want %+v %x", what, i, h, p, hs[i], ps[i])
			}
		}
		if _, _, err := fr.Next(nil); err != io.EOF {
			t.Fatalf("%s: after the last frame got %v, want EOF", what, err)
		}
	}
	for k := 0; k <= len(stream); k++ {
		check(&splitReader{b: stream, k: k}, "split")
	}
	check(iotest.OneByteReader(bytes.NewReader(stream)), "one byte")
	// A stream cut anywhere inside a frame is an unexpected EOF, never a frame.
	for k := 1; k < len(stream); k++ {
		fr := NewReader(bytes.NewReader(stream[:k]), 1<<10)
		var err error
		for err == nil {
			_, _, err = fr.Next(nil)
		}
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v", k, err)
		}
	}
}

func TestReaderRejects(t *testing.T) {
	good := AppendFrame(nil, transport.Header{Type: transport.TypeData, Seq: 1}, []byte("abc"))
	mutate := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	cases := map[string][]byte{
		"magic":    mutate(func(b []byte) { b[0] ^= 0xff }),
		"type 0":   mutate(func(b []byte) { b[2] = 0 }),
		"type 200": mutate(func(b []byte) { b[2] = 200 }),
		"reserved": mutate(func(b []byte) { b[6] = 1 }),
		"too long": mutate(func(b []byte) { b[24], b[25], b[26], b[27] = 0xff, 0xff, 0xff, 0x7f }),
	}
	for name, b := range cases {
		allocated := 0
		_, _, err := NewReader(bytes.NewReader(b), 1<<20).Next(func(n int) []byte { allocated = n; return make([]byte, n) })
		if !errors.Is(err, ErrFrame) {
			t.Errorf("%s: got %v, want ErrFrame", name, err)
		}
		if allocated != 0 {
			t.Errorf("%s: allocated %d bytes for a bad frame", name, allocated)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to the frame reader: it must never panic
// or allocate past the cap, and whatever it accepts must re-encode to the
// bytes it came from.
func FuzzDecode(f *testing.F) {
	_, _, stream := randomFrames(rand.New(rand.NewPCG(1, 1)), 3)
	f.Add(stream)
	f.Add(AppendFrame(nil, transport.Header{Type: transport.TypeAbort}, []byte{1, 'x'}))
	f.Add([]byte("gr"))
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxPayload = 4096
		fr := NewReader(bytes.NewReader(in), maxPayload)
		var out []byte
		for {
			h, p, err := fr.Next(func(n int) []byte {
				if n > maxPayload {
					t.Fatalf("allocating %d bytes past the cap", n)
				}
				return make([]byte, n)
			})
			if err != nil {
				break
			}
			out = AppendFrame(out, h, p)
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("accepted frames do not re-encode to their input")
		}
	})
}

// FuzzHandshake feeds arbitrary bytes to the acceptor's side of the
// handshake: it must never panic and never accept without the secret.
func FuzzHandshake(f *testing.F) {
	h := Hello{Version: ProtocolVersion, From: 1, To: 0, Size: 2, JobID: "job"}
	f.Add(h.Append(nil))
	f.Add([]byte("GORUNHS\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		_, err := AcceptHello(rw, []byte("0123456789abcdef"), func(*Hello) byte { return StatusOK })
		if err == nil {
			t.Fatalf("handshake accepted without proof of the secret: %x", in)
		}
	})
}
