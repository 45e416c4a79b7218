// Package sequence holds the Fence that guards one direction of one call:
// it admits each frame exactly once, in order, and nothing after the
// direction's terminal (docs/protocol.md §4.2).
//
// It sits between package wire, which reads frames off a connection, and
// whatever consumes them (the child's ingress queue, the host's call): a
// frame that passes frame.Validate still has to pass its direction's fence
// before anyone acts on it. A refusal is call-scoped: the call ends with
// failed invalid_frame, other calls are untouched.
//
// Every refusal is a distinct sentinel (ErrStaleCall, ErrWrongDirection,
// ErrGap, ErrDuplicate, ErrDuplicateTerminal, ErrAfterTerminal), matched
// with errors.Is, and every one of them also matches ErrRefused.
//
// The caller direction starts at sequence 0 (the host sends the caller's
// started); the provider direction starts at 1 on the wire (the host owns
// the provider's started and hands it to its caller itself).
//
// A Fence is owned by the goroutine that reads its direction; it is not
// safe for concurrent use.
package sequence
