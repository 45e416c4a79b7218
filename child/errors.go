package child

import (
	"errors"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
)

// Causes of a call's cancellation. A handler finds out why its context was
// cancelled with context.Cause(ctx) and errors.Is. The child writes the
// matching terminal for the call (docs/protocol.md §6 item 4, the terminal
// by cause)
// unless the handler wrote its own first.
var (
	// ErrCallerCancelled: the caller sent cancelled or failed. Terminal:
	// cancelled.
	ErrCallerCancelled = errors.New("child: caller cancelled the call")
	// ErrCancelRequested: the host sent a control cancel for the call.
	// Terminal: cancelled.
	ErrCancelRequested = errors.New("child: host cancelled the call")
	// ErrDrained: the child was drained and the call outlived the drain's
	// grace. Terminal: cancelled.
	ErrDrained = errors.New("child: drain grace exceeded")
	// ErrTimeout: the invoke's timeout_ms passed. Terminal: failed timeout.
	ErrTimeout = errors.New("child: call deadline exceeded")
	// ErrInvalidInput: the caller sent an invalid frame. Terminal: failed
	// invalid_frame, then the connection is closed.
	ErrInvalidInput = errors.New("child: invalid caller frame")
	// ErrConnClosed: the stream connection closed or broke, or the host
	// is gone (the control connection reached EOF, or Serve's context was
	// cancelled; the message says "child: host gone"). No terminal can be
	// written.
	ErrConnClosed = errors.New("child: stream connection closed")
)

// errNotHosted: Run was started outside a Skulk host (the SKULK_*
// environment or fds 3 and 4 are missing); Run says so and returns 2.
var errNotHosted = protocol.ErrNotHosted

// errHostGone is the ErrConnClosed of every call when the host is gone.
var errHostGone = &kindError{"child: host gone", ErrConnClosed}

// errToolsNotOffered: a list of Options.ToolUpdates came while the host's
// startup did not offer tools_updates; the list is logged and dropped.
var errToolsNotOffered = errors.New("child: the host's startup did not offer tools_updates")

// errHandlerReturned cancels a call's context once its handler returned; it
// is not a cause of anything.
var errHandlerReturned = errors.New("child: handler returned")

// Errors a Stream returns to its handler.
var (
	// ErrTerminated: the call already has its terminal (the handler wrote
	// one, or the child wrote one for it), so nothing more can be sent. A
	// Call made through the host returns an error matching it from Send
	// or CloseSend after its direction was closed, or after its terminal.
	ErrTerminated = errors.New("child: call already has its terminal")
)

// Errors Serve returns when the start failed. Run maps them to exit
// status 2.
var (
	// ErrStartup is matched (errors.Is) when the host's startup was
	// unusable: none arrived within Options.StartupTimeout, it chose a
	// protocol version the child did not offer, or the host's first
	// control packet was not a startup the child could read (malformed, a
	// field of the wrong type, over the limits, or another packet). The
	// message says which; a caller acts on all three alike.
	ErrStartup = errors.New("child: the host's startup was unusable")
)

// kindError is an error with a message of its own that matches
// (errors.Is) the sentinel it is a kind of.
type kindError struct {
	msg string
	of  error
}

func (e *kindError) Error() string { return e.msg }

// Is makes a kindError match its sentinel.
func (e *kindError) Is(target error) bool { return target == e.of }

// The ways a startup is unusable (ErrStartup).
var (
	// errNoStartup: no startup packet arrived within Options.StartupTimeout.
	errNoStartup = &kindError{"child: no startup from the host in time", ErrStartup}
	// errVersion: the host's startup chose a protocol version the child did
	// not offer.
	errVersion = &kindError{"child: host chose a protocol version this child does not speak", ErrStartup}
	// errBadStartup: the host's first control packet was not a startup the
	// child could read.
	errBadStartup = &kindError{"child: the host sent no valid startup", ErrStartup}
)

// causeTerminal returns the terminal frame kind and error the child writes
// for a call cancelled by cause, and ok=false when nothing is to be written.
func causeTerminal(cause error) (kind frame.Kind, code frame.Code, msg string, ok bool) {
	switch {
	case errors.Is(cause, ErrConnClosed):
		return 0, 0, "", false
	case errors.Is(cause, ErrTimeout):
		return frame.KindFailed, frame.CodeTimeout, "deadline exceeded", true
	case errors.Is(cause, ErrInvalidInput):
		return frame.KindFailed, frame.CodeInvalidFrame, "invalid caller frame", true
	case errors.Is(cause, ErrCallerCancelled):
		return frame.KindCancelled, frame.CodeCancelled, "cancelled by the caller", true
	case errors.Is(cause, ErrCancelRequested):
		return frame.KindCancelled, frame.CodeCancelled, "cancelled by the host", true
	case errors.Is(cause, ErrDrained):
		return frame.KindCancelled, frame.CodeCancelled, "child drained", true
	}
	return frame.KindCancelled, frame.CodeCancelled, "cancelled", true
}
