package frame

import "strconv"

// Direction says which way a frame travels within a call.
type Direction uint8

// Directions of a call. The zero Direction is invalid.
const (
	// CallerToProvider frames are written by the host for its caller.
	CallerToProvider Direction = iota + 1
	// ProviderToCaller frames are written by the child's handler.
	ProviderToCaller
)

var directionNames = [...]string{CallerToProvider: "caller_to_provider", ProviderToCaller: "provider_to_caller"}

// String returns the wire name, or "Direction(n)" for an unknown value.
func (d Direction) String() string {
	if d.valid() {
		return directionNames[d]
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// valid reports whether d is one of the defined directions.
func (d Direction) valid() bool { return d == CallerToProvider || d == ProviderToCaller }

// Kind is a frame's place in the lifecycle of one direction.
type Kind uint8

// Frame kinds. The zero Kind is invalid.
const (
	// KindStarted opens a direction; its sequence is always 0.
	KindStarted Kind = iota + 1
	// KindChunk carries a payload, media, or both.
	KindChunk
	// KindCompleted ends a direction successfully, optionally with a value.
	KindCompleted
	// KindFailed ends a direction with an error.
	KindFailed
	// KindCancelled ends a direction because it was cancelled.
	KindCancelled
)

var kindNames = [...]string{KindStarted: "started", KindChunk: "chunk", KindCompleted: "completed", KindFailed: "failed", KindCancelled: "cancelled"}

// String returns the wire name, or "Kind(n)" for an unknown value.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// valid reports whether k is one of the defined kinds.
func (k Kind) valid() bool { return k >= KindStarted && k <= KindCancelled }

// IsTerminal reports whether k closes its direction.
func (k Kind) IsTerminal() bool { return k >= KindCompleted && k <= KindCancelled }

// Code classifies why a direction failed or was cancelled.
type Code uint8

// Error codes. The zero Code is invalid.
const (
	// CodeProviderError: the provider's handler failed (its own error or a panic).
	CodeProviderError Code = iota + 1
	// CodeTransportError: the stream connection broke while the child lived.
	CodeTransportError
	// CodeUnreachable: the child died, is unhealthy, or is draining.
	CodeUnreachable
	// CodeCancelled: the call was cancelled.
	CodeCancelled
	// CodeTimeout: the call's deadline passed.
	CodeTimeout
	// CodeInvalidFrame: a frame or packet broke the protocol, or the tool is unknown.
	CodeInvalidFrame
)

var codeNames = [...]string{
	CodeProviderError: "provider_error", CodeTransportError: "transport_error", CodeUnreachable: "unreachable",
	CodeCancelled: "cancelled", CodeTimeout: "timeout", CodeInvalidFrame: "invalid_frame",
}

// String returns the wire name, or "Code(n)" for an unknown value.
func (c Code) String() string {
	if c.valid() {
		return codeNames[c]
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// valid reports whether c is one of the defined codes.
func (c Code) valid() bool { return c >= CodeProviderError && c <= CodeInvalidFrame }
