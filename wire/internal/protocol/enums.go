package protocol

import "github.com/skulkrt/skulk/frame"

// ParseKind returns the frame.Kind named s on the wire (docs/protocol.md
// §3). An unknown name gives a *frame.FieldError for "kind", which matches
// frame.ErrInvalid.
func ParseKind(s string) (frame.Kind, error) {
	for k := frame.KindStarted; k <= frame.KindCancelled; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, &frame.FieldError{Field: "kind", Reason: "unknown value"}
}

// ParseCode returns the frame.Code named s on the wire (docs/protocol.md
// §3). An unknown name gives a *frame.FieldError for "error.code", which
// matches frame.ErrInvalid.
func ParseCode(s string) (frame.Code, error) {
	for c := frame.CodeProviderError; c <= frame.CodeInvalidFrame; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, &frame.FieldError{Field: "error.code", Reason: "unknown value"}
}
