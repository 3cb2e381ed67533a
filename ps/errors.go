package ps

import (
	"errors"
	"fmt"

	"github.com/gorun/gorun/transport"
)

// More sentinels (see also ErrUnknownKey, ErrShape, ErrClock, ErrWorker).
var (
	// ErrHubLost: a hub's connection broke, or it stopped answering.
	ErrHubLost = errors.New("ps: hub lost")
	// ErrBadRequest: the hub could not decode or does not accept a request.
	ErrBadRequest = errors.New("ps: bad request")
	// ErrClosed: the client was closed. It is also transport.ErrClosed
	// (and so collective.ErrClosed) under errors.Is.
	ErrClosed = fmt.Errorf("ps: client %w", transport.ErrClosed)
)

// Error codes a hub sends back. ONLY APPEND.
const (
	codeOther uint8 = iota
	codeUnknownKey
	codeShape
	codeClock
	codeWorker
	codeMismatch
	codePeerLost
	codeBadRequest
	codeAborted
)

func codeOf(err error) uint8 {
	switch {
	case errors.Is(err, ErrUnknownKey):
		return codeUnknownKey
	case errors.Is(err, ErrShape):
		return codeShape
	case errors.Is(err, ErrClock):
		return codeClock
	case errors.Is(err, ErrWorker):
		return codeWorker
	case errors.Is(err, transport.ErrSizeMismatch):
		return codeMismatch
	case errors.Is(err, transport.ErrPeerLost):
		return codePeerLost
	case errors.Is(err, ErrBadRequest):
		return codeBadRequest
	case errors.Is(err, transport.ErrAborted):
		return codeAborted
	}
	return codeOther
}

// HubError is an error a hub sent back for a request. errors.Is maps it
// onto the sentinels: ErrUnknownKey, ErrShape, ErrClock, ErrWorker,
// ErrBadRequest, and transport's ErrSizeMismatch, ErrPeerLost (a lost
// worker) and ErrAborted (a worker gave up and said why).
type HubError struct {
	Hub  int
	Code uint8
	Msg  string
}

func (e *HubError) Error() string { return fmt.Sprintf("hub %d: %s", e.Hub, e.Msg) }

// Is maps the wire code onto the sentinels.
func (e *HubError) Is(target error) bool {
	switch target {
	case ErrUnknownKey:
		return e.Code == codeUnknownKey
	case ErrShape:
		return e.Code == codeShape
	case ErrClock:
		return e.Code == codeClock
	case ErrWorker:
		return e.Code == codeWorker
	case transport.ErrSizeMismatch:
		return e.Code == codeMismatch
	case transport.ErrPeerLost:
		return e.Code == codePeerLost
	case ErrBadRequest:
		return e.Code == codeBadRequest
	case transport.ErrAborted:
		return e.Code == codeAborted
	}
	return false
}

// HubLostError names a hub that broke or went silent.
type HubLostError struct {
	Hub    int
	Addr   string
	Reason string
}

func (e *HubLostError) Error() string {
	return fmt.Sprintf("ps: hub %d at %s lost: %s", e.Hub, e.Addr, e.Reason)
}

// Is reports ErrHubLost, and transport.ErrPeerLost so that callers of the
// collective API can treat a lost hub like a lost rank.
func (e *HubLostError) Is(target error) bool {
	return target == ErrHubLost || target == transport.ErrPeerLost
}

// workerLost is the error a hub gives when a worker is gone.
func workerLost(w int, reason string) error {
	return &transport.PeerLostError{Rank: w, Reason: reason}
}
