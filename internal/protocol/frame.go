package protocol

import "github.com/skulkrt/skulk/frame"

// KnownCode reports whether c is one of frame's failure codes
// (frame.CodeProviderError to frame.CodeInvalidFrame), the codes a failed or
// cancelled frame may carry (docs/protocol.md §3). It is how a reader
// above wire checks a code that did not come through wire's decoder: a
// handler's *frame.Error, a remote link's abort. frame_test.go checks that
// it agrees with frame.Frame.Validate.
func KnownCode(c frame.Code) bool {
	return c >= frame.CodeProviderError && c <= frame.CodeInvalidFrame
}
