package coalesce

import "errors"

// ErrClosed is returned by a Write after Close.
var ErrClosed = errors.New("coalesce: writer closed")

// DetachedError is what Write returns when its context ended while the
// packet's attachment was still being written. The packet is not taken
// back (part of it may be on the wire already): the Writer writes it whole
// from its own copy of the bytes not yet written (unless the connection
// fails, as for any packet), so the caller may reuse its buffer at once,
// and packets queued after it follow it. Cause is context.Cause of the
// context; errors.Is sees through to it.
type DetachedError struct {
	Cause error
}

func (e *DetachedError) Error() string {
	return "coalesce: attachment left to the writer: " + e.Cause.Error()
}

// Unwrap returns Cause.
func (e *DetachedError) Unwrap() error { return e.Cause }
