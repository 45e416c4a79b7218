package recorder

import (
	"errors"
	"os"
)

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

// Errors the host passes on to its callers, as the Cause of a
// *calllog.JournalError or from Close and Program. They are not part of
// calllog's API: ErrStepsRunning and ErrCloseTimeout come back also
// matching the context's error that ended the wait (ctxStopped), which is
// what a caller of the host matches.
var (
	// ErrStepsRunning: a program stopped waiting for its steps because its
	// context was done; it ends cancelled once its last step ends.
	ErrStepsRunning = errors.New("calllog: steps still running")
	// ErrCloseTimeout: the host's Close was done waiting before every
	// goroutine of its call log had returned (an observer or store that
	// ignores its context).
	ErrCloseTimeout = errors.New("calllog: close: goroutines still running")
	// ErrNoAnswer: the store did not answer a send within the journal's
	// timeout. The send is waited for and then made again. A user of the
	// host, who cannot name it, matches os.ErrDeadlineExceeded: an I/O
	// deadline passed (deadlineError). It matches neither
	// context.DeadlineExceeded, which says a call's own context ended, nor
	// calllog.ErrJournalOverflow, the one cause after which a tree's
	// journal can never confirm again.
	ErrNoAnswer error = &deadlineError{"calllog: store did not answer within the journal timeout"}
)

// deadlineError is an error of its own identity that also matches
// os.ErrDeadlineExceeded and, like a net.Error, says it is a timeout.
type deadlineError struct{ msg string }

func (e *deadlineError) Error() string        { return e.msg }
func (e *deadlineError) Is(target error) bool { return target == os.ErrDeadlineExceeded }
func (e *deadlineError) Timeout() bool        { return true }

// ctxStopped is err (ErrStepsRunning or ErrCloseTimeout), said when the
// wait was cut short by a done context, that also matches that context's
// error: a user of the host, who cannot name err, matches
// context.Canceled or context.DeadlineExceeded. Its message is err's.
type ctxStopped struct{ err, ctx error }

func (e *ctxStopped) Error() string   { return e.err.Error() }
func (e *ctxStopped) Unwrap() []error { return []error{e.err, e.ctx} }

// RedactedValue is what a redacted key's value is replaced with in the
// kept form of a payload (calllog.Options.Redact).
const RedactedValue = "[redacted]"
