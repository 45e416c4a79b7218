package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/internal/asifdoc"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skulk-export-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	childBin, err = buildChild(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, testnet.CleanupAndExit(func() { os.RemoveAll(dir) }))
}

// journal records calls through a real recorder.Recorder with full content
// and a required journal over an in-memory store (eventstore.Memory), as the host does, and reads
// the tree back as a journal reader would.
type journal struct {
	t     *testing.T
	store *eventstore.Memory
	rec   *recorder.Recorder
}

func newJournal(t *testing.T) *journal {
	t.Helper()
	store := &eventstore.Memory{}
	rec, err := recorder.New(calllog.Options{Writer: "w1", FullContent: true,
		Journal: &calllog.Journal{Store: store, Required: true}}, nil)
	require.NoError(t, err)
	j := &journal{t: t, store: store, rec: rec}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, rec.Close(ctx), "close")
	})
	return j
}

func (j *journal) begin(id, tool string, args map[string]any) *recorder.Record {
	j.t.Helper()
	var p frame.Payload
	if args != nil {
		p = frame.MustPayload(args)
	}
	r, err := j.rec.Begin(context.Background(), recorder.CallInfo{ID: id, Tool: tool, ToolVersion: "1.0", Args: p})
	if err != nil {
		require.FailNow(j.t, fmt.Sprint(err))
	}
	return r
}

func (j *journal) events(tree string) []calllog.Event {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := j.store.EventsAfter(ctx, tree, 0, 1<<20)
	if err != nil {
		require.FailNow(j.t, fmt.Sprint(err))
	}
	return ev
}

func chunk(t *testing.T, call string, seq uint64, payload map[string]any, media frame.Media) frame.Frame {
	t.Helper()
	var p frame.Payload
	if payload != nil {
		p = frame.MustPayload(payload)
	}
	f, err := frame.NewChunk(call, frame.ProviderToCaller, seq, p, media)
	require.NoError(t, err)
	return f
}

func end(t *testing.T, r *recorder.Record, o calllog.Outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.End(ctx, o))
}

// exportCheck exports, marshals (which runs asif.Check) and checks again
// from the bytes, returning the document and the report.
func exportCheck(t *testing.T, events []calllog.Event, opts Options) (*asifdoc.Document, *asif.Report, []byte) {
	t.Helper()
	doc, err := exportDocument(events, opts)
	require.NoError(t, err, "exportDocument")
	data, err := doc.Marshal()
	require.NoErrorf(t, err, "Marshal: %v\n%s", err, data)
	s, err := Export(events, opts)
	require.NoError(t, err, "Export")
	want := Session{JSON: data, CaptureID: doc.Capture.ID, Events: len(doc.Events), Streams: len(doc.Streams),
		ExternalBindings: len(doc.ExternalBindings), Losses: len(doc.Losses), LossKinds: lossKinds(doc.Losses)}
	require.Falsef(t, !reflect.DeepEqual(*s, want), "Export's session differs from the marshalled document: %+v", s)
	rep, err := asif.Check(data, asif.Options{})
	require.NoError(t, err, "Check")
	return doc, rep, data
}

func eventsOfKind(doc *asifdoc.Document, k asifdoc.EventKind) []asifdoc.Event {
	var out []asifdoc.Event
	for _, e := range doc.Events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func textStreams(rep *asif.Report) []*asif.Assembly {
	var out []*asif.Assembly
	for _, s := range rep.Streams {
		if s.Kind == asif.StreamToolResultText {
			out = append(out, s)
		}
	}
	return out
}

func callState(t *testing.T, rep *asif.Report, id string) *asif.CallState {
	t.Helper()
	for _, c := range rep.Branches[0].Calls {
		if c.CallID == id {
			return c
		}
	}
	require.FailNow(t, fmt.Sprintf("no call %s in the selected state", id))
	return nil
}

func hasLoss(doc *asifdoc.Document, kind string) bool {
	for _, l := range doc.Losses {
		if l.Kind == kind {
			return true
		}
	}
	return false
}

func TestTextCallRoundTrip(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "upper", map[string]any{})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Input(chunk(t, "c1", 1, map[string]any{"text": "héllo "}, nil))
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "HÉLLO "}, nil))
	r.Output(chunk(t, "c1", 2, map[string]any{"text": ""}, nil))
	r.Output(chunk(t, "c1", 3, map[string]any{"text": "WORLD"}, nil))
	end(t, r, recorder.Done(frame.MustPayload(map[string]any{"chunks": 3})))
	events := j.events("c1")

	doc, rep, _ := exportCheck(t, events, Options{})
	calls := eventsOfKind(doc, asifdoc.EventToolCall)
	require.Falsef(t, len(calls) != 1 || calls[0].Data.(*asifdoc.ToolCallData).ArgumentsStatus != asif.ArgumentsComplete, "tool_call events: %+v", calls)
	ts := textStreams(rep)
	require.Falsef(t, len(ts) != 1 || ts[0].Status != asif.StreamComplete, "text streams: %+v", ts)
	want := replay.Events(events).Call("c1").Text
	if string(ts[0].Bytes) != want || want != "HÉLLO WORLD" {
		require.FailNow(t, fmt.Sprintf("assembled %q, the caller saw %q", ts[0].Bytes, want))
	}
	st := callState(t, rep, "c1")
	require.Falsef(t, !st.Terminal || st.Outcome != asif.OutcomeSuccess || st.Results != 2 || string(st.Arguments) != "{}", "selected state: %+v", st)
	require.Falsef(t, !hasLoss(doc, "caller_input_not_represented") || !hasLoss(doc, "tool_definition_incomplete"), "losses: %+v", doc.Losses)
	if doc.Checkpoints[0].Status != "ended" || len(doc.Checkpoints[0].OpenCalls) != 0 {
		require.FailNow(t, fmt.Sprintf("checkpoint: %+v", doc.Checkpoints[0]))
	}
}

func TestChunkPayloadsAndMedia(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "count", map[string]any{"n": 2})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "c1", 1, map[string]any{"i": 0}, nil))
	r.Output(chunk(t, "c1", 2, map[string]any{"i": 1, "text": "mixed"}, nil))
	r.Output(chunk(t, "c1", 3, nil, &frame.InlineMedia{Data: []byte{0, 1, 2, 0xff}, MediaType: "application/octet-stream"}))
	end(t, r, recorder.Done(frame.MustPayload(map[string]any{"n": 2})))
	events := j.events("c1")

	doc, rep, _ := exportCheck(t, events, Options{})
	results := eventsOfKind(doc, asifdoc.EventToolResult)
	// i=0 chunk, text result (reserved at the mixed chunk), mixed chunk,
	// media chunk, terminal.
	require.EqualValuesf(t, 5, len(results), "%d results, want 5", len(results))
	for i, e := range results {
		if got := e.Data.(*asifdoc.ToolResultData).ResultIndex; got != int64(i) {
			assert.Fail(t, fmt.Sprintf("result %d has index %d", i, got))
		}
	}
	var media *asifdoc.Resource
	for i := range doc.Resources {
		if strings.HasSuffix(doc.Resources[i].ID, "-media") {
			media = &doc.Resources[i]
		}
	}
	require.Falsef(t, media == nil || media.Data == "" || *media.Bytes != 4, "media resource: %+v", media)
	if ts := textStreams(rep); len(ts) != 1 || string(ts[0].Bytes) != "mixed" || ts[0].Status != asif.StreamComplete {
		require.FailNow(t, fmt.Sprintf("text: %+v", ts))
	}

	// Past the media bound the bytes are declared, not embedded.
	doc, _, _ = exportCheck(t, events, Options{MaxMediaBytes: -1})
	require.Falsef(t, !hasLoss(doc, "media_not_embedded"), "no media loss: %+v", doc.Losses)
	for _, r := range doc.Resources {
		require.Falsef(t, strings.HasSuffix(r.ID, "-media") && (r.Availability != "excluded" || r.Data != ""), "media resource %+v", r)
	}
}

func TestFailedAndSynthetic(t *testing.T) {
	j := newJournal(t)
	r := j.begin("f", "fail", map[string]any{"message": "boom"})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	end(t, r, recorder.Failed(frame.CodeProviderError, "boom", false))
	r = j.begin("k", "crash", map[string]any{"after": 1})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "k", 1, map[string]any{"i": 0}, nil))
	end(t, r, recorder.Failed(frame.CodeUnreachable, "child exited", true))
	r = j.begin("s", "count", map[string]any{"n": "x"})
	end(t, r, recorder.Refused("schema", frame.CodeInvalidFrame, errors.New("arguments: n must be an integer")))

	doc, rep, _ := exportCheck(t, j.events("f"), Options{})
	if st := callState(t, rep, "f"); st.Outcome != asif.OutcomeError || hasLoss(doc, "synthetic_outcome") {
		require.FailNow(t, fmt.Sprintf("fail: %+v, losses %+v", st, doc.Losses))
	}

	doc, rep, _ = exportCheck(t, j.events("k"), Options{})
	if st := callState(t, rep, "k"); st.Outcome != asif.OutcomeError {
		require.FailNow(t, fmt.Sprintf("crash: %+v", st))
	}
	term := doc.Events[len(doc.Events)-1]
	require.Falsef(t, term.Provenance.Mode != "synthetic" || term.ActorID != HostActor || !hasLoss(doc, "synthetic_outcome"), "crash terminal: %+v, losses %+v", term, doc.Losses)

	doc, rep, _ = exportCheck(t, j.events("s"), Options{})
	if st := callState(t, rep, "s"); st.Outcome != asif.OutcomeError || doc.Events[1].ActorID != HostActor {
		require.FailNow(t, fmt.Sprintf("refused: %+v", st))
	}
	var errText string
	for _, r := range doc.Resources {
		if strings.HasSuffix(r.ID, "-error") {
			errText = *r.Text
		}
	}
	require.Falsef(t, !strings.Contains(errText, `"refused":"schema"`), "error resource %q", errText)
}

// TestWindowMidCall cuts a call's journal after its first chunk: the first
// capture holds the call and a partial text stream; the second holds an
// external binding naming the first capture's call event, the late results
// locally, and no tool_call at all.
func TestWindowMidCall(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "upper", map[string]any{"x": 1})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "ab"}, nil))
	r.Output(chunk(t, "c1", 2, map[string]any{"i": 9}, nil))
	r.Output(chunk(t, "c1", 3, map[string]any{"text": "cd"}, nil))
	end(t, r, recorder.Done(nil))
	events := j.events("c1")
	cut := events[2].Seq // started, request, first chunk

	early, erep, _ := exportCheck(t, events, Options{Until: cut})
	calls := eventsOfKind(early, asifdoc.EventToolCall)
	require.Falsef(t, len(calls) != 1 || early.Capture.ID != CaptureID("c1", 1, cut), "early capture: %s, %d calls", early.Capture.ID, len(calls))
	if ts := textStreams(erep); len(ts) != 1 || ts[0].Status != asif.StreamPartial || string(ts[0].Bytes) != "ab" {
		require.FailNow(t, fmt.Sprintf("early text: %+v", ts))
	}
	if early.Checkpoints[0].Status != "active" || len(early.Checkpoints[0].OpenCalls) != 1 {
		require.FailNow(t, fmt.Sprintf("early checkpoint %+v", early.Checkpoints[0]))
	}

	late, lrep, data := exportCheck(t, events, Options{After: cut})
	if n := len(eventsOfKind(late, asifdoc.EventToolCall)); n != 0 {
		require.FailNow(t, fmt.Sprintf("the window invented %d tool_call events", n))
	}
	require.False(t, strings.Contains(string(data), `"kind": "tool_call"`), "a tool_call event in the window document")
	require.EqualValuesf(t, 1, len(late.ExternalBindings), "bindings: %+v", late.ExternalBindings)
	b := late.ExternalBindings[0]
	if b.ID != "c1" || b.Source.CaptureID != early.Capture.ID || b.Source.EventID != calls[0].ID || b.Source.SessionID != early.Session.ID {
		require.FailNow(t, fmt.Sprintf("binding %+v does not name the early capture's call %s", b, calls[0].ID))
	}
	if d := b.Descriptor.(*asifdoc.CallDescriptor); string(d.Arguments) != `{"x":1}` || d.ArgumentsStatus != asif.ArgumentsComplete {
		require.FailNow(t, fmt.Sprintf("descriptor %+v", d))
	}
	st := callState(t, lrep, "c1")
	require.Falsef(t, st.EventID != "" || st.External == nil || !st.Terminal || st.Outcome != asif.OutcomeSuccess, "late selected state %+v", st)
	// The text began before the window: its stream misses its first segment.
	ts := textStreams(lrep)
	require.Falsef(t, len(ts) != 1 || ts[0].Status != asif.StreamPartial || ts[0].Size != 0, "late text: %+v", ts)
	require.Falsef(t, late.Capture.Boundary == "" || !strings.Contains(late.Capture.Boundary, "external bindings") || !hasLoss(late, "history_before_capture"), "boundary %q, losses %+v", late.Capture.Boundary, late.Losses)
	require.Falsef(t, len(late.Session.Lineage) != 1 || late.Session.Lineage[0].CaptureID != early.Capture.ID, "lineage %+v", late.Session.Lineage)
	// Result indexes continue the early capture's.
	for _, e := range eventsOfKind(late, asifdoc.EventToolResult) {
		require.Falsef(t, e.Data.(*asifdoc.ToolResultData).ResultIndex == 0 && e.ID != ts[0].EventID, "result %s reuses index 0", e.ID)
	}
}

func TestRetryVoidsText(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "upper", nil)
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "lost"}, nil))
	r.Retry(frame.CodeUnreachable, "child died")
	r.Request(recorder.RequestInfo{Child: "child-1"})
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "kept"}, nil))
	end(t, r, recorder.Done(nil))
	events := j.events("c1")
	doc, rep, _ := exportCheck(t, events, Options{})
	ts := textStreams(rep)
	require.Falsef(t, len(ts) != 2 || ts[0].Status != asif.StreamPartial || ts[1].Status != asif.StreamComplete, "streams %+v", ts)
	if got, want := string(ts[1].Bytes), replay.Events(events).Call("c1").Text; got != want {
		require.FailNow(t, fmt.Sprintf("assembled %q, the caller saw %q", got, want))
	}
	require.Falsef(t, !hasLoss(doc, "voided_attempt"), "losses %+v", doc.Losses)
}

func TestShapeContentIsDeclaredUnknown(t *testing.T) {
	store := &eventstore.Memory{}
	rec, err := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: store, Required: true}}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := rec.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "count", Args: frame.MustPayload(map[string]any{"n": 1})})
	require.NoError(t, err)
	r.Request(recorder.RequestInfo{Child: "c"})
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "x"}, nil))
	require.NoError(t, r.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"n": 1}))))
	require.NoError(t, rec.Close(ctx))
	events, err := store.EventsAfter(ctx, "c1", 0, 100)
	require.NoError(t, err)
	doc, rep, _ := exportCheck(t, events, Options{})
	if st := callState(t, rep, "c1"); st.ArgumentsStatus != asif.ArgumentsUnknown {
		require.FailNow(t, fmt.Sprintf("state %+v", st))
	}
	require.Falsef(t, len(textStreams(rep)) != 0 || !hasLoss(doc, "content_not_kept"), "streams %+v, losses %+v", rep.Streams, doc.Losses)
}

func TestProgramSteps(t *testing.T) {
	j := newJournal(t)
	err := j.rec.Program(context.Background(), recorder.CallInfo{ID: "p", Tool: "pipeline"}, func(ctx context.Context) error {
		r, err := j.rec.Begin(ctx, recorder.CallInfo{ID: "s1", Tool: "count", Args: frame.MustPayload(map[string]any{"n": 0})})
		if err != nil {
			return err
		}
		r.Request(recorder.RequestInfo{Child: "c"})
		return r.End(ctx, recorder.Done(nil))
	})
	require.NoError(t, err)
	doc, rep, _ := exportCheck(t, j.events("p"), Options{})
	if len(rep.Branches[0].Calls) != 1 || rep.Branches[0].Calls[0].CallID != "s1" || !hasLoss(doc, "program_not_represented") ||
		doc.Checkpoints[0].Status != "ended" {
		require.FailNow(t, fmt.Sprintf("calls %+v, losses %+v", rep.Branches[0].Calls, doc.Losses))
	}
}

func TestToolDescriptors(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "count", map[string]any{"n": 0})
	end(t, r, recorder.Done(nil))
	doc, _, _ := exportCheck(t, j.events("c1"), Options{Tools: []wire.Tool{{ID: "count", Version: "2", Description: "counts",
		ArgumentsSchema: map[string]any{"type": "object", "required": []any{"n"}}}}})
	tl := doc.Tools[0]
	require.Falsef(t, tl.Description != "counts" || tl.Revision != "2" || !strings.Contains(string(tl.InputSchema), `"required":["n"]`) || hasLoss(doc, "tool_definition_incomplete"), "tool %+v", tl)
}

func TestExportRefusals(t *testing.T) {
	ev := func(tree string, seq uint64) calllog.Event {
		return calllog.Event{Kind: calllog.KindStarted, Tree: tree, Call: tree, Tool: "t", Seq: seq}
	}
	tests := []struct {
		events []calllog.Event
		opts   Options
		want   error
	}{
		{nil, Options{}, ErrNoEvents},
		{[]calllog.Event{ev("a", 1), ev("b", 2)}, Options{}, ErrMixedTrees},
		{[]calllog.Event{ev("a", 2), ev("a", 2)}, Options{}, ErrOrder},
		{[]calllog.Event{ev("a", 1)}, Options{After: 1}, ErrEmptyWindow},
		{[]calllog.Event{ev("a", 1)}, Options{After: 3, Until: 3}, ErrWindow},
	}
	for _, tt := range tests {
		_, err := Export(tt.events, tt.opts)
		assert.ErrorIsf(t, err, tt.want, "%v: got %v, want %v", tt.opts, err, tt.want)
	}
	_, err := Export([]calllog.Event{ev("a", 1), ev("b", 2)}, Options{})
	var ee *EventError
	require.ErrorAsf(t, err, &ee, "got %v", err)
	require.EqualValuesf(t, 2, ee.Seq, "got %v", err)
}

// The document's JSON names every event id the branch selects.
func TestMarshalledIDsConsistent(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "upper", nil)
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "c1", 1, map[string]any{"text": "a"}, nil))
	end(t, r, recorder.Done(nil))
	_, _, data := exportCheck(t, j.events("c1"), Options{})
	var m struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
		Streams []struct {
			EventID string `json:"event_id"`
		} `json:"streams"`
	}
	require.NoError(t, json.Unmarshal(data, &m))
	ids := map[string]bool{}
	for _, e := range m.Events {
		ids[e.ID] = true
	}
	require.Falsef(t, len(m.Streams) != 1 || !ids[m.Streams[0].EventID] || !strings.HasPrefix(m.Streams[0].EventID, "text-"), "streams %+v, events %v", m.Streams, ids)
}

// BenchmarkExportText measures Export plus Marshal (which checks the
// document) for one call streaming 10,000 text chunks.
func BenchmarkExportText(b *testing.B) {
	at := time.Date(2026, 11, 29, 22, 10, 0, 0, time.UTC)
	var events []calllog.Event
	add := func(e calllog.Event) {
		e.Tree, e.Call, e.Tool, e.Writer = "c1", "c1", "upper", "w"
		e.Seq = uint64(len(events) + 1)
		e.After, e.At = e.Seq-1, at.Add(time.Duration(e.Seq)*time.Microsecond)
		events = append(events, e)
	}
	add(calllog.Event{Kind: calllog.KindStarted})
	add(calllog.Event{Kind: calllog.KindRequest, Attempt: 1})
	const chunks = 10_000
	for i := range chunks {
		p := frame.MustPayload(map[string]any{"text": "chunk of streamed text "})
		add(calllog.Event{Kind: calllog.KindOutput, Attempt: 1, FrameKind: frame.KindChunk, FrameSeq: uint64(i + 1),
			Payload: &calllog.Content{Type: "object", Bytes: len(p), Keys: 1, Value: p}})
	}
	add(calllog.Event{Kind: calllog.KindCompleted, Attempt: 1})
	b.ReportAllocs()
	var size int
	for b.Loop() {
		s, err := Export(events, Options{})
		require.NoError(b, err)
		size = len(s.JSON)
	}
	b.ReportMetric(float64(size), "doc-bytes")
	b.ReportMetric(float64(chunks)*float64(b.N)/b.Elapsed().Seconds(), "chunks/s")
}

// TestGapsMakeTextPartial: an output event the journal did not keep
// leaves the text stream partial (a missing index), never complete
// without it, and the loss and consistency say so.
func TestGapsMakeTextPartial(t *testing.T) {
	j := newJournal(t)
	r := j.begin("c1", "upper", nil)
	r.Request(recorder.RequestInfo{Child: "child-0"})
	for i, s := range []string{"a", "b", "c"} {
		r.Output(chunk(t, "c1", uint64(i+1), map[string]any{"text": s}, nil))
	}
	end(t, r, recorder.Done(nil))
	all := j.events("c1")
	for _, drop := range []int{2, 3} { // the first text chunk, then the second
		events := append(append([]calllog.Event{}, all[:drop]...), all[drop+1:]...)
		doc, rep, _ := exportCheck(t, events, Options{})
		ts := textStreams(rep)
		require.Falsef(t, len(ts) != 1 || ts[0].Status != asif.StreamPartial || doc.Capture.Consistency != "partial" || !hasLoss(doc, "events_not_kept"), "drop %d: streams %+v, consistency %s, losses %+v", drop, ts, doc.Capture.Consistency, doc.Losses)
	}
}

// A call whose events name its span has its trace and span ids in its
// tool_call's extensions (marshalled, and the document still checks); one
// without has no extensions.
func TestTraceIDsInExtensions(t *testing.T) {
	j := newJournal(t)
	r, err := j.rec.Begin(context.Background(), recorder.CallInfo{ID: "c1", Tool: "upper", Args: frame.MustPayload(map[string]any{}),
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"})
	require.NoError(t, err)
	r.Request(recorder.RequestInfo{Child: "child-0"})
	end(t, r, recorder.Done(nil))
	_, _, data := exportCheck(t, j.events("c1"), Options{})
	var doc struct {
		Events []struct {
			Kind       string                       `json:"kind"`
			Extensions map[string]map[string]string `json:"extensions"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	calls := 0
	for _, e := range doc.Events {
		if e.Kind != "tool_call" {
			continue
		}
		calls++
		if tr := e.Extensions["skulk/trace"]; tr["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || tr["span_id"] != "00f067aa0ba902b7" {
			assert.Fail(t, fmt.Sprintf("tool_call extensions %v, want skulk/trace with the call's ids", e.Extensions))
		}
	}
	assert.EqualValuesf(t, 1, calls, "%d tool_call events, want 1", calls)

	r = j.begin("c2", "upper", map[string]any{})
	end(t, r, recorder.Done(nil))
	if _, _, data := exportCheck(t, j.events("c2"), Options{}); bytes.Contains(data, []byte(`"extensions"`)) {
		assert.Fail(t, fmt.Sprintf("a call without trace ids has extensions:\n%s", data))
	}
}
