package calllog

import (
	"context"
	"errors"

	"github.com/skulkrt/skulk/frame"
)

// Errors of the call log a host returns, matched with errors.Is.
var (
	// ErrParentEnded: a call was begun with a context whose running call
	// (a program) has ended; nothing was recorded. Use host.Detached for
	// work that outlives its program.
	ErrParentEnded = errors.New("calllog: the running call in the context has ended")

	// ErrJournalStart: a required journal did not keep the call's start;
	// the call is refused and its invoke must not be written.
	ErrJournalStart = errors.New("calllog: journal: the call's start was not kept")
	// ErrJournalEnd: a required journal did not confirm the call's end;
	// the *JournalError holds the outcome, and its Kept says later
	// whether it was kept.
	ErrJournalEnd = errors.New("calllog: journal: the call's end was not confirmed")
	// ErrJournalOverflow is the Cause of a *JournalError whose tree's
	// journal queue (Journal.Queue, Journal.QueueBytes) was full and
	// dropped events: no later barrier of that tree can succeed, so a
	// call retried in the same tree is refused again; Kept returns it at
	// once. Raise the queue's bounds or give the journal a faster store.
	// A store that did not answer within Journal.Timeout is a different
	// Cause, one that matches os.ErrDeadlineExceeded: that barrier failed,
	// the send is made again, and Kept waits for it.
	ErrJournalOverflow = errors.New("calllog: journal queue full: events dropped")
	// ErrCloseDropped: the host's Close stopped its journal writers with
	// events not kept (Close's context ended first, or 10 s passed when
	// it has no deadline, or the store failed meanwhile). The error says
	// how many; Losses counts them too.
	ErrCloseDropped = errors.New("calllog: close: journal events not kept")
)

// JournalError is the error of a required journal's barrier. It matches
// (errors.Is) its Op (ErrJournalStart or ErrJournalEnd) and its Cause.
type JournalError struct {
	// Op is ErrJournalStart or ErrJournalEnd.
	Op error
	// Tree and Call name the call.
	Tree string
	// Call is the call's id.
	Call string
	// Outcome is how the call ended: for ErrJournalEnd the value or error
	// the caller would have had; for a refusal, the refusal.
	Outcome Outcome
	// Cause is what the journal met, each told apart with errors.Is: the
	// store's error (ErrStoreUnusable, ErrFenced or its own), a context
	// error, the store's silence past Journal.Timeout (matching
	// os.ErrDeadlineExceeded), or the tree's events dropped by a full
	// queue (ErrJournalOverflow).
	Cause error
	// Kept, set by the host that returned the error, waits until the
	// call's end (for a refusal: the end that records it) is kept: nil
	// when it is, the journal's reason when it can no longer be, ctx.Err()
	// when ctx ends first; nil means nothing to wait for. To wait for the
	// end of a call whose error wraps a *JournalError:
	//
	//	var je *calllog.JournalError
	//	if errors.As(err, &je) && je.Kept != nil {
	//		err = je.Kept(ctx) // nil once the end is kept
	//	}
	Kept func(ctx context.Context) error
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
	// Kind is KindCompleted, KindFailed or KindCancelled; KindUnknown only in
	// what a reader makes of a tree taken over (TakeOver).
	Kind Kind
	// Result is the value of a done call; nil for none.
	Result frame.Payload
	// Error is the error of a failed call (required) or of a cancelled
	// one (optional).
	Error *frame.Error
	// Refused, on a failed outcome, classes a call refused before it
	// reached a child (see Event.Refused); "" otherwise.
	Refused string
}
