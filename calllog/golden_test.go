package calllog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
)

var update = flag.Bool("update", false, "rewrite testdata/events.jsonl")

// goldenEvents covers every kind and every optional key of format 1.
func goldenEvents() []calllog.Event {
	at := time.Date(2026, 11, 29, 22, 10, 0, 0, time.UTC)
	base := func(k calllog.Kind, seq uint64) calllog.Event {
		return calllog.Event{Kind: k, Tree: "h1-1", Writer: "9f2c1a0b3d4e5f60", Seq: seq, After: seq - 1,
			At: at.Add(time.Duration(seq) * time.Millisecond), Call: "h1-2", Parent: "h1-1", Tool: "count", ToolVersion: "1.4.0"}
	}
	shape := func(bytes, keys int) *calllog.Content {
		return &calllog.Content{Type: "object", Bytes: bytes, Keys: keys}
	}
	var evs []calllog.Event
	e := base(calllog.KindStarted, 1)
	e.Call, e.Parent, e.Tool, e.ToolVersion, e.Program = "h1-1", "", "reply", "", true
	evs = append(evs, e)
	e = base(calllog.KindStarted, 2)
	e.Payload = shape(4, 1)
	evs = append(evs, e)
	e = base(calllog.KindRequest, 3)
	e.Attempt, e.Child = 1, "child-0"
	evs = append(evs, e)
	e = base(calllog.KindInput, 4)
	e.Attempt, e.FrameKind, e.FrameSeq = 1, frame.KindStarted, 0
	evs = append(evs, e)
	e = base(calllog.KindOutput, 5)
	e.Attempt, e.FrameKind, e.FrameSeq = 1, frame.KindChunk, 1
	e.Payload = &calllog.Content{Type: "object", Bytes: 8, Keys: 1, Value: frame.MustPayload(map[string]any{"text": "hi"})}
	evs = append(evs, e)
	e = base(calllog.KindOutput, 6)
	e.Attempt, e.FrameKind, e.FrameSeq = 1, frame.KindChunk, 2
	e.Media = &calllog.MediaInfo{Kind: "inline", MediaType: "audio/pcm", Bytes: 3, Data: []byte{0, 1, 2}}
	evs = append(evs, e)
	e = base(calllog.KindRetry, 7)
	e.Attempt = 1
	e.Error = &frame.Error{Code: frame.CodeTransportError, Message: "connection reset", Synthetic: true}
	evs = append(evs, e)
	e = base(calllog.KindCompleted, 8)
	e.Attempt, e.Payload = 2, shape(6, 1)
	evs = append(evs, e)
	e = base(calllog.KindStarted, 9)
	e.Call, e.Tool, e.ToolVersion = "h1-3", "nope", ""
	evs = append(evs, e)
	e = base(calllog.KindFailed, 10)
	e.Call, e.Tool, e.ToolVersion, e.Refused = "h1-3", "nope", "", "unknown_tool"
	e.Error = &frame.Error{Code: frame.CodeInvalidFrame, Message: "host: unknown tool"}
	evs = append(evs, e)
	e = base(calllog.KindCancelled, 11)
	e.Call, e.Parent, e.Tool, e.ToolVersion, e.Program = "h1-1", "", "reply", "", true
	e.Error = &frame.Error{Code: frame.CodeCancelled, Message: "context cancelled"}
	evs = append(evs, e)
	// A call with streamed arguments (a tree of its own): started, one
	// fragment kept (full), one not (shape), the request with the
	// assembled arguments; made with tracing on, so every event names the
	// call's span.
	streamed := func(k calllog.Kind, seq uint64) calllog.Event {
		e := base(k, seq)
		e.Tree, e.Call, e.Parent, e.Tool, e.ToolVersion = "h1-4", "h1-4", "", "read-notes", "2"
		e.TraceID, e.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		return e
	}
	e = streamed(calllog.KindStarted, 1)
	e.After, e.ArgumentsStreamed = 0, true
	evs = append(evs, e)
	e = streamed(calllog.KindArguments, 2)
	e.FragmentIndex, e.FragmentBytes, e.Fragment, e.FragmentKept = 0, 24, `{"document_id":"meeting-`, true
	evs = append(evs, e)
	e = streamed(calllog.KindArguments, 3)
	e.FragmentIndex, e.FragmentBytes = 1, 4
	evs = append(evs, e)
	e = streamed(calllog.KindRequest, 4)
	e.Attempt, e.Child = 1, "child-0"
	args := frame.MustPayload(map[string]any{"document_id": "meeting-42"})
	e.Payload = &calllog.Content{Type: "object", Bytes: len(args), Keys: 1, Value: args}
	evs = append(evs, e)
	// A tree taken over (writer B): a call whose arguments were redacted,
	// one whose start was kept without its value (a full queue), and the
	// unknown ends the takeover recorded for them.
	over := func(k calllog.Kind, seq uint64, call string) calllog.Event {
		e := base(k, seq)
		e.Tree, e.Call, e.Parent, e.Tool, e.ToolVersion = "h1-5", call, "h1-5", "login", ""
		if call == "h1-5" {
			e.Parent, e.Tool, e.Program = "", "sync", true
		}
		return e
	}
	e = over(calllog.KindStarted, 1, "h1-5")
	e.After = 0
	evs = append(evs, e)
	e = over(calllog.KindStarted, 2, "h1-6")
	red := frame.MustPayload(map[string]any{"user": "ada", "password": recorder.RedactedValue})
	e.Payload = &calllog.Content{Type: "object", Bytes: 31, Keys: 2, Value: red, Redacted: true}
	evs = append(evs, e)
	e = over(calllog.KindStarted, 3, "h1-7")
	e.Payload = &calllog.Content{Type: "object", Bytes: 1048600, Keys: 1, ValueDropped: true}
	evs = append(evs, e)
	for i, call := range []string{"h1-7", "h1-6", "h1-5"} {
		e = over(calllog.KindUnknown, uint64(7+i), call)
		e.Writer = "b71c2d3e4f5a6b7c"
		evs = append(evs, e)
	}
	// Trees across hosts: a program's step made over NATS, whose request
	// names the tree the serving host recorded it in; that tree's start
	// names its caller.
	e = base(calllog.KindRequest, 12)
	e.Call, e.Tool, e.ToolVersion, e.Attempt, e.Child = "h1-9", "echo", "", 1, "remote:host-b"
	e.Remote = &calllog.Link{Tree: "a7-1", Call: "a7-1"}
	evs = append(evs, e)
	e = base(calllog.KindStarted, 1)
	e.Tree, e.Call, e.Parent, e.Tool, e.ToolVersion, e.After, e.Writer = "a7-1", "a7-1", "", "echo", "", 0, "c3d4e5f60718293a"
	e.Caller = &calllog.Link{Tree: "h1-1", Call: "h1-9"}
	evs = append(evs, e)
	return evs
}

// A link must name both its tree and its call.
func TestLinksNeedTreeAndCall(t *testing.T) {
	const head = `{"format":1,"kind":"started","tree":"t","writer":"w","seq":1,"after":null,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x"`
	for _, tc := range []struct{ keys, field string }{
		{`,"caller":{"call":"c"}`, "caller.tree"},
		{`,"caller":{"tree":"t","call":""}`, "caller.call"},
		{`,"remote":{"tree":"","call":"c"}`, "remote.tree"},
	} {
		var e calllog.Event
		err := json.Unmarshal([]byte(head+tc.keys+"}"), &e)
		var fe *calllog.FormatError
		assert.Falsef(t, !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, calllog.ErrFormat), "%s: %v, want a FormatError for %s", tc.keys, err, tc.field)
	}
}

// TestGoldenJSON pins the JSON form: testdata/events.jsonl is what other
// implementations read and write (go test -run Golden -update rewrites it).
func TestGoldenJSON(t *testing.T) {
	var buf bytes.Buffer
	for _, e := range goldenEvents() {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	const path = "testdata/events.jsonl"
	if *update {
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	if !bytes.Equal(buf.Bytes(), want) {
		require.FailNow(t, fmt.Sprintf("JSON form changed:\n%s\nwant:\n%s", buf.Bytes(), want))
	}
	sc := bufio.NewScanner(bytes.NewReader(want))
	i := 0
	for sc.Scan() {
		var e calllog.Event
		require.NoErrorf(t, json.Unmarshal(sc.Bytes(), &e), "line %d", i+1)
		b, _ := json.Marshal(e)
		if !bytes.Equal(b, sc.Bytes()) {
			require.FailNow(t, fmt.Sprintf("line %d does not round-trip:\n%s\n%s", i+1, sc.Bytes(), b))
		}
		i++
	}
}

// An arguments event must carry its fragment's index and size.
func TestArgumentsEventNeedsFragmentKeys(t *testing.T) {
	for _, line := range []string{
		`{"format":1,"kind":"arguments","tree":"t","writer":"w","seq":2,"after":1,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x","fragment_bytes":1}`,
		`{"format":1,"kind":"arguments","tree":"t","writer":"w","seq":2,"after":1,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x","fragment_index":0}`,
		`{"format":1,"kind":"arguments","tree":"t","writer":"w","seq":2,"after":1,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x","fragment_index":-1,"fragment_bytes":1}`,
	} {
		var e calllog.Event
		if err := json.Unmarshal([]byte(line), &e); !errors.Is(err, calllog.ErrFormat) {
			require.FailNow(t, fmt.Sprintf("%s: %v", line, err))
		}
	}
}

// trace_id and span_id are W3C ids, both or neither.
func TestTraceIDsAreChecked(t *testing.T) {
	const head = `{"format":1,"kind":"started","tree":"t","writer":"w","seq":1,"after":null,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x"`
	for _, tc := range []struct{ keys, field string }{
		{`,"trace_id":"4BF92F3577B34DA6A3CE929D0E0E4736","span_id":"00f067aa0ba902b7"`, "trace_id"},
		{`,"trace_id":"00000000000000000000000000000000","span_id":"00f067aa0ba902b7"`, "trace_id"},
		{`,"trace_id":"4bf92f3577b34da6a3ce929d0e0e473","span_id":"00f067aa0ba902b7"`, "trace_id"},
		{`,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902"`, "span_id"},
		{`,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`, "span_id"},
		{`,"span_id":"00f067aa0ba902b7"`, "span_id"},
	} {
		var e calllog.Event
		err := json.Unmarshal([]byte(head+tc.keys+"}"), &e)
		var fe *calllog.FormatError
		assert.Falsef(t, !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, calllog.ErrFormat), "%s: %v, want a FormatError for %s", tc.keys, err, tc.field)
	}
	var e calllog.Event
	if err := json.Unmarshal([]byte(head+`,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}`), &e); err != nil ||
		e.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || e.SpanID != "00f067aa0ba902b7" {
		assert.Fail(t, fmt.Sprintf("valid ids: %v, %q %q", err, e.TraceID, e.SpanID))
	}
	if err := json.Unmarshal([]byte(head+"}"), &e); err != nil || e.TraceID != "" || e.SpanID != "" {
		assert.Fail(t, fmt.Sprintf("no ids: %v, %q %q", err, e.TraceID, e.SpanID))
	}
	// What would be refused on reading is refused on writing.
	for _, tc := range []struct{ trace, span, field string }{
		{"4BF92F3577B34DA6A3CE929D0E0E4736", "00f067aa0ba902b7", "trace_id"},
		{"4bf92f3577b34da6a3ce929d0e0e4736", "", "span_id"},
		{"", "00f067aa0ba902b7", "span_id"},
	} {
		ev := calllog.Event{Kind: calllog.KindStarted, Tree: "t", Writer: "w", Seq: 1, Call: "t", Tool: "x", TraceID: tc.trace, SpanID: tc.span}
		_, err := json.Marshal(ev)
		var fe *calllog.FormatError
		assert.Truef(t, errors.As(err, &fe) && fe.Field == tc.field, "marshal %q %q: %v, want a FormatError for %s", tc.trace, tc.span, err, tc.field)
	}
}
