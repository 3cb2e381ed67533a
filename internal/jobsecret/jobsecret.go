// Package jobsecret is the home of a job's secret: what every process of
// a job knows and proves to the others without sending it. Its one
// variable is jobenv.SecretVar; the processes hold it as bytes; every use
// takes a key of its own from it (Key, with a label per use), so that a
// key seen by one use (memberlist's gossip encryption, say) tells nothing
// about another's.
//
// The uses and their labels:
//
//	"transport handshake"  the rank mesh's and ParamHub's connections (package transport/wire)
//	"membership"           gossip encryption (package membership, memberlist's SecretKey)
//	"rendezvous"           a per-node start's launcher and nodes (package launcher)
package jobsecret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MinLen is the shortest secret a job may have, in bytes.
const MinLen = 16

// Labels of the keys, one per use.
const (
	Handshake  = "transport handshake"
	Membership = "membership"
	Rendezvous = "rendezvous"
)

// New returns a fresh secret: 32 random bytes as 64 hex digits (it
// travels in an environment variable).
func New() ([]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("job secret: %w", err)
	}
	return []byte(hex.EncodeToString(b)), nil
}

// Check says why secret cannot serve a job, or nil.
func Check(secret []byte) error {
	if len(secret) < MinLen {
		return fmt.Errorf("job secret missing or shorter than %d bytes", MinLen)
	}
	return nil
}

// Key is the 32-byte key of one use of secret: HMAC-SHA256 keyed by the
// secret over the use's label. Different labels give unrelated keys.
func Key(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("gorun job key\x00"))
	m.Write([]byte(label))
	return m.Sum(nil)
}
