package calllog

import (
	"context"
	"errors"

	"github.com/skulkrt/skulk/frame"
)

// Recorder and journal errors, matched with errors.Is.
var (
	// ErrClosed: the recorder was closed; no call can begin.
	ErrClosed = errors.New("calllog: recorder closed")
	// ErrEnded: End was called on a call that has ended already.
	ErrEnded = errors.New("calllog: call already ended")
	// ErrParentEnded: a call was begun with a context whose running call
	// has ended; nothing was recorded. Use Detached for work that outlives
	// its call.
	ErrParentEnded = errors.New("calllog: the running call in the context has ended")
	// ErrStepsRunning: End stopped waiting for the call's steps because its
	// context was done; the call ends cancelled once its last step ends.
	ErrStepsRunning = errors.New("calllog: steps still running")
	// ErrBadOutcome: End was given an outcome whose Kind is not done,
	// failed or cancelled.
	ErrBadOutcome = errors.New("calllog: outcome kind must be done, failed or cancelled")
	// ErrCloseTimeout: Close was done waiting before every goroutine had
	// returned (an observer or store that ignores its context).
	ErrCloseTimeout = errors.New("calllog: close: goroutines still running")
	// ErrNoJournal: the recorder has no journal to take a tree over with.
	ErrNoJournal = errors.New("calllog: no journal")

	// ErrJournalPolicy: a call or program tried to replace or weaken its
	// tree's journal. The call is refused (recorded, never run).
	ErrJournalPolicy = errors.New("calllog: journal policy: a call cannot replace or weaken its tree's journal")
	// ErrJournalStart: a required journal did not keep the call's start;
	// the call is refused and its invoke must not be written.
	ErrJournalStart = errors.New("calllog: journal: the call's start was not kept")
	// ErrJournalEnd: a required journal did not confirm the call's end;
	// the *JournalError holds the outcome, and Settle says later whether
	// it was kept.
	ErrJournalEnd = errors.New("calllog: journal: the call's end was not confirmed")
	// ErrNoAnswer: the store did not answer a send within the journal's
	// timeout. The send is waited for and then made again.
	ErrNoAnswer = errors.New("calllog: store did not answer within the journal timeout")
	// ErrJournalOverflow: the tree's journal queue was full and events
	// were dropped; no later event of the tree can be confirmed.
	ErrJournalOverflow = errors.New("calllog: journal queue full: events dropped")
)

// JournalError is the error of a required journal's barrier or of the
// journal policy. It matches (errors.Is) its Op (ErrJournalPolicy,
// ErrJournalStart or ErrJournalEnd) and its Cause.
type JournalError struct {
	// Op is ErrJournalPolicy, ErrJournalStart or ErrJournalEnd.
	Op error
	// Tree and Call name the call.
	Tree string
	// Call is the call's id.
	Call string
	// Outcome is how the call ended: for ErrJournalEnd the value or error
	// the caller would have had; for a refusal, the refusal.
	Outcome Outcome
	// Cause is what the journal met: ErrNoAnswer, ErrStoreUnusable,
	// ErrFenced, ErrJournalOverflow, a context error, or the store's own
	// error; nil for a policy refusal.
	Cause error

	w   *journalWriter // for Settle; nil without a journal
	seq uint64         // the call's end event's seq
}

func (e *JournalError) Error() string {
	s := e.Op.Error()
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns Op and Cause.
func (e *JournalError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Op}
	}
	return []error{e.Op, e.Cause}
}

// Outcome is how a call ended.
type Outcome struct {
	// Kind is KindDone, KindFailed or KindCancelled.
	Kind Kind
	// Result is the value of a done call; nil for none.
	Result frame.Payload
	// Error is the error of a failed call (required) or of a cancelled
	// one (optional).
	Error *ErrorInfo
	// Refused, on a failed outcome, classes a call refused before it
	// reached a child (see Event.Refused); "" otherwise.
	Refused string
}

// Done is the outcome of a call that completed with result (nil for none).
func Done(result frame.Payload) Outcome { return Outcome{Kind: KindDone, Result: result} }

// Failed is the outcome of a failed call. The message goes through
// frame.SanitizeMessage.
func Failed(code frame.Code, message string, synthetic bool) Outcome {
	return Outcome{Kind: KindFailed, Error: &ErrorInfo{Code: code, Message: frame.SanitizeMessage(message), Synthetic: synthetic}}
}

// Cancelled is the outcome of a cancelled call; message may be empty.
func Cancelled(message string) Outcome {
	o := Outcome{Kind: KindCancelled}
	if message != "" {
		o.Error = &ErrorInfo{Code: frame.CodeCancelled, Message: frame.SanitizeMessage(message)}
	}
	return o
}

// Refused is the outcome of a call refused before it reached a child:
// class names why ("unknown_tool", "schema", "pool_down", ...), code is the
// code the caller's error carries and err's message is kept (host errors
// never hold user data).
func Refused(class string, code frame.Code, err error) Outcome {
	msg := class
	if err != nil {
		msg = err.Error()
	}
	o := Failed(code, msg, false)
	o.Refused = class
	return o
}

// OutcomeOf is the outcome a provider terminal frame gives (completed,
// failed or cancelled, synthetic or not). Any other frame gives a failed
// invalid_frame outcome.
func OutcomeOf(f frame.Frame) Outcome {
	switch f.Kind {
	case frame.KindCompleted:
		return Done(f.Payload)
	case frame.KindFailed:
		if f.Error != nil {
			return Failed(f.Error.Code, f.Error.Message, f.Synthetic)
		}
	case frame.KindCancelled:
		o := Cancelled("")
		if f.Error != nil {
			o = Cancelled(f.Error.Message)
			o.Error.Synthetic = f.Synthetic
		}
		return o
	}
	return Failed(frame.CodeInvalidFrame, "calllog: outcome from a frame that is not a terminal", true)
}

// OutcomeOfError is the outcome a Go error gives: nil is done, a context
// cancellation is cancelled, a *frame.Error keeps its code, anything else
// is a failed provider_error with the error's message.
func OutcomeOfError(err error) Outcome {
	var fe *frame.Error
	switch {
	case err == nil:
		return Done(nil)
	case errors.Is(err, context.Canceled):
		return Cancelled(err.Error())
	case errors.As(err, &fe):
		if fe.Code == frame.CodeCancelled {
			return Cancelled(fe.Message)
		}
		return Failed(fe.Code, fe.Message, false)
	}
	return Failed(frame.CodeProviderError, err.Error(), false)
}

// Err returns the outcome as the error a caller gets: nil when done, else a
// *frame.Error.
func (o Outcome) Err() error {
	switch o.Kind {
	case KindDone:
		return nil
	case KindCancelled:
		if o.Error == nil {
			return &frame.Error{Code: frame.CodeCancelled}
		}
	}
	if o.Error == nil {
		return &frame.Error{Code: frame.CodeProviderError}
	}
	return &frame.Error{Code: o.Error.Code, Message: o.Error.Message}
}
