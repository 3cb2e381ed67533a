package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gorun/gorun/internal/jobsecret"
	"github.com/gorun/gorun/transport"
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
	MaxJobIDLen = 64 // the longest job id a hello carries
	helloFixed  = len(helloMagic) + 1 + 4 + 4 + 4 + 2 + 1
)

// ErrDuplicate is the refusal of a connection because the pair is
// connected already, or because the refusing rank's own dial to the peer
// wins (StatusDuplicate); it comes with ErrAuth.
var ErrDuplicate = errors.New("the peer is connecting to this rank")

// ErrAnswered marks a dialed handshake that broke off (cut, timed out)
// after the peer's reply had come, its proof of the secret good: the
// peer's process ran during the attempt, for it read the hello and wrote
// the reply. (A process that dies closes its sockets, but a reply it
// wrote was written while it lived.) A dialer's liveness counts such a
// failure as life, not as a failed dial.
var ErrAnswered = errors.New("the peer answered the hello")

// answered is an error of the handshake after the peer's reply; it is
// ErrAnswered, with err's text.
type answered struct{ err error }

func (e answered) Error() string        { return e.err.Error() }
func (e answered) Unwrap() error        { return e.err }
func (e answered) Is(target error) bool { return target == ErrAnswered }

// Handshake status codes, the acceptor's verdict on a Hello (the mesh's
// own acceptor, in transport/tcp, adds StatusDuplicate). ONLY APPEND TO
// THIS LIST: the values cross the wire.
const (
	StatusOK byte = iota
	StatusVersion
	StatusJob
	StatusRanks
	StatusSecret
	StatusDuplicate
)

var statusText = map[byte]string{
	StatusVersion:   "protocol version mismatch",
	StatusJob:       "different job id",
	StatusRanks:     "rank numbers out of range",
	StatusSecret:    "wrong job secret",
	StatusDuplicate: "duplicate connection",
}

// Hello is what the dialer sends first: the protocol version, the
// connection's ends, the job and the dialer's nonce.
type Hello struct {
	Version  uint8
	From, To uint32
	Size     uint32
	Port     uint16
	JobID    string
	Nonce    [nonceSize]byte
}

// Append appends h as the dialer sends it.
func (h *Hello) Append(b []byte) []byte {
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
func readHello(r io.Reader) (Hello, error) {
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Hello{}, fmt.Errorf("handshake: reading hello: %w", err)
	}
	if string(fixed[:len(helloMagic)]) != helloMagic {
		return Hello{}, &FrameError{fmt.Sprintf("handshake: not a gorun peer (starts with %q)", fixed[:len(helloMagic)])}
	}
	b := fixed[len(helloMagic):]
	h := Hello{
		Version: b[0],
		From:    binary.LittleEndian.Uint32(b[1:]),
		To:      binary.LittleEndian.Uint32(b[5:]),
		Size:    binary.LittleEndian.Uint32(b[9:]),
		Port:    binary.LittleEndian.Uint16(b[13:]),
	}
	n := int(b[15])
	if n > MaxJobIDLen {
		return Hello{}, &FrameError{fmt.Sprintf("handshake: job id of %d bytes exceeds %d", n, MaxJobIDLen)}
	}
	rest := make([]byte, n+nonceSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		return Hello{}, fmt.Errorf("handshake: reading hello: %w", err)
	}
	h.JobID = string(rest[:n])
	copy(h.Nonce[:], rest[n:])
	return h, nil
}

// proof is one side's proof of the job secret: an HMAC, under the secret's
// handshake key, of the side's role, the Hello and both nonces.
func proof(key []byte, role byte, h *Hello, first, second []byte) []byte {
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

// dialHello runs the dialer's side on rw.
func dialHello(rw io.ReadWriter, secret []byte, h Hello) error {
	key := jobsecret.Key(secret, jobsecret.Handshake)
	var err error
	if h.Nonce, err = nonce(); err != nil {
		return err
	}
	if _, err := rw.Write(h.Append(nil)); err != nil {
		return fmt.Errorf("handshake with rank %d: %w", h.To, err)
	}
	var reply [1 + nonceSize + macSize]byte
	if _, err := io.ReadFull(rw, reply[:]); err != nil {
		return fmt.Errorf("handshake with rank %d: reading reply: %w", h.To, err)
	}
	if reply[0] == StatusDuplicate {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w: %w", h.To, statusString(reply[0]), ErrDuplicate, transport.ErrAuth)
	}
	if reply[0] != StatusOK {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w", h.To, statusString(reply[0]), transport.ErrAuth)
	}
	nonceA := reply[1 : 1+nonceSize]
	if !hmac.Equal(reply[1+nonceSize:], proof(key, 'A', &h, h.Nonce[:], nonceA)) {
		return fmt.Errorf("handshake with rank %d: its proof of the job secret does not match (wrong job secret?): %w", h.To, transport.ErrAuth)
	}
	if _, err := rw.Write(proof(key, 'D', &h, nonceA, h.Nonce[:])); err != nil {
		return answered{fmt.Errorf("handshake with rank %d: %w", h.To, err)}
	}
	var status [1]byte
	if _, err := io.ReadFull(rw, status[:]); err != nil {
		return answered{fmt.Errorf("handshake with rank %d: reading status: %w", h.To, err)}
	}
	if status[0] != StatusOK {
		return fmt.Errorf("handshake with rank %d: refused: %s: %w", h.To, statusString(status[0]), transport.ErrAuth)
	}
	return nil
}

// AcceptHello runs the acceptor's side: check reports whether the
// peer's Hello is acceptable (StatusOK or a refusal code). It returns the
// peer's Hello once the peer has proven it knows the secret.
func AcceptHello(rw io.ReadWriter, secret []byte, check func(*Hello) byte) (Hello, error) {
	key := jobsecret.Key(secret, jobsecret.Handshake)
	h, err := readHello(rw)
	if err != nil {
		return Hello{}, err
	}
	var reply [1 + nonceSize + macSize]byte
	if st := check(&h); st != StatusOK {
		reply[0] = st
		_, _ = rw.Write(reply[:])
		if st == StatusDuplicate {
			return h, fmt.Errorf("handshake from rank %d: %w: %w", h.From, ErrDuplicate, transport.ErrAuth)
		}
		return h, fmt.Errorf("handshake from rank %d: %s (job %q, version %d): %w", h.From, statusString(st), h.JobID, h.Version, transport.ErrAuth)
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
		_, _ = rw.Write([]byte{StatusSecret})
		return h, fmt.Errorf("handshake from rank %d: proof of the job secret does not match (wrong job secret?): %w", h.From, transport.ErrAuth)
	}
	if _, err := rw.Write([]byte{StatusOK}); err != nil {
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
