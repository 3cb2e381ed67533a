package main

import (
	"encoding/binary"
	"testing"
)

// nlmsg builds one netlink message of type typ around an nfgenmsg header
// and the given attributes, as the kernel sends them.
func nlmsg(typ uint16, as ...attr) []byte { return encode(typ, 0, 0, as) }

// TestParse: a datagram of two packet notifications gives both packets'
// ids; a truncated one gives what is whole.
func TestParse(t *testing.T) {
	id := func(v uint32) []byte { return append(binary.BigEndian.AppendUint32(nil, v), 8, 0, 3) }
	d := append(nlmsg(subsysQueue<<8|msgPacket, attr{attrPacketHdr, id(7)}, attr{9, []byte{1, 2}}),
		nlmsg(subsysQueue<<8|msgPacket, attr{attrPacketHdr, id(8)})...)
	var got []uint32
	for _, m := range messages(d) {
		for _, a := range attrs(m.body) {
			if a.typ == attrPacketHdr {
				got = append(got, binary.BigEndian.Uint32(a.data))
			}
		}
	}
	if len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Fatalf("ids %v, want [7 8]", got)
	}
	if n := len(messages(d[:len(d)-1])); n != 1 {
		t.Fatalf("a truncated second message: %d messages, want 1", n)
	}
}

// FuzzParse: any datagram splits into messages and attributes that lie
// inside it, without a panic.
func FuzzParse(f *testing.F) {
	f.Add(nlmsg(subsysQueue<<8|msgPacket, attr{attrPacketHdr, []byte{0, 0, 0, 1, 8, 0, 3}}))
	f.Add([]byte{255, 255, 255, 255, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range messages(b) {
			if len(m.body) > len(b) {
				t.Fatalf("a body of %d bytes from %d", len(m.body), len(b))
			}
			for _, a := range attrs(m.body) {
				if len(a.data) > len(m.body) {
					t.Fatalf("an attribute of %d bytes from %d", len(a.data), len(m.body))
				}
			}
		}
	})
}
