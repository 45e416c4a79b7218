package frame

import (
	"errors"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame/mpack"
)

// Field bounds of docs/protocol.md §3 (frame, inline media, error). Lengths
// in characters count Unicode code points.
const (
	// maxCallIDChars bounds a call id (at least 1 character).
	maxCallIDChars = 128
	// maxMessageChars bounds an error message.
	maxMessageChars = 2048
	// maxMediaTypeChars bounds an inline media type.
	maxMediaTypeChars = 256
)

// ErrInvalid is matched (errors.Is) by every validation error of this
// package; the concrete error is a *FieldError.
var ErrInvalid = errors.New("frame: invalid")

// FieldError says which field of a frame broke which rule. Its message names
// the field and the rule and never includes the field's value, so it is safe
// to log and to send to a peer.
type FieldError struct {
	// Field is the wire name of the field, dotted for nested ones
	// ("media.sample_rate", "error.code").
	Field string
	// Reason describes the rule that was broken.
	Reason string
}

func (e *FieldError) Error() string { return "frame: " + e.Field + ": " + e.Reason }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, reason string) error { return &FieldError{Field: field, Reason: reason} }

// Error is how a call, or one direction of it, failed or was cancelled:
// the error of a failed or cancelled frame, and the one failure type of
// Skulk. The host's Call.Wait and Recv, the child SDK's calls through the
// host and the call log all give a *Error; match it with errors.As (the
// host's may come wrapped, to match the call context's error too).
type Error struct {
	// Code classifies the failure.
	Code Code
	// Message is a human-readable explanation, at most 2,048
	// characters of valid UTF-8 (NewFailed and NewCancelled cut a message
	// to fit); it may be empty.
	Message string
	// Synthetic is true when the outcome was made up in place of the
	// provider's: by the host because the child died, hung, timed out or
	// broke the protocol, or by the child SDK because its call connection
	// broke. It never travels on the wire (a frame's Synthetic says the
	// same of the frame).
	Synthetic bool
}

// Error returns the code and the message, marked "(synthetic)" when the
// outcome was made up.
func (e *Error) Error() string {
	s := e.Code.String()
	if e.Synthetic {
		s = "(synthetic) " + s
	}
	if e.Message == "" {
		return s
	}
	return s + ": " + e.Message
}

// sanitizeMessage makes s fit for the wire: invalid UTF-8 becomes U+FFFD and
// the text is cut to 2,048 characters on a character boundary. The code
// above wire has its copy (internal/protocol.SanitizeMessage), tested
// against NewFailed.
func sanitizeMessage(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxMessageChars {
		return s
	}
	n := 0
	for i := range s {
		if n == maxMessageChars {
			return s[:i]
		}
		n++
	}
	return s
}

func checkChars(field, s string, min, max int) error {
	if !utf8.ValidString(s) {
		return fieldErr(field, "not valid UTF-8")
	}
	if len(s) < min {
		return fieldErr(field, "empty")
	}
	// A string of at most max bytes has at most max characters.
	if len(s) > max && utf8.RuneCountInString(s) > max {
		return fieldErr(field, "too long")
	}
	return nil
}

// checkCallID reports whether id is a valid call id: 1 to 128 characters of
// valid UTF-8. wire and the code above it have their copies, tested against
// Frame.Validate.
func checkCallID(id string) error { return checkChars("call_id", id, 1, maxCallIDChars) }

// Media is the media attached to a chunk: *InlineMedia or *BlobMedia.
type Media interface {
	validate() error
}

// InlineMedia is media whose bytes travel with the frame, as the packet's
// raw attachment (never inside the header, never base64).
type InlineMedia struct {
	// Data is the media's bytes. Empty data is allowed.
	Data []byte
	// MediaType is the IANA media type, e.g. "audio/pcm"; required, at
	// most 256 characters.
	MediaType string
	// Codec names the codec; empty means not given.
	Codec string
	// SampleRate in Hz; 0 means not given (a given one is > 0).
	SampleRate int64
	// Channels; 0 means not given (a given one is > 0).
	Channels int64
	// TimestampSeconds is where the media starts; nil means not given,
	// a given one is finite and ≥ 0.
	TimestampSeconds *float64
	// DurationSeconds is how long the media lasts; nil means not given,
	// a given one is finite and ≥ 0.
	DurationSeconds *float64
}

func (m *InlineMedia) validate() error {
	if m.MediaType == "" {
		return fieldErr("media.media_type", "required")
	}
	if err := checkChars("media.media_type", m.MediaType, 1, maxMediaTypeChars); err != nil {
		return err
	}
	if !utf8.ValidString(m.Codec) {
		return fieldErr("media.codec", "not valid UTF-8")
	}
	if m.SampleRate < 0 {
		return fieldErr("media.sample_rate", "must be > 0")
	}
	if m.Channels < 0 {
		return fieldErr("media.channels", "must be > 0")
	}
	if err := checkSeconds("media.timestamp_seconds", m.TimestampSeconds); err != nil {
		return err
	}
	return checkSeconds("media.duration_seconds", m.DurationSeconds)
}

func checkSeconds(field string, v *float64) error {
	if v == nil {
		return nil
	}
	if math.IsNaN(*v) || math.IsInf(*v, 0) {
		return fieldErr(field, "must be finite")
	}
	if *v < 0 {
		return fieldErr(field, "must be >= 0")
	}
	return nil
}

// BlobMedia is a reference to an immutable blob held elsewhere. Skulk passes
// it on and never resolves it.
type BlobMedia struct {
	// BlobID identifies the blob; required.
	BlobID string
	// SizeBytes is the blob's size, ≥ 0.
	SizeBytes int64
	// SHA256 is the blob's digest as 64 lowercase hex digits.
	SHA256 string
	// MediaType is the blob's media type; required.
	MediaType string
}

// isSHA256Hex reports whether s is 64 lowercase hex digits. (A regexp
// would do, but compiling it at init would add to every provider's start,
// and would be most of frame's init.)
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (m *BlobMedia) validate() error {
	if err := checkChars("media.blob_id", m.BlobID, 1, math.MaxInt); err != nil {
		return err
	}
	if m.SizeBytes < 0 {
		return fieldErr("media.size_bytes", "must be >= 0")
	}
	if !isSHA256Hex(m.SHA256) {
		return fieldErr("media.sha256", "must be 64 lowercase hex digits")
	}
	if err := checkChars("media.media_type", m.MediaType, 1, math.MaxInt); err != nil {
		return err
	}
	return nil
}

// Frame is one sequenced frame of one direction of one call.
//
// The zero Frame is invalid. Build frames with the constructors (NewStarted,
// NewChunk, NewCompleted, NewFailed, NewCancelled), which validate what they
// build, or fill the fields and call Validate.
type Frame struct {
	// CallID names the call: 1 to 128 characters.
	CallID string
	// Direction says who wrote the frame.
	Direction Direction
	// Sequence numbers the frames of one direction from 0 (started).
	Sequence uint64
	// Kind is the frame's place in the lifecycle.
	Kind Kind
	// Synthetic is true only on a frame the host made up in place of the
	// provider (the child crashed, timed out or broke the protocol). Such
	// frames never travel on the wire.
	Synthetic bool
	// Payload is a JSON object, or nil when absent.
	Payload Payload
	// Media is *InlineMedia, *BlobMedia, or nil.
	Media Media
	// Error is the outcome of a failed or cancelled frame, or nil.
	Error *Error
}

// Validate checks every field constraint (docs/protocol.md §3) and the
// lifecycle shape (§4.1). The error, if any, is a *FieldError naming the
// first field found at fault; it never includes user data.
func (f *Frame) Validate() error {
	if err := checkCallID(f.CallID); err != nil {
		return err
	}
	if !f.Direction.valid() {
		return fieldErr("direction", "unknown value")
	}
	if !f.Kind.valid() {
		return fieldErr("kind", "unknown value")
	}
	if (f.Sequence == 0) != (f.Kind == KindStarted) {
		return fieldErr("sequence", "must be 0 exactly when kind is started")
	}
	if f.Payload != nil {
		if err := checkPayload(f.Payload); err != nil {
			return err
		}
	}
	if f.Media != nil {
		if err := checkMedia(f.Media); err != nil {
			return err
		}
	}
	if f.Error != nil {
		if !f.Error.Code.valid() {
			return fieldErr("error.code", "unknown value")
		}
		if err := checkChars("error.message", f.Error.Message, 0, maxMessageChars); err != nil {
			return err
		}
	}
	return f.checkShape()
}

func checkMedia(m Media) error {
	switch v := m.(type) {
	case *InlineMedia:
		if v == nil {
			return fieldErr("media", "nil inline media")
		}
	case *BlobMedia:
		if v == nil {
			return fieldErr("media", "nil blob media")
		}
	}
	return m.validate()
}

// checkShape applies the lifecycle shape table.
func (f *Frame) checkShape() error {
	hasPayload, hasMedia, hasError := f.Payload != nil, f.Media != nil, f.Error != nil
	switch f.Kind {
	case KindStarted:
		switch {
		case hasPayload:
			return fieldErr("payload", "not allowed on started")
		case hasMedia:
			return fieldErr("media", "not allowed on started")
		case hasError:
			return fieldErr("error", "not allowed on started")
		}
	case KindChunk:
		if !hasPayload && !hasMedia {
			return fieldErr("payload", "chunk needs a payload or media")
		}
		if hasError {
			return fieldErr("error", "not allowed on chunk")
		}
	case KindCompleted:
		if hasMedia {
			return fieldErr("media", "not allowed on completed")
		}
		if hasError {
			return fieldErr("error", "not allowed on completed")
		}
	case KindFailed:
		switch {
		case hasPayload:
			return fieldErr("payload", "not allowed on failed")
		case hasMedia:
			return fieldErr("media", "not allowed on failed")
		case !hasError:
			return fieldErr("error", "required on failed")
		case f.Error.Code == CodeCancelled:
			return fieldErr("error.code", "failed must not carry cancelled")
		}
	case KindCancelled:
		switch {
		case hasPayload:
			return fieldErr("payload", "not allowed on cancelled")
		case hasMedia:
			return fieldErr("media", "not allowed on cancelled")
		case hasError && f.Error.Code != CodeCancelled:
			return fieldErr("error.code", "cancelled must carry cancelled")
		}
	}
	return nil
}

func build(f Frame) (Frame, error) {
	if err := f.Validate(); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// NewStarted returns the started frame (sequence 0) of a direction.
func NewStarted(callID string, dir Direction) (Frame, error) {
	return build(Frame{CallID: callID, Direction: dir, Kind: KindStarted})
}

// NewChunk returns a chunk carrying payload, media, or both (at least one).
// seq must be ≥ 1.
func NewChunk(callID string, dir Direction, seq uint64, payload Payload, media Media) (Frame, error) {
	return build(Frame{CallID: callID, Direction: dir, Sequence: seq, Kind: KindChunk, Payload: payload, Media: media})
}

// NewCompleted returns a completed terminal with an optional final value
// (nil for none). seq must be ≥ 1.
func NewCompleted(callID string, dir Direction, seq uint64, result Payload) (Frame, error) {
	return build(Frame{CallID: callID, Direction: dir, Sequence: seq, Kind: KindCompleted, Payload: result})
}

// NewFailed returns a failed terminal. The message is made fit for the
// wire: invalid UTF-8 becomes U+FFFD and the text is cut to 2,048
// characters on a character boundary. code must not be CodeCancelled (use
// NewCancelled).
func NewFailed(callID string, dir Direction, seq uint64, code Code, message string) (Frame, error) {
	return build(Frame{CallID: callID, Direction: dir, Sequence: seq, Kind: KindFailed,
		Error: &Error{Code: code, Message: sanitizeMessage(message)}})
}

// NewCancelled returns a cancelled terminal. An empty message gives a frame
// with no error; otherwise the error has code cancelled and the sanitized
// message.
func NewCancelled(callID string, dir Direction, seq uint64, message string) (Frame, error) {
	f := Frame{CallID: callID, Direction: dir, Sequence: seq, Kind: KindCancelled}
	if message != "" {
		f.Error = &Error{Code: CodeCancelled, Message: sanitizeMessage(message)}
	}
	return build(f)
}

// checkPayload reports whether p is a valid payload, as a *FieldError
// naming the field. wire and the code above it have their copies, tested
// against Frame.Validate.
func checkPayload(p []byte) error {
	switch err := mpack.CheckObject(p); {
	case err == nil:
		return nil
	case errors.Is(err, mpack.ErrType):
		return fieldErr("payload", "not a map")
	case errors.Is(err, mpack.ErrDepth):
		return fieldErr("payload", "nested too deeply")
	case errors.Is(err, mpack.ErrNotJSON):
		return fieldErr("payload", "has a value with no JSON form")
	default:
		return fieldErr("payload", "malformed MessagePack")
	}
}
