package asifdoc_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/internal/asifdoc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ptr[T any](v T) *T { return &v }

// newCapture builds the common frame of a Skulk-like capture: a host agent,
// a provider tool participant, one tool definition and one execution.
func newCapture(captureID, boundary string) *asifdoc.Document {
	d := asifdoc.NewDocument(
		asifdoc.Capture{ID: captureID, Producer: asifdoc.Producer{Name: "skulk-test", Version: "0"}, Consistency: "consistent", Boundary: boundary},
		asifdoc.SessionInfo{ID: "session-1", Title: "builder test"},
	)
	d.Participants = []asifdoc.Participant{{ID: "host", Kind: "agent"}, {ID: "provider", Kind: "tool"}}
	d.Tools = []asifdoc.Tool{{
		ID: "upper", Name: "skulk.demo.upper", Description: "Upper-cases text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	}}
	d.Executions = []asifdoc.Execution{{ID: "run-1", ParticipantID: "host", Status: "unknown"}}
	for _, s := range asifdoc.CoverageScopes() {
		d.SetCoverage(s, asifdoc.CoveragePartial, "Skulk call log only.")
	}
	return d
}

func observed() asifdoc.Provenance {
	return asifdoc.Provenance{Mode: "observed", Producer: "skulk-test"}
}

func checkpoint(d *asifdoc.Document, at string, open ...asifdoc.OpenCall) {
	d.Checkpoints = []asifdoc.Checkpoint{{
		ID: "checkpoint", BranchID: "main", AtEventID: ptr(at), Knowledge: "derived", Status: "unknown",
		OpenCalls: open,
	}}
}

// TestBuilderTwoCaptures writes the worked example's scenario with the
// builder: a capture cut while arguments stream, then the later capture
// with the amendment, a complete argument stream reusing the first fragment,
// and a result text stream whose fragments split a UTF-8 sequence.
func TestBuilderTwoCaptures(t *testing.T) {
	frag1, frag2 := `{"text":"gr`, `\u00fc`+`n"}` // JSON escape keeps the fragment ASCII
	// First capture: arguments incomplete.
	first := newCapture("capture-1", "Capture cut while call-1's arguments were streaming.")
	first.Resources = []asifdoc.Resource{asifdoc.TextResource("args-0", "application/json", "native", frag1)}
	first.AddEvent("main", asifdoc.Event{
		ID: "call-1-v0", ActorID: "host", Kind: asifdoc.EventToolCall, Provenance: observed(), ExecutionID: "run-1",
		Data: &asifdoc.ToolCallData{CallID: "call-1", ToolID: "upper", Arguments: json.RawMessage(`{}`), ArgumentsStatus: asif.ArgumentsPartial},
	})
	first.AddStream(asifdoc.Stream{ID: "args-v0", Kind: asif.StreamToolArguments, EventID: "call-1-v0", CallID: "call-1", Status: asif.StreamPartial,
		Segments: []asifdoc.Segment{{Index: 0, ResourceID: "args-0", Length: int64(len(frag1))}}})
	checkpoint(first, "call-1-v0", asifdoc.OpenCall{CallID: "call-1", State: "outcome_unknown"})
	out1, err := first.Marshal()
	require.NoErrorf(t, err, "first capture: %v\n%s", err, out1)
	r1, err := asif.Check(out1, asif.Options{})
	if err != nil || r1.Stream("args-v0").Executable || r1.Stream("args-v0").Status != asif.StreamPartial {
		require.FailNow(t, fmt.Sprintf("first capture check: %v %+v", err, r1.Stream("args-v0")))
	}

	// Later capture: the partial event kept, an amendment, the result.
	second := newCapture("capture-2", "Later capture: completed arguments and the result.")
	second.Session.Lineage = []asifdoc.Lineage{{Relation: "continuation", SessionID: "session-1", CaptureID: "capture-1"}}
	text := "GRÜN"
	utf := []byte(text)
	split := strings.IndexByte(text, 0xc3) + 1 // inside the two-byte Ü
	second.Resources = []asifdoc.Resource{
		asifdoc.TextResource("args-0", "application/json", "native", frag1),
		asifdoc.TextResource("args-1", "application/json", "native", frag2),
		asifdoc.DataResource("text-0", "text/plain", "native", utf[:split]),
		asifdoc.DataResource("text-1", "text/plain", "native", utf[split:]),
	}
	second.AddEvent("main", first.Events[0])
	second.AddEvent("main", asifdoc.Event{
		ID: "call-1-v1", ActorID: "host", Kind: asifdoc.EventToolCall, Provenance: observed(), ExecutionID: "run-1",
		Causes: []asifdoc.EventRef{{EventID: "call-1-v0"}}, Supersedes: &asifdoc.EventRef{EventID: "call-1-v0"},
		Data: &asifdoc.ToolCallData{CallID: "call-1", ToolID: "upper", Arguments: json.RawMessage(`{"text":"grün"}`), ArgumentsStatus: asif.ArgumentsComplete},
	})
	second.AddEvent("main", asifdoc.Event{
		ID: "result-1", ActorID: "provider", Kind: asifdoc.EventToolResult, Provenance: observed(), ExecutionID: "run-1",
		Causes: []asifdoc.EventRef{{EventID: "call-1-v1"}},
		Data:   &asifdoc.ToolResultData{CallID: "call-1", ResultIndex: 0, Terminal: true, Outcome: asif.OutcomeSuccess, Parts: []asifdoc.Part{asifdoc.TextPart(text)}},
	})
	second.AddStream(first.Streams[0])
	second.AddStream(asifdoc.Stream{ID: "args-v1", Kind: asif.StreamToolArguments, EventID: "call-1-v1", CallID: "call-1", Status: asif.StreamComplete,
		Segments: []asifdoc.Segment{
			{Index: 0, ResourceID: "args-0", Length: int64(len(frag1))},
			{Index: 1, ResourceID: "args-1", Length: int64(len(frag2)), Terminal: true},
		}})
	second.AddStream(asifdoc.Stream{ID: "text", Kind: asif.StreamToolResultText, EventID: "result-1", CallID: "call-1", ResultIndex: ptr(int64(0)), Status: asif.StreamComplete,
		Segments: []asifdoc.Segment{
			{Index: 0, ResourceID: "text-0", Length: int64(split)},
			{Index: 1, ResourceID: "text-1", Length: int64(len(utf) - split), Terminal: true},
		}})
	checkpoint(second, "result-1")
	out2, err := second.Marshal()
	require.NoErrorf(t, err, "second capture: %v\n%s", err, out2)
	r2, err := asif.Check(out2, asif.Options{})
	require.NoError(t, err)
	if s := r2.Stream("args-v1"); !s.Executable || string(s.Bytes) != `{"text":"gr\u00fcn"}` {
		require.FailNow(t, fmt.Sprintf("args-v1 = %+v %q", s, s.Bytes))
	}
	if s := r2.Stream("text"); s.Status != asif.StreamComplete || string(s.Bytes) != text {
		require.FailNow(t, fmt.Sprintf("text = %+v %q", s, s.Bytes))
	}
	c := r2.Branches[0].Calls[0]
	require.Falsef(t, c.EventID != "call-1-v1" || !c.Terminal || c.Outcome != asif.OutcomeSuccess || string(c.Arguments) != `{"text":"grün"}`, "state = %+v %s", c, c.Arguments)
}

// TestBuilderWindow writes a capture that starts after the call was made:
// an external binding and a local late result.
func TestBuilderWindow(t *testing.T) {
	d := newCapture("capture-window", "Window after sequence 7: call-1 was requested before the capture began.")
	ext := asifdoc.EventRef{EventID: "call-1-v0", SessionID: "session-1", CaptureID: "capture-1"}
	d.AddExternalBinding(asifdoc.ExternalBinding{
		Kind: "call", ID: "call-1",
		Source:     asif.BindingSource{SessionID: "session-1", CaptureID: "capture-1", EventID: "call-1-v0"},
		Descriptor: &asifdoc.CallDescriptor{ToolID: "upper", Arguments: json.RawMessage(`{"text":"a"}`), ArgumentsStatus: asif.ArgumentsComplete},
	})
	d.AddEvent("main", asifdoc.Event{
		ID: "result-1", ActorID: "provider", Kind: asifdoc.EventToolResult, ExecutionID: "run-1",
		Causes:     []asifdoc.EventRef{ext},
		Provenance: asifdoc.Provenance{Mode: "observed", Producer: "skulk-test"},
		Data:       &asifdoc.ToolResultData{CallID: "call-1", Terminal: true, Outcome: asif.OutcomeError},
	})
	d.Losses = []asifdoc.Loss{{ID: "loss-1", Stage: "capture", Kind: "skulk.window", Scope: asifdoc.ScopeConversation, Explanation: "Events before the window are not included."}}
	checkpoint(d, "result-1")
	out, err := d.Marshal()
	require.NoErrorf(t, err, "%v\n%s", err, out)
	r, _ := asif.Check(out, asif.Options{})
	c := r.Branches[0].Calls[0]
	require.Falsef(t, c.External == nil || c.EventID != "" || !c.Terminal || c.Outcome != asif.OutcomeError, "state = %+v", c)
	if n := strings.Count(string(out), `"kind": "tool_call"`); n != 0 {
		require.FailNow(t, fmt.Sprintf("document holds %d tool_call events; a binding must not become one", n))
	}
}

// Marshal refuses what it builds wrong, with the rule named.
func TestBuilderMarshalChecks(t *testing.T) {
	d := newCapture("capture-bad", "Bad on purpose.")
	d.Resources = []asifdoc.Resource{asifdoc.TextResource("r", "text/plain", "native", "abc")}
	d.AddEvent("main", asifdoc.Event{
		ID: "call", ActorID: "host", Kind: asifdoc.EventToolCall, Provenance: observed(),
		Data: &asifdoc.ToolCallData{CallID: "c", ToolID: "upper", Arguments: json.RawMessage(`{}`), ArgumentsStatus: asif.ArgumentsComplete},
	})
	d.AddStream(asifdoc.Stream{ID: "s", Kind: asif.StreamToolArguments, EventID: "call", CallID: "c", Status: asif.StreamComplete,
		Segments: []asifdoc.Segment{{Index: 0, ResourceID: "r", Offset: 2, Length: 2, Terminal: true}}})
	checkpoint(d, "call")
	_, err := d.Marshal()
	require.ErrorIsf(t, err, asif.RuleSegmentSpan, "err = %v; want %s", err, asif.RuleSegmentSpan)
	empty := asifdoc.NewDocument(asifdoc.Capture{}, asifdoc.SessionInfo{})
	if _, err := empty.Marshal(); !errors.Is(err, asif.ErrSchema) {
		require.FailNow(t, fmt.Sprintf("empty document: %v; want schema refusal", err))
	}
}

func ExampleDocument_Marshal() {
	d := asifdoc.NewDocument(
		asifdoc.Capture{ID: "c1", Producer: asifdoc.Producer{Name: "example", Version: "1"}, Consistency: "consistent", Boundary: "One call."},
		asifdoc.SessionInfo{ID: "s1"},
	)
	d.Participants = []asifdoc.Participant{{ID: "host", Kind: "agent"}}
	d.Tools = []asifdoc.Tool{{ID: "echo", Name: "example.echo", Description: "Echoes."}}
	d.Resources = []asifdoc.Resource{
		asifdoc.TextResource("f0", "application/json", "native", `{"say":`),
		asifdoc.TextResource("f1", "application/json", "native", `"hi"}`),
	}
	d.AddEvent("main", asifdoc.Event{
		ID: "call", ActorID: "host", Kind: asifdoc.EventToolCall,
		Provenance: asifdoc.Provenance{Mode: "observed", Producer: "example"},
		Data:       &asifdoc.ToolCallData{CallID: "call-1", ToolID: "echo", Arguments: json.RawMessage(`{"say":"hi"}`), ArgumentsStatus: asif.ArgumentsComplete},
	})
	d.AddStream(asifdoc.Stream{ID: "args", Kind: asif.StreamToolArguments, EventID: "call", CallID: "call-1", Status: asif.StreamComplete,
		Segments: []asifdoc.Segment{{Index: 0, ResourceID: "f0", Length: 7}, {Index: 1, ResourceID: "f1", Length: 5, Terminal: true}}})
	d.Checkpoints = []asifdoc.Checkpoint{{ID: "cp", BranchID: "main", AtEventID: ptr("call"), Knowledge: "derived", Status: "unknown"}}
	data, err := d.Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}

	report, err := asif.Check(data, asif.Options{})
	fmt.Println("refusals:", err)
	for _, s := range report.Streams {
		fmt.Println(s.StreamID, s.Status, s.Size, s.Executable, string(s.Bytes))
	}
	for _, c := range report.Branches[0].Calls {
		fmt.Println(c.CallID, c.ArgumentsStatus, string(c.Arguments), c.Terminal)
	}
	// Output:
	// refusals: <nil>
	// args complete 12 true {"say":"hi"}
	// call-1 complete {"say":"hi"} false
}
