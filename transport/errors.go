package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/internal/canceled"
)

// Sentinels that callers branch on with errors.Is.
var (
	// ErrPeerLost: a peer died, was declared dead by gossip, closed its
	// connection without saying goodbye, or left while it was still needed.
	ErrPeerLost = errors.New("peer lost")
	// ErrSizeMismatch: ranks issued the same collective with different
	// buffer lengths, element types, ops or roots, or different collectives.
	ErrSizeMismatch = errors.New("collective mismatch between ranks")
	// ErrClosed: the transport (or the Comm above it) was closed.
	ErrClosed = errors.New("closed")
	// ErrAuth: a handshake failed its job or secret check.
	ErrAuth = errors.New("authentication failed")
	// ErrAborted: a peer gave up a collective (its context was cancelled,
	// or it failed on its own).
	ErrAborted = errors.New("collective aborted by a peer")
)

// PeerLostError names the lost peer and why it is considered lost.
type PeerLostError struct {
	Rank   int
	Reason string
	Cause  error // what was found, if it is an error (ErrAuth, say); may be nil
}

// Unwrap returns the cause.
func (e *PeerLostError) Unwrap() error { return e.Cause }

func (e *PeerLostError) Error() string {
	return fmt.Sprintf("rank %d lost: %s", e.Rank, e.Reason)
}

// Is reports ErrPeerLost.
func (e *PeerLostError) Is(target error) bool { return target == ErrPeerLost }

// Code says why a peer aborted; it crosses the wire in an abort frame.
type Code uint8

// ONLY APPEND TO THIS LIST: the values cross the wire.
const (
	CodeOther Code = iota
	CodeMismatch
	CodePeerLost
	CodeCanceled
	CodeClosed
)

// RemoteError is an abort received from a peer.
type RemoteError struct {
	Rank int // the rank that aborted
	Code Code
	Msg  string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("rank %d aborted: %s", e.Rank, e.Msg)
}

// Is maps the wire code back onto the sentinels.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrAborted:
		return true
	case ErrSizeMismatch:
		return e.Code == CodeMismatch
	case ErrPeerLost:
		return e.Code == CodePeerLost
	}
	return false
}

// codeOf picks the wire code for a local error.
func codeOf(err error) Code {
	switch {
	case errors.Is(err, ErrSizeMismatch):
		return CodeMismatch
	case errors.Is(err, ErrPeerLost):
		return CodePeerLost
	case errors.Is(err, ErrClosed):
		return CodeClosed
	case errors.Is(err, canceled.Err):
		return CodeCanceled
	}
	return CodeOther
}

// MismatchError describes how a peer's frame disagreed with what this rank
// expected.
type MismatchError struct {
	Peer int
	What string
	Mine any
	Got  any
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rank %d disagrees on %s: this rank has %v, it has %v", e.Peer, e.What, e.Mine, e.Got)
}

// Is reports ErrSizeMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrSizeMismatch }

// EncodeAbort is the payload of an abort frame that carries err: its
// code and its text. Services beside the rank mesh (ParamHub) use it too.
func EncodeAbort(err error) []byte { return abortPayload(err) }

// DecodeAbort turns the payload of an abort frame from rank from into a
// RemoteError.
func DecodeAbort(from int, p []byte) error { return parseAbort(from, p) }

func abortPayload(err error) []byte {
	msg := err.Error()
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	return append([]byte{byte(codeOf(err))}, msg...)
}

func parseAbort(from int, p []byte) error {
	if len(p) == 0 {
		return &RemoteError{Rank: from, Code: CodeOther, Msg: "no reason given"}
	}
	return &RemoteError{Rank: from, Code: Code(p[0]), Msg: string(p[1:])}
}

// IsCanceled reports whether err came from a cancelled context (here or, via
// an abort, on a peer).
func IsCanceled(err error) bool {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code == CodeCanceled
	}
	return errors.Is(err, canceled.Err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
