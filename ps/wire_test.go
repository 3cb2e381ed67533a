package ps

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/reduce"
)

func sampleMessages() []message {
	return []message{
		{Type: msgDeclare, ID: 1, Key: "layer1/w", Count: 3, Code: uint8(SGD), Stale: 2, LR: 0.1, Mom: 0.9, Data: make([]byte, 24)},
		{Type: msgPush, ID: 2, Key: "k@0", Clock: 7, Samples: 32, DType: 1, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Type: msgPull, ID: 3, Key: "k@1048576", Clock: 9, DType: 2},
		{Type: msgRound, ID: 4, Kind: kindGather, Code: 1, DType: 4, Clock: 3, Part: 2, Count: 10, Off: 4, N: 1, Data: make([]byte, 8)},
		{Type: msgShare, ID: 5, Count: 512, Samples: 64, Nanos: 123456},
		{Type: msgReply, ID: 6, DType: 1, Stale: 1, Data: make([]byte, 4)},
		{Type: msgError, ID: 7, Code: codeShape, Data: []byte("ps: shape mismatch")},
		{Type: msgRound, ID: 8, Kind: kindReduce, Code: 1, DType: reduce.Float32, Wire: uint8(reduce.WireBF16), Clock: 5, Count: 9, Off: 3, N: 3, Data: make([]byte, 6)},
		{Type: msgReply, ID: 9, DType: reduce.Float32, Wire: uint8(reduce.WireFP16), Data: make([]byte, 2)},
	}
}

// TestMessageWireRefused: a wire format the decoder cannot take is a
// frame error that says why: unknown, on a message that takes none, on
// data that is not float32, on a round that is not a reduction, or data
// that is not whole elements of the format.
func TestMessageWireRefused(t *testing.T) {
	f32 := reduce.Float32
	for _, c := range []struct {
		m    message
		want string
	}{
		{message{Type: msgRound, Kind: kindReduce, DType: f32, Wire: 9, N: 1, Data: make([]byte, 2)}, "unknown wire format 9"},
		{message{Type: msgRound, Kind: kindReduce, DType: f32, Wire: uint8(reduce.WireFP16), N: 1, Data: make([]byte, 2)}, ""},
		{message{Type: msgPush, Key: "k", DType: f32, Wire: uint8(reduce.WireFP16), Data: make([]byte, 2)}, "takes none"},
		{message{Type: msgRound, Kind: kindReduce, DType: reduce.Float64, Wire: uint8(reduce.WireFP16), N: 1, Data: make([]byte, 2)}, "float32 only"},
		{message{Type: msgRound, Kind: kindGather, DType: f32, Wire: uint8(reduce.WireBF16), N: 1, Data: make([]byte, 2)}, "reductions only"},
		{message{Type: msgRound, Kind: kindReduce, DType: f32, Wire: uint8(reduce.WireBF16), N: 2, Data: make([]byte, 3)}, "not whole"},
	} {
		_, err := decodeMessage(c.m.encode())
		if c.want == "" {
			if err != nil {
				t.Fatalf("%+v: %v", c.m, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: got %v, want an error with %q", c.m, err, c.want)
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		b := m.encode()
		if len(b)%8 != len(m.Data)%8 || len(b) != m.size() {
			t.Fatalf("%v: encoded %d bytes, size %d", m.Type, len(b), m.size())
		}
		got, err := decodeMessage(b)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		if !bytes.Equal(got.Data, m.Data) || got.Key != m.Key {
			t.Fatalf("%v: round trip changed data or key", m.Type)
		}
		got.Data, m.Data = nil, nil
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
		// Every truncation is an error, never a panic.
		for i := range msgHeaderSize + pad8(len(m.Key)) {
			if _, err := decodeMessage(b[:i]); err == nil {
				t.Fatalf("%v cut at %d decoded", m.Type, i)
			}
		}
	}
}

// FuzzDecodeMessage: the decoder never panics, and whatever it accepts
// encodes back to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(m.encode())
	}
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		if m.Key != "" && len(m.Key) > maxKeyLen {
			t.Fatalf("key of %d bytes accepted", len(m.Key))
		}
		again := m.encode()
		m2, err := decodeMessage(again)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !bytes.Equal(m2.Data, m.Data) || m2.Key != m.Key || m2.Type != m.Type || m2.Count != m.Count || m2.Wire != m.Wire {
			t.Fatal("re-encoding changed the message")
		}
	})
}

func TestFrameSlackHoldsHeaderAndKey(t *testing.T) {
	if need := msgHeaderSize + pad8(maxKeyLen); need > FrameSlack {
		t.Fatalf("a message needs %d bytes beyond its data, FrameSlack is %d", need, FrameSlack)
	}
}
