package jobsecret

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// TestKey: a key is HMAC-SHA256 of its label under the secret (computed
// here with the standard library directly), the same for the same secret
// and label, and different for another label or secret.
func TestKey(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New()
	if bytes.Equal(a, b) || len(a) != 64 || Check(a) != nil {
		t.Fatalf("New: %q %q", a, b)
	}
	m := hmac.New(sha256.New, a)
	m.Write([]byte("gorun job key\x00" + Handshake))
	if got := Key(a, Handshake); !bytes.Equal(got, m.Sum(nil)) || !bytes.Equal(got, Key(a, Handshake)) {
		t.Fatal("Key is not HMAC-SHA256 of the label, or not stable")
	}
	keys := map[string]bool{}
	for _, s := range [][]byte{a, b} {
		for _, l := range []string{Handshake, Membership, Rendezvous} {
			keys[string(Key(s, l))] = true
		}
	}
	if len(keys) != 6 {
		t.Fatalf("%d distinct keys of 2 secrets and 3 labels, want 6", len(keys))
	}
	for _, s := range []string{"", "short", "fifteen bytes!!"} {
		if Check([]byte(s)) == nil {
			t.Fatalf("Check(%q) passed", s)
		}
	}
	if Check([]byte("sixteen bytes!!!")) != nil {
		t.Fatal("a 16-byte secret refused")
	}
}
