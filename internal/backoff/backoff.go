// Package backoff paces the retries of a dial to a peer that is not
// listening yet: a pure function of the attempt's number, shared by the
// rank mesh (transport/tcp) and the dials of services beside it
// (transport/wire's DialAuth).
package backoff

import "time"

// The pauses the rank mesh uses unless configured otherwise, and DialAuth
// always.
const (
	DefaultPause    = 20 * time.Millisecond
	DefaultMaxPause = 500 * time.Millisecond
)

// Pause is the pause before attempt (from 0): step more each time, up to
// limit.
func Pause(attempt int, step, limit time.Duration) time.Duration {
	if step <= 0 || attempt >= int(limit/step) {
		return limit
	}
	return min(time.Duration(attempt+1)*step, limit)
}
