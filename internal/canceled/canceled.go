// Package canceled is the one error of the transports for a call that its
// context ended: the transport packages wrap the context's cause in Err
// (Cause), so that transport.IsCanceled and the abort frame's code
// (transport.CodeCanceled) recognise it whichever package returned it.
package canceled

import (
	"context"
	"errors"
	"fmt"
)

// Err is wrapped by every error Cause returns.
var Err = errors.New("canceled")

// Cause is the error of a call that ctx ended: Err and ctx's cause.
func Cause(ctx context.Context) error {
	return fmt.Errorf("%w: %w", Err, context.Cause(ctx))
}
