package recorder

import "errors"

// Errors of the recorder that stay inside the module: the host maps
// ErrClosed to its own, and ignores the others (it ends each call once).
var (
	// ErrClosed: the recorder was closed; no call can begin.
	ErrClosed = errors.New("recorder: closed")
	// ErrEnded: End or Finish was called on a call that has ended already.
	ErrEnded = errors.New("recorder: call already ended")
	// ErrBadOutcome: End was given an outcome whose Kind is not done,
	// failed or cancelled.
	ErrBadOutcome = errors.New("recorder: outcome kind must be done, failed or cancelled")
)
