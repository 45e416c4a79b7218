package protocol

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
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

// maxIDChars bounds a call id and every id that follows its rule (tool
// ids, tree ids): 1 to 128 characters of valid UTF-8 (docs/protocol.md §3).
const maxIDChars = 128

// CheckCallID reports whether id is a valid call id, or a tool id (which
// follows the same rule): 1 to 128 characters of valid UTF-8. The error is
// the *frame.FieldError naming call_id that frame.Frame.Validate gives for
// such an id; frame_test.go checks that the two agree.
func CheckCallID(id string) error {
	switch {
	case !utf8.ValidString(id):
		return &frame.FieldError{Field: "call_id", Reason: "not valid UTF-8"}
	case id == "":
		return &frame.FieldError{Field: "call_id", Reason: "empty"}
	case len(id) > maxIDChars && utf8.RuneCountInString(id) > maxIDChars:
		// A string of at most maxIDChars bytes has at most maxIDChars characters.
		return &frame.FieldError{Field: "call_id", Reason: "too long"}
	}
	return nil
}

// CheckPayload reports whether p is a valid payload: one MessagePack map
// with a JSON form (mpack.CheckObject). The error is the *frame.FieldError
// naming payload that frame.Frame.Validate gives for such a payload;
// frame_test.go checks that the two agree.
func CheckPayload(p frame.Payload) error {
	return payloadError(mpack.CheckObject(p))
}

// payloadError turns mpack.CheckObject's error into frame's.
func payloadError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mpack.ErrType):
		return &frame.FieldError{Field: "payload", Reason: "not a map"}
	case errors.Is(err, mpack.ErrDepth):
		return &frame.FieldError{Field: "payload", Reason: "nested too deeply"}
	case errors.Is(err, mpack.ErrNotJSON):
		return &frame.FieldError{Field: "payload", Reason: "has a value with no JSON form"}
	}
	return &frame.FieldError{Field: "payload", Reason: "malformed MessagePack"}
}
