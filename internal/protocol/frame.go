package protocol

import (
	"strings"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
)

// KnownCode reports whether c is one of frame's failure codes
// (frame.CodeProviderError to frame.CodeInvalidFrame), the codes a failed or
// cancelled frame may carry (docs/protocol.md §3). It is how a reader
// above wire checks a code that did not come through wire's decoder: a
// handler's *frame.Error, a remote link's abort. frame_test.go checks that
// it agrees with frame.Frame.Validate.
func KnownCode(c frame.Code) bool {
	return c >= frame.CodeProviderError && c <= frame.CodeInvalidFrame
}

// MaxMessageChars bounds an error message: 2,048 characters
// (docs/protocol.md §3, error.message).
const MaxMessageChars = 2048

// SanitizeMessage makes s fit for the wire as an error message: invalid
// UTF-8 becomes U+FFFD and the text is cut to MaxMessageChars characters
// on a character boundary. It is what frame.NewFailed and
// frame.NewCancelled do to their message, for the code above wire that
// builds a *frame.Error itself (the host's synthetic outcomes, the child
// SDK's terminals, the call log, remote links); frame_test.go checks that
// the two agree.
func SanitizeMessage(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= MaxMessageChars {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxMessageChars {
			return s[:i]
		}
		n++
	}
	return s
}
