package cli

import (
	"errors"
	"fmt"

	"github.com/skulkrt/skulk/frame"
)

// Exit statuses of skulk-host. Each outcome of a call has its own status so
// scripts can tell them apart without parsing output; docs/cli.md lists
// them.
const (
	// ExitOK: the command did what was asked (for call: the provider
	// completed).
	ExitOK = 0
	// ExitFailure: anything else went wrong on the host's side (an input
	// file that cannot be read, a media file that cannot be written, a
	// benchmark step that failed).
	ExitFailure = 1
	// ExitUsage: the command line is wrong (unknown command or flag, a
	// missing argument, a flag value that does not parse).
	ExitUsage = 2
	// ExitStart: the child could not be started (no such program, it
	// exited during the handshake, it speaks no protocol version we do).
	ExitStart = 3
	// ExitRefused: the host refused the call before sending anything (an
	// unknown tool, arguments or an input line against the tool's schema).
	ExitRefused = 4

	// ExitProviderError … ExitInvalidFrame: the call ended with failed (or
	// cancelled) carrying that error code.
	ExitProviderError  = 10
	ExitTransportError = 11
	ExitUnreachable    = 12
	ExitCancelled      = 13
	ExitTimeout        = 14
	ExitInvalidFrame   = 15
)

// ExitForCode returns the exit status of a call that ended with code.
func ExitForCode(code frame.Code) int {
	switch code {
	case frame.CodeProviderError:
		return ExitProviderError
	case frame.CodeTransportError:
		return ExitTransportError
	case frame.CodeUnreachable:
		return ExitUnreachable
	case frame.CodeCancelled:
		return ExitCancelled
	case frame.CodeTimeout:
		return ExitTimeout
	case frame.CodeInvalidFrame:
		return ExitInvalidFrame
	}
	return ExitFailure
}

// ExitForTerminal returns the exit status of a call whose provider terminal
// is f: ExitOK for completed, the code's status for failed, ExitCancelled for
// cancelled (with or without an error).
func ExitForTerminal(f frame.Frame) int {
	switch f.Kind {
	case frame.KindCompleted:
		return ExitOK
	case frame.KindCancelled:
		return ExitCancelled
	case frame.KindFailed:
		if f.Error != nil {
			return ExitForCode(f.Error.Code)
		}
	}
	return ExitFailure
}

// exitError is an error that carries the exit status it should end the
// command with. Its message is one line, meant for a person.
type exitError struct {
	status int
	msg    string
	cause  error // what callers match with errors.Is; nil for none
}

func (e *exitError) Error() string { return e.msg }

// Unwrap returns the cause the error was made with, if any.
func (e *exitError) Unwrap() error { return e.cause }

// usageErr returns an error that ends the command with ExitUsage.
func usageErr(format string, args ...any) error {
	return &exitError{status: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

// statusErr returns an error that ends the command with status.
func statusErr(status int, format string, args ...any) error {
	return &exitError{status: status, msg: fmt.Sprintf(format, args...)}
}

// statusOf returns the exit status an error should end the command with.
func statusOf(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.status
	}
	return ExitFailure
}

// exitTable lists every exit status with its meaning, for help texts.
var exitTable = []struct {
	status  int
	meaning string
}{
	{ExitOK, "completed (the provider's terminal was completed)"},
	{ExitFailure, "host-side error (input file, --save-media, bench step)"},
	{ExitUsage, "usage error (unknown command or flag, missing argument)"},
	{ExitStart, "the child could not be started"},
	{ExitRefused, "call refused before sending (unknown tool, schema)"},
	{ExitProviderError, "failed: provider_error"},
	{ExitTransportError, "failed: transport_error"},
	{ExitUnreachable, "failed: unreachable (the child died)"},
	{ExitCancelled, "cancelled"},
	{ExitTimeout, "failed: timeout"},
	{ExitInvalidFrame, "failed: invalid_frame"},
}
