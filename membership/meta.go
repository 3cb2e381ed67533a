package membership

import (
	"encoding/binary"
	"net"
)

// encodeMeta is a member's metadata: its rank, data address and host.
func encodeMeta(rank int, data, host string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(rank))
	b = append(b, byte(min(len(data), 255)))
	b = append(b, data[:min(len(data), 255)]...)
	return append(b, host...)
}

// parseMeta decodes a member's rank, data address and host.
func parseMeta(b []byte) (int, Peer, bool) {
	if len(b) < 5 || len(b) < 5+int(b[4]) {
		return 0, Peer{}, false
	}
	r := int(binary.LittleEndian.Uint32(b))
	n := int(b[4])
	p := Peer{Data: string(b[5 : 5+n]), Host: string(b[5+n:])}
	if _, _, err := net.SplitHostPort(p.Data); err != nil {
		return 0, Peer{}, false
	}
	return r, p, true
}
