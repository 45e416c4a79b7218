package protocol

import "github.com/skulkrt/skulk/frame"

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
