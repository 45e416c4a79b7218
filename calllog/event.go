package calllog

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// format is the version of the event JSON form written by MarshalJSON and
// the only one UnmarshalJSON reads. docs/events.md specifies it.
const format = 1

// Kind says what an event records.
type Kind uint8

// Event kinds. The zero Kind is invalid.
const (
	// KindStarted opens a call: the host accepted it (it may still refuse
	// it; a refusal is a failed event with Refused set).
	KindStarted Kind = iota + 1
	// KindRequest is an invoke written to a child. Each attempt makes a new
	// one, and it voids the output shown so far.
	KindRequest
	// KindInput is a caller frame (caller_to_provider).
	KindInput
	// KindOutput is a provider chunk (provider_to_caller).
	KindOutput
	// KindRetry says the current attempt was abandoned and another follows.
	// It voids the output shown so far.
	KindRetry
	// KindCompleted ends a call with its value.
	KindCompleted
	// KindFailed ends a call with an error.
	KindFailed
	// KindCancelled ends a call because it was cancelled.
	KindCancelled
	// KindArguments is one fragment of a call's streamed arguments (its
	// started event has ArgumentsStreamed), in order, before the call's
	// request. A call whose fragments never assembled into valid
	// arguments has no request.
	KindArguments
	// KindUnknown ends a call whose outcome the log cannot tell: a writer
	// that took the tree over (TakeOver) found the call started and not
	// ended, and records that its end is unknown rather than making one
	// up. The call may have completed, failed or been cancelled.
	KindUnknown
)

var kindNames = [...]string{KindStarted: "started", KindRequest: "request", KindInput: "input",
	KindOutput: "output", KindRetry: "retry", KindCompleted: "done", KindFailed: "failed", KindCancelled: "cancelled",
	KindArguments: "arguments", KindUnknown: "unknown"}

// String returns the kind's JSON name, or "Kind(n)" for an unknown value.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// valid reports whether k is one of the defined kinds.
func (k Kind) valid() bool { return k >= KindStarted && k <= KindUnknown }

// IsEnd reports whether k ends a call (done, failed, cancelled or unknown).
func (k Kind) IsEnd() bool { return k >= KindCompleted && k <= KindCancelled || k == KindUnknown }

// parseKind returns the Kind named s. An unknown name gives an error
// wrapping ErrFormat.
func parseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if k != 0 && name == s {
			return Kind(k), nil
		}
	}
	return 0, &formatError{Field: "kind", Reason: "unknown value"}
}

// Event is one entry of a call tree's log. Events are values: each reader
// gets its own copy, whose After names the event before it in what that
// reader is shown.
type Event struct {
	// Kind says what the event records.
	Kind Kind
	// (The one-byte fields sit together, so that an Event stays within
	// 280 bytes: a call's first events are kept in one allocation.)

	// Program is true for a program's events (a call running Go code whose
	// steps are calls).
	Program bool
	// ArgumentsStreamed, on a started event, says the call's arguments
	// arrive as fragments (arguments events); the request carries them
	// assembled.
	ArgumentsStreamed bool
	// FragmentKept, on an arguments event, is true when Fragment holds the
	// fragment's text.
	FragmentKept bool
	// Tree is the id of the tree's outermost call.
	Tree string
	// Writer names the recorder (host instance) that numbered the event.
	Writer string
	// Seq numbers the events of a tree from 1, once for the whole tree and
	// every reader; a writer that takes over a tree continues it.
	Seq uint64
	// After is the Seq of the event before this one in what this reader is
	// shown (its call's stream, its observer's scope, the tree's journal);
	// 0 means none: this is the first. An After that names an event the
	// reader was not given is how a reader sees a loss.
	After uint64
	// At is when the event was recorded.
	At time.Time
	// Call is the id of the call the event belongs to.
	Call string
	// Parent is the id of the call this one is a step of; "" for a tree's
	// outermost call.
	Parent string
	// Tool is the tool id, or the program's name for a program.
	Tool string
	// ToolVersion is the version of the tool that answered (from the
	// child's hello); "" when unknown.
	ToolVersion string
	// Attempt numbers the requests of a call from 1; set on request and
	// retry events and on every event of the call after its first request.
	Attempt int
	// Child names the child process an invoke was written to (request).
	Child string
	// FrameKind and FrameSeq describe the frame of an input or output
	// event (its kind and its sequence number in its direction).
	FrameKind frame.Kind
	// FrameSeq is the frame's sequence number; see FrameKind.
	FrameSeq uint64
	// Payload is the kept form of the call's arguments (started), a frame's
	// payload (input, output) or the result (done); nil when absent.
	Payload *Content
	// Media is the kept form of a frame's media; nil when absent.
	Media *MediaInfo
	// Error is the error of a failed or cancelled call, or why a retry was
	// made; nil when absent.
	Error *frame.Error
	// Refused, on a failed event, names why the call was refused before it
	// reached a child ("unknown_tool", "schema", "pool_down",
	// "journal_start", ...); "" when it was not refused.
	Refused string
	// FragmentIndex numbers an arguments event's fragment from 0.
	FragmentIndex int
	// FragmentBytes is the length in bytes of an arguments event's
	// fragment.
	FragmentBytes int
	// Fragment is the fragment's text, kept only under Options.FullContent (then
	// FragmentKept is true).
	Fragment string
	// TraceID and SpanID name the call's client span in the host's
	// OpenTelemetry trace by its W3C ids (lower-case hex, 32 and 16
	// digits, not all zero), on every event of a call made with tracing
	// on; both "" when tracing was off, for an unsampled span, and for
	// programs. They join a journal to a trace.
	TraceID string
	SpanID  string
	// Caller, on the started event of a tree's outermost call, names the
	// call that made it from another tree: a call over NATS (package
	// remote) is recorded by the host that runs it as a tree of its own,
	// which names its caller here. nil for a call made in this tree's
	// host. Events share it: do not modify it.
	Caller *Link
	// Remote, on the request event of a call made over NATS, names the
	// tree the serving host recorded that call in (its outermost call's
	// tree and id). nil for any other request. Events share it: do not
	// modify it.
	Remote *Link
}

// Link names a call in another tree, for the calls that cross from one
// host's log to another's (Event.Caller, Event.Remote): follow it by
// reading Tree from the store.
type Link struct {
	// Tree is the id of the linked call's tree.
	Tree string
	// Call is the linked call's id.
	Call string
}

// Content is what an event keeps of a payload. Type, Bytes and Keys are
// always set; Value only under Options.FullContent.
type Content struct {
	// Type is the payload's JSON type; always "object" in protocol 1.
	Type string
	// Bytes is the size of the payload's MessagePack encoding.
	Bytes int
	// Keys is the number of keys of the object.
	Keys int
	// Value is the payload itself, or nil when the content was not kept.
	Value frame.Payload
	// Redacted is true when Value had the values of the keys the host
	// redacts (Options.Redact) replaced with "[redacted]" before it was
	// kept; Bytes and Keys still describe the payload as it was.
	Redacted bool
	// ValueDropped is true when the content policy keeps values but this
	// one was not kept: a best-effort journal whose queue had no room for
	// it kept the call's start or end without it (Journal.QueueBytes).
	ValueDropped bool
}

// MediaInfo is what an event keeps of a frame's media.
type MediaInfo struct {
	// Kind is "inline" or "blob".
	Kind string
	// MediaType is the media's IANA type.
	MediaType string
	// Bytes is the inline data's length or the blob's declared size.
	Bytes int64
	// Data is the inline bytes, kept only under Options.FullContent.
	Data []byte
	// BlobID and SHA256 name a blob, kept only under Options.FullContent.
	BlobID string
	// SHA256 is the blob's digest; see BlobID.
	SHA256 string
}

// ErrFormat is matched by every error decoding an event's JSON form (its
// message names the field that broke the contract, never its value).
var ErrFormat = errors.New("calllog: bad event JSON")

// formatError names the field of an event's JSON form that broke the
// contract; it never includes the field's value.
type formatError struct {
	// Field is the JSON name of the field ("error.code").
	Field string
	// Reason says what was wrong.
	Reason string
}

func (e *formatError) Error() string { return "calllog: event JSON: " + e.Field + ": " + e.Reason }

// Is makes a formatError match ErrFormat.
func (e *formatError) Is(target error) bool { return target == ErrFormat }

// timeFormat writes `at`: RFC 3339, UTC, always nine fractional digits, so
// that the text sorts as the time does.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// jsonEvent is the JSON form, format 1. Field order is the documented one.
type jsonEvent struct {
	Format      int            `json:"format"`
	Kind        string         `json:"kind"`
	Tree        string         `json:"tree"`
	Writer      string         `json:"writer"`
	Seq         uint64         `json:"seq"`
	After       *uint64        `json:"after"`
	At          string         `json:"at"`
	Call        string         `json:"call"`
	Parent      *string        `json:"parent"`
	Tool        string         `json:"tool"`
	ToolVersion string         `json:"tool_version,omitempty"`
	Program     bool           `json:"program,omitempty"`
	Attempt     int            `json:"attempt,omitempty"`
	Child       string         `json:"child,omitempty"`
	Frame       *jsonFrame     `json:"frame,omitempty"`
	Payload     *jsonContent   `json:"payload,omitempty"`
	Media       *jsonMedia     `json:"media,omitempty"`
	Error       *jsonErrorInfo `json:"error,omitempty"`
	Refused     string         `json:"refused,omitempty"`
	// Streamed arguments: arguments_streamed on started; the fragment keys
	// on arguments events only (fragment under FullContent).
	ArgumentsStreamed bool      `json:"arguments_streamed,omitempty"`
	FragmentIndex     *int      `json:"fragment_index,omitempty"`
	FragmentBytes     *int      `json:"fragment_bytes,omitempty"`
	Fragment          *string   `json:"fragment,omitempty"`
	TraceID           string    `json:"trace_id,omitempty"`
	SpanID            string    `json:"span_id,omitempty"`
	Caller            *jsonLink `json:"caller,omitempty"`
	Remote            *jsonLink `json:"remote,omitempty"`
}

type jsonLink struct {
	Tree string `json:"tree"`
	Call string `json:"call"`
}

type jsonFrame struct {
	Kind     string `json:"kind"`
	Sequence uint64 `json:"sequence"`
}

type jsonContent struct {
	Type  string          `json:"type"`
	Bytes int             `json:"bytes"`
	Keys  int             `json:"keys"`
	Value json.RawMessage `json:"value,omitempty"`
	// Redacted and ValueDropped are written only when true.
	Redacted     bool `json:"redacted,omitempty"`
	ValueDropped bool `json:"value_dropped,omitempty"`
}

type jsonMedia struct {
	Kind      string `json:"kind"`
	MediaType string `json:"media_type"`
	Bytes     int64  `json:"bytes"`
	Data      []byte `json:"data,omitempty"`
	BlobID    string `json:"blob_id,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
}

type jsonErrorInfo struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Synthetic bool   `json:"synthetic"`
}

// MarshalJSON returns the event's JSON form (format 1, docs/events.md).
func (e Event) MarshalJSON() ([]byte, error) {
	if !e.Kind.valid() {
		return nil, &formatError{Field: "kind", Reason: "unknown value"}
	}
	j := jsonEvent{Format: format, Kind: e.Kind.String(), Tree: e.Tree, Writer: e.Writer, Seq: e.Seq,
		At: e.At.UTC().Format(timeFormat), Call: e.Call, Tool: e.Tool, ToolVersion: e.ToolVersion,
		Program: e.Program, Attempt: e.Attempt, Child: e.Child, Refused: e.Refused, ArgumentsStreamed: e.ArgumentsStreamed}
	// The trace ids are refused as UnmarshalJSON refuses them, so that
	// what is written can be read back.
	if !traceHex(e.TraceID, 32) {
		return nil, &formatError{Field: "trace_id", Reason: "not 32 lower-case hex digits"}
	}
	if !traceHex(e.SpanID, 16) || (e.SpanID == "") != (e.TraceID == "") {
		return nil, &formatError{Field: "span_id", Reason: "not 16 lower-case hex digits with a trace_id"}
	}
	j.TraceID, j.SpanID = e.TraceID, e.SpanID
	if e.Caller != nil {
		j.Caller = &jsonLink{Tree: e.Caller.Tree, Call: e.Caller.Call}
	}
	if e.Remote != nil {
		j.Remote = &jsonLink{Tree: e.Remote.Tree, Call: e.Remote.Call}
	}
	if e.Kind == KindArguments {
		idx, n := e.FragmentIndex, e.FragmentBytes
		j.FragmentIndex, j.FragmentBytes = &idx, &n
		if e.FragmentKept {
			f := e.Fragment
			j.Fragment = &f
		}
	}
	if e.After != 0 {
		a := e.After
		j.After = &a
	}
	if e.Parent != "" {
		p := e.Parent
		j.Parent = &p
	}
	if e.FrameKind != 0 {
		j.Frame = &jsonFrame{Kind: e.FrameKind.String(), Sequence: e.FrameSeq}
	}
	if c := e.Payload; c != nil {
		j.Payload = &jsonContent{Type: c.Type, Bytes: c.Bytes, Keys: c.Keys, Redacted: c.Redacted, ValueDropped: c.ValueDropped}
		if c.Value != nil {
			v, err := c.Value.MarshalJSON()
			if err != nil {
				return nil, &formatError{Field: "payload.value", Reason: "not a JSON object"}
			}
			j.Payload.Value = v
		}
	}
	if m := e.Media; m != nil {
		j.Media = &jsonMedia{Kind: m.Kind, MediaType: m.MediaType, Bytes: m.Bytes, Data: m.Data, BlobID: m.BlobID, SHA256: m.SHA256}
	}
	if er := e.Error; er != nil {
		j.Error = &jsonErrorInfo{Code: er.Code.String(), Message: er.Message, Synthetic: er.Synthetic}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads an event's JSON form. A format other than 1, an
// unknown kind, frame kind or error code is an error wrapping ErrFormat;
// unknown keys are ignored.
func (e *Event) UnmarshalJSON(data []byte) error {
	var j jsonEvent
	// json.Unmarshal, not a Decoder: it decodes data in place, where a
	// Decoder copies it into a buffer of its own first.
	if err := json.Unmarshal(data, &j); err != nil {
		return &formatError{Field: "event", Reason: "not a JSON object of the event form"}
	}
	if j.Format != format {
		return &formatError{Field: "format", Reason: "unsupported version"}
	}
	k, err := parseKind(j.Kind)
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, j.At)
	if err != nil {
		return &formatError{Field: "at", Reason: "not an RFC 3339 time"}
	}
	ev := Event{Kind: k, Tree: j.Tree, Writer: j.Writer, Seq: j.Seq, At: at, Call: j.Call, Tool: j.Tool,
		ToolVersion: j.ToolVersion, Program: j.Program, Attempt: j.Attempt, Child: j.Child, Refused: j.Refused,
		ArgumentsStreamed: j.ArgumentsStreamed}
	if !traceHex(j.TraceID, 32) {
		return &formatError{Field: "trace_id", Reason: "not 32 lower-case hex digits"}
	}
	if !traceHex(j.SpanID, 16) || (j.SpanID == "") != (j.TraceID == "") {
		return &formatError{Field: "span_id", Reason: "not 16 lower-case hex digits with a trace_id"}
	}
	ev.TraceID, ev.SpanID = j.TraceID, j.SpanID
	if ev.Caller, err = linkOf(j.Caller, "caller"); err != nil {
		return err
	}
	if ev.Remote, err = linkOf(j.Remote, "remote"); err != nil {
		return err
	}
	if k == KindArguments {
		if j.FragmentIndex == nil || *j.FragmentIndex < 0 {
			return &formatError{Field: "fragment_index", Reason: "missing or negative"}
		}
		if j.FragmentBytes == nil || *j.FragmentBytes < 0 {
			return &formatError{Field: "fragment_bytes", Reason: "missing or negative"}
		}
		ev.FragmentIndex, ev.FragmentBytes = *j.FragmentIndex, *j.FragmentBytes
		if j.Fragment != nil {
			ev.Fragment, ev.FragmentKept = *j.Fragment, true
		}
	}
	if j.After != nil {
		ev.After = *j.After
	}
	if j.Parent != nil {
		ev.Parent = *j.Parent
	}
	if j.Frame != nil {
		fk, ok := frameKindNamed(j.Frame.Kind)
		if !ok {
			return &formatError{Field: "frame.kind", Reason: "unknown value"}
		}
		ev.FrameKind, ev.FrameSeq = fk, j.Frame.Sequence
	}
	if c := j.Payload; c != nil {
		ev.Payload = &Content{Type: c.Type, Bytes: c.Bytes, Keys: c.Keys, Redacted: c.Redacted, ValueDropped: c.ValueDropped}
		if len(c.Value) > 0 && !bytes.Equal(c.Value, []byte("null")) {
			p, err := frame.PayloadOf(json.RawMessage(c.Value))
			if err != nil {
				return &formatError{Field: "payload.value", Reason: "not a JSON object"}
			}
			ev.Payload.Value = p
		}
	}
	if m := j.Media; m != nil {
		ev.Media = &MediaInfo{Kind: m.Kind, MediaType: m.MediaType, Bytes: m.Bytes, Data: m.Data, BlobID: m.BlobID, SHA256: m.SHA256}
	}
	if er := j.Error; er != nil {
		code, ok := codeNamed(er.Code)
		if !ok {
			return &formatError{Field: "error.code", Reason: "unknown value"}
		}
		ev.Error = &frame.Error{Code: code, Message: er.Message, Synthetic: er.Synthetic}
	}
	*e = ev
	return nil
}

// linkOf returns the Link of a caller or remote key (field names it);
// both its ids must be there.
func linkOf(j *jsonLink, field string) (*Link, error) {
	if j == nil {
		return nil, nil
	}
	if j.Tree == "" {
		return nil, &formatError{Field: field + ".tree", Reason: "missing or empty"}
	}
	if j.Call == "" {
		return nil, &formatError{Field: field + ".call", Reason: "missing or empty"}
	}
	return &Link{Tree: j.Tree, Call: j.Call}, nil
}

// traceHex reports whether s is empty or n lower-case hex digits, not all
// zero (W3C trace context ids).
func traceHex(s string, n int) bool {
	if s == "" {
		return true
	}
	if len(s) != n {
		return false
	}
	zero := true
	for i := 0; i < n; i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
		zero = zero && c == '0'
	}
	return !zero
}

// frameKindNamed is the frame kind whose name (Kind.String) is s; ok is
// false for a name frame does not define. The call log reads these names
// from its JSON form without reaching into the protocol's internals.
func frameKindNamed(s string) (k frame.Kind, ok bool) {
	for k = frame.KindStarted; k <= frame.KindCancelled; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// codeNamed is the failure code whose name (Code.String) is s; ok is
// false for a name frame does not define.
func codeNamed(s string) (c frame.Code, ok bool) {
	for c = frame.CodeProviderError; c <= frame.CodeInvalidFrame; c++ {
		if c.String() == s {
			return c, true
		}
	}
	return 0, false
}
