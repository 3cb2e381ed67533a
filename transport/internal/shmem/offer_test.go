package shmem

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzShmOffer: an offer or answer from the peer is untrusted: decoding
// never panics, a decoded offer encodes back to the same bytes, and an
// offer's refusal check never accepts a path outside the job's directory.
func FuzzShmOffer(f *testing.F) {
	f.Add(Offer{HostKey: "h/boot", Path: "/dev/shm/gorun-job-w0-hub0-00", RingCap: 4096}.Encode())
	f.Add(Offer{Reason: "off"}.Encode())
	f.Add(Offer{HostKey: "h/boot", Path: "/dev/shm/gorun-job-w0-hub0-01", RingCap: 4096, Bells: true}.Encode())
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = DecodeAnswer(b)
		o, err := DecodeOffer(b)
		if err != nil {
			return
		}
		if !bytes.Equal(o.Encode(), b) {
			t.Fatalf("offer %+v does not encode back to its bytes", o)
		}
		if o.refusal(o.HostKey, "/dev/shm", "job") == "" && (filepath.Dir(o.Path) != "/dev/shm" || !strings.HasPrefix(filepath.Base(o.Path), "gorun-job-")) {
			t.Fatalf("accepted a segment outside the job's: %q", o.Path)
		}
	})
}
