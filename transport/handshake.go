package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gorun/gorun/internal/jobsecret"
)

// Every connection starts with a handshake:
//
//	dialer   -> hello:  "GORUNHS" version from to size port jobLen job nonceD
//	acceptor -> reply:  status nonceA mac(A, job, from, to, nonceD, nonceA)
//	dialer   -> proof:  mac(D, job, from, to, nonceA, nonceD)
//	acceptor -> status
//
// Each side proves that it knows the job secret without sending it, and
// each side's proof covers the other's fresh nonce, so a recorded handshake
// cannot be replayed. port is the port the dialer listens on for its
// peers (0: none): it tells a restarted process's connection from its old
// process's on the same host.

// ProtocolVersion is checked in every handshake.
const ProtocolVersion = 5

const (
	helloMagic  = "GORUNHS"
	nonceSize   = 16
	macSize     = sha256.Size
	maxJobIDLen = 64
	helloFixed  = len(helloMagic) + 1 + 4 + 4 + 4 + 2 + 1
)

// Handshake status codes. ONLY APPEND TO THIS LIST.
const (
	statusOK byte = iota
	statusVersion
	statusJob
	statusRanks
	statusSecret
	statusDuplicate
)

var statusText = map[byte]string{
	statusVersion:   "protocol version mismatch",
	statusJob:       "different job id",
	statusRanks:     "rank numbers out of range",
	statusSecret:    "wrong job secret",
	statusDuplicate: "duplicate connection",
}

type hello struct {
	Version  uint8
	From, To uint32
	Size     uint32
	Port     uint16
	JobID    string
	Nonce    [nonceSize]byte
}

func (h *hello) append(b []byte) []byte {
	b = append(b, helloMagic...)
	b = append(b, h.Version)
	b = binary.LittleEndian.AppendUint32(b, h.From)
	b = binary.LittleEndian.AppendUint32(b, h.To)
	b = binary.LittleEndian.AppendUint32(b, h.Size)
	b = binary.LittleEndian.AppendUint16(b, h.Port)
	b = append(b, byte(len(h.JobID)))
	b = append(b, h.JobID...)
	return append(b, h.Nonce[:]...)
}

// readHello reads and decodes a hello, bounding every length it reads.
func readHello(r io.Reader) (hello, error) {
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return hello{}, fmt.Errorf("handshake: reading hello: %w", err)
	}
	if string(fixed[:len(helloMagic)]) != helloMagic {
		return hello{}, &FrameError{fmt.Sprintf("handshake: not a gorun peer (starts with %q)", fixed[:len(helloMagic)])}
	}
	b := fixed[len(helloMagic):]
	h := hello{
		Version: b[0],
		From:    binary.LittleEndian.Uint32(b[1:]),
		To:      binary.LittleEndian.Uint32(b[5:]),
		Size:    binary.LittleEndian.Uint32(b[9:]),
		Port:    binary.LittleEndian.Uint16(b[13:]),
	}
	n := int(b[15])
	if n > maxJobIDLen {
		return hello{}, &FrameError{fmt.Sprintf("handshake: job id of %d bytes exceeds %d", n, maxJobIDLen)}
	}
	rest := make([]byte, n+nonceSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		return hello{}, fmt.Errorf("handshake: reading hello: %w", err)
	}
	h.JobID = string(rest[:n])
	copy(h.Nonce[:], rest[n:])
	return h, nil
}

// proof is one side's proof of the job secret: an HMAC, under the secret's
// handshake key, of the side's role, the hello and both nonces.
func proof(key []byte, role byte, h *hello, first, second []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte{role})
	m.Write([]byte(h.JobID))
	var b [10]byte
	binary.LittleEndian.PutUint32(b[0:], h.From)
	binary.LittleEndian.PutUint32(b[4:], h.To)
	binary.LittleEndian.PutUint16(b[8:], h.Port)
	m.Write(b[:])
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

func nonce() ([nonceSize]byte, error) {
	var n [nonceSize]byte
	_, err := rand.Read(n[:])
	return n, err
}

// handshakeDial runs the dialer's side on rw.
func handshakeDial(rw io.ReadWriter, secret []byte, h hello) error {
	key := jobsecret.Key(secret, jobsecret.Handshake)
	var err error
	if h.Nonce, err = nonce(); err != nil {
		return err
	}
	if _, err := rw.Write(h.append(nil)); err != nil {
		return fmt.Errorf("handshake with rank %d: %w", h.To, err)
	}
	var reply [1 + nonceSize + macSize]byte
	if _, err := io.ReadFull(rw, reply[:]); err != nil {
		return fmt.Errorf("handshake with rank %d: reading reply: %w", h.To, err)
	}
	if reply[0] == statusDuplicate {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w: %w", h.To, statusString(reply[0]), errDuplicate, ErrAuth)
	}
	if reply[0] != statusOK {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w", h.To, statusString(reply[0]), ErrAuth)
	}
	nonceA := reply[1 : 1+nonceSize]
	if !hmac.Equal(reply[1+nonceSize:], proof(key, 'A', &h, h.Nonce[:], nonceA)) {
		return fmt.Errorf("handshake with rank %d: its proof of the job secret does not match (wrong job secret?): %w", h.To, ErrAuth)
	}
	if _, err := rw.Write(proof(key, 'D', &h, nonceA, h.Nonce[:])); err != nil {
		return fmt.Errorf("handshake with rank %d: %w", h.To, err)
	}
	var status [1]byte
	if _, err := io.ReadFull(rw, status[:]); err != nil {
		return fmt.Errorf("handshake with rank %d: reading status: %w", h.To, err)
	}
	if status[0] != statusOK {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w", h.To, statusString(status[0]), ErrAuth)
	}
	return nil
}

// handshakeAccept runs the acceptor's side: check reports whether the
// peer's hello is acceptable (statusOK or a refusal code). It returns the
// peer's hello once the peer has proven it knows the secret.
func handshakeAccept(rw io.ReadWriter, secret []byte, check func(*hello) byte) (hello, error) {
	key := jobsecret.Key(secret, jobsecret.Handshake)
	h, err := readHello(rw)
	if err != nil {
		return hello{}, err
	}
	var reply [1 + nonceSize + macSize]byte
	if st := check(&h); st != statusOK {
		reply[0] = st
		_, _ = rw.Write(reply[:])
		if st == statusDuplicate {
			return h, fmt.Errorf("handshake from rank %d: %w: %w", h.From, errDuplicate, ErrAuth)
		}
		return h, fmt.Errorf("handshake from rank %d: %s (job %q, version %d): %w", h.From, statusString(st), h.JobID, h.Version, ErrAuth)
	}
	nonceA, err := nonce()
	if err != nil {
		return h, err
	}
	copy(reply[1:], nonceA[:])
	copy(reply[1+nonceSize:], proof(key, 'A', &h, h.Nonce[:], nonceA[:]))
	if _, err := rw.Write(reply[:]); err != nil {
		return h, err
	}
	var mac [macSize]byte
	if _, err := io.ReadFull(rw, mac[:]); err != nil {
		return h, fmt.Errorf("handshake from rank %d: reading proof: %w", h.From, err)
	}
	if !hmac.Equal(mac[:], proof(key, 'D', &h, nonceA[:], h.Nonce[:])) {
		_, _ = rw.Write([]byte{statusSecret})
		return h, fmt.Errorf("handshake from rank %d: proof of the job secret does not match (wrong job secret?): %w", h.From, ErrAuth)
	}
	if _, err := rw.Write([]byte{statusOK}); err != nil {
		return h, err
	}
	return h, nil
}

func statusString(s byte) string {
	if t, ok := statusText[s]; ok {
		return t
	}
	return fmt.Sprintf("status %d", s)
}
