package export

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/internal/asifdoc"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
)

// streamedItems builds, as docs/events.md specifies streamed arguments
// (kind "arguments"), the journal of a call whose
// arguments arrive as two fragments — the worked example's
// {"document_id":"meeting-42"} — then run and answered with text. end is
// the kind of its last event; with cancelled the call ends before its
// arguments completed (no request).
func streamedItems(cancelled bool) []calllog.Event {
	at := time.Date(2026, 11, 29, 22, 10, 0, 0, time.UTC)
	ev := func(seq uint64, k calllog.Kind) calllog.Event {
		return calllog.Event{Kind: k, Tree: "c1", Writer: "w", Seq: seq, After: seq - 1, At: at.Add(time.Duration(seq) * time.Millisecond),
			Call: "c1", Tool: "read-notes", ToolVersion: "1"}
	}
	content := func(v map[string]any) *calllog.Content {
		p := frame.MustPayload(v)
		return &calllog.Content{Type: "object", Bytes: len(p), Keys: len(v), Value: p}
	}
	frag := func(seq uint64, i int, s string) calllog.Event {
		e := ev(seq, calllog.KindArguments)
		e.FragmentIndex, e.FragmentBytes, e.Fragment, e.FragmentKept = i, len(s), s, true
		return e
	}
	started := ev(1, calllog.KindStarted)
	started.ArgumentsStreamed = true
	items := []calllog.Event{started, frag(2, 0, `{"document_id":"meeting-`)}
	if cancelled {
		c := ev(3, calllog.KindCancelled)
		c.Error = &frame.Error{Code: frame.CodeCancelled, Message: "aborted"}
		return append(items, c)
	}
	req := ev(4, calllog.KindRequest)
	req.Attempt, req.Child, req.Payload = 1, "child-0", content(map[string]any{"document_id": "meeting-42"})
	out := ev(5, calllog.KindOutput)
	out.Attempt, out.FrameKind, out.FrameSeq = 1, frame.KindChunk, 1
	out.Payload = content(map[string]any{"text": "Meeting notes: agree on the workshop outline."})
	done := ev(6, calllog.KindCompleted)
	done.Attempt = 1
	return append(items, frag(3, 1, `42"}`), req, out, done)
}

func buildCheck(t *testing.T, events []calllog.Event, opts Options) (*asifdoc.Document, *asif.Report) {
	t.Helper()
	doc, err := exportDocument(events, opts)
	require.NoError(t, err)
	data, err := doc.Marshal()
	require.NoErrorf(t, err, "Marshal: %v\n%s", err, data)
	rep, err := asif.Check(data, asif.Options{})
	require.NoError(t, err)
	return doc, rep
}

// exampleStream returns the assembly of a stream of a worked example.
func exampleStream(t *testing.T, file, stream string) *asif.Assembly {
	t.Helper()
	data, err := os.ReadFile("../testdata/" + file)
	require.NoError(t, err)
	rep, err := asif.Check(data, asif.Options{})
	require.NoError(t, err)
	return rep.Stream(stream)
}

// TestStreamedArgumentsAcrossCaptures follows the worked examples: a
// capture cut after the first fragment holds a partial call bound to a
// partial stream; the next capture holds that authentic partial version
// again, its amendment with the complete stream reusing the fragment
// resource, and the late result — and no external binding.
func TestStreamedArgumentsAcrossCaptures(t *testing.T) {
	items := streamedItems(false)

	early, erep := buildCheck(t, items, Options{Until: 2})
	calls := eventsOfKind(early, asifdoc.EventToolCall)
	require.Falsef(t, len(calls) != 1 || calls[0].ID != "call-2" || calls[0].Data.(*asifdoc.ToolCallData).ArgumentsStatus != asif.ArgumentsPartial, "early calls %+v", calls)
	ps := erep.Stream("arguments-call-2")
	want := exampleStream(t, "tool-call-partial.session.json", "stream-partial")
	require.Falsef(t, ps == nil || ps.Status != asif.StreamPartial || ps.Executable || string(ps.Bytes) != string(want.Bytes), "early stream %+v, example %q", ps, want.Bytes)
	if st := callState(t, erep, "c1"); st.ArgumentsStatus != asif.ArgumentsPartial || st.Terminal {
		require.FailNow(t, fmt.Sprintf("early state %+v", st))
	}

	late, lrep := buildCheck(t, items, Options{After: 2})
	require.EqualValuesf(t, 0, len(late.ExternalBindings), "an amended call must not be a binding: %+v", late.ExternalBindings)
	calls = eventsOfKind(late, asifdoc.EventToolCall)
	require.Falsef(t, len(calls) != 2 || calls[0].ID != "call-2" || calls[1].ID != "call-4-amends-2" || calls[1].Supersedes == nil || calls[1].Supersedes.EventID != "call-2", "late calls %+v", calls)
	if p := lrep.Stream("arguments-call-2"); p == nil || string(p.Bytes) != string(ps.Bytes) || p.Status != asif.StreamPartial {
		require.FailNow(t, fmt.Sprintf("the partial stream changed: %+v", p))
	}
	cs := lrep.Stream("arguments-call-4-amends-2")
	wantc := exampleStream(t, "tool-call-completed.session.json", "stream-complete")
	require.Falsef(t, cs == nil || cs.Status != asif.StreamComplete || !cs.Executable || string(cs.Bytes) != string(wantc.Bytes), "complete stream %+v, example %q", cs, wantc.Bytes)
	// The complete stream reuses the early capture's fragment resource.
	var segs []asifdoc.Segment
	for _, s := range late.Streams {
		if s.ID == "arguments-call-4-amends-2" {
			segs = s.Segments
		}
	}
	require.Falsef(t, len(segs) != 2 || segs[0].ResourceID != "fragment-2" || segs[1].ResourceID != "fragment-3" || !segs[1].Terminal, "segments %+v", segs)
	// The predecessor is the authentic event of the early capture: the
	// same JSON, and the same stream.
	if a, b := mustJSON(t, early.Events[0]), mustJSON(t, late.Events[0]); a != b {
		require.FailNow(t, fmt.Sprintf("the partial version differs between captures:\n%s\n%s", a, b))
	}
	if a, b := mustJSON(t, early.Streams[0]), mustJSON(t, late.Streams[0]); a != b {
		require.FailNow(t, fmt.Sprintf("the partial stream differs between captures:\n%s\n%s", a, b))
	}
	st := callState(t, lrep, "c1")
	require.Falsef(t, st.EventID != "call-4-amends-2" || st.ArgumentsStatus != asif.ArgumentsComplete || string(st.Arguments) != `{"document_id":"meeting-42"}` ||
		!st.Terminal || st.Outcome != asif.OutcomeSuccess, "late state %+v", st)

	// A capture of the whole journal has the complete call only.
	full, frep := buildCheck(t, items, Options{})
	if calls := eventsOfKind(full, asifdoc.EventToolCall); len(calls) != 1 || calls[0].ID != "call-4" {
		require.FailNow(t, fmt.Sprintf("full calls %+v", calls))
	}
	if s := frep.Stream("arguments-call-4"); s == nil || !s.Executable {
		require.FailNow(t, fmt.Sprintf("full stream %+v", s))
	}

	// A window after the arguments completed binds the complete version.
	after, arep := buildCheck(t, items, Options{After: 4})
	require.Falsef(t, len(after.ExternalBindings) != 1 || after.ExternalBindings[0].Source.EventID != "call-4" || len(eventsOfKind(after, asifdoc.EventToolCall)) != 0, "bindings %+v", after.ExternalBindings)
	if st := callState(t, arep, "c1"); st.External == nil || !st.Terminal {
		require.FailNow(t, fmt.Sprintf("bound state %+v", st))
	}
}

// TestStreamedArgumentsNeverCompleted: a call that ended before its
// arguments completed is a partial call with a partial stream, never an
// executable one, closed by its cancelled result.
func TestStreamedArgumentsNeverCompleted(t *testing.T) {
	doc, rep := buildCheck(t, streamedItems(true), Options{})
	calls := eventsOfKind(doc, asifdoc.EventToolCall)
	require.Falsef(t, len(calls) != 1 || calls[0].Data.(*asifdoc.ToolCallData).ArgumentsStatus != asif.ArgumentsPartial, "calls %+v", calls)
	s := rep.Stream("arguments-" + calls[0].ID)
	require.Falsef(t, s == nil || s.Status != asif.StreamPartial || s.Executable, "stream %+v", s)
	if st := callState(t, rep, "c1"); !st.Terminal || st.Outcome != asif.OutcomeCancelled || st.ArgumentsStatus != asif.ArgumentsPartial {
		require.FailNow(t, fmt.Sprintf("state %+v", st))
	}
}

// TestStreamedArgumentsNotKept: fragments kept without their text leave
// the complete call without a stream, and the loss recorded.
func TestStreamedArgumentsNotKept(t *testing.T) {
	items := streamedItems(false)
	for i := range items {
		if items[i].Kind == calllog.KindArguments {
			items[i].FragmentKept, items[i].Fragment = false, ""
		}
	}
	doc, rep := buildCheck(t, items, Options{})
	require.Falsef(t, rep.Stream("arguments-call-4") != nil || !hasLoss(doc, "argument_fragments_incomplete"), "streams %+v, losses %+v", rep.Streams, doc.Losses)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestDeterministic: the same events give the same bytes.
func TestDeterministic(t *testing.T) {
	items := streamedItems(false)
	var first []byte
	for range 3 {
		doc, err := exportDocument(items, Options{After: 2})
		require.NoError(t, err)
		data, err := doc.Marshal()
		require.NoError(t, err)
		if first == nil {
			first = data
		} else if string(data) != string(first) {
			require.FailNow(t, "two exports of the same events differ")
		}
	}
}

// TestIDsNameOneEvidence exports every window of two journals and checks
// that an event, stream or resource id found in several captures names the
// same evidence in each (an event's sequence is its position in its
// document, so it is left out).
func TestIDsNameOneEvidence(t *testing.T) {
	j := newJournal(t)
	r := j.begin("t1", "upper", map[string]any{"x": 1})
	r.Request(recorder.RequestInfo{Child: "child-0"})
	r.Output(chunk(t, "t1", 1, map[string]any{"text": "ab"}, nil))
	r.Output(chunk(t, "t1", 2, map[string]any{"i": 1}, nil))
	r.Output(chunk(t, "t1", 3, map[string]any{"text": "cd"}, nil))
	r.Retry(frame.CodeUnreachable, "child died")
	r.Request(recorder.RequestInfo{Child: "child-1"})
	r.Output(chunk(t, "t1", 1, map[string]any{"text": "ef"}, nil))
	end(t, r, recorder.Failed(frame.CodeUnreachable, "child died", true))

	bindings := 0
	for _, events := range [][]calllog.Event{streamedItems(false), j.events("t1")} {
		last := events[len(events)-1].Seq
		seen := map[string]string{}
		same := func(kind, id string, v any) {
			s := mustJSON(t, v)
			if prev, ok := seen[kind+" "+id]; ok && prev != s {
				require.FailNow(t, fmt.Sprintf("%s %s names different evidence:\n%s\n%s", kind, id, prev, s))
			}
			seen[kind+" "+id] = s
		}
		for after := uint64(0); after < last; after++ {
			for until := after + 1; until <= last; until++ {
				doc, err := exportDocument(events, Options{After: after, Until: until})
				require.NoError(t, err)
				if _, err := doc.Marshal(); err != nil {
					require.FailNow(t, fmt.Sprintf("window (%d, %d]: %v", after, until, err))
				}
				for _, e := range doc.Events {
					e.Sequence = 0
					same("event", e.ID, e)
				}
				for _, s := range doc.Streams {
					same("stream", s.ID, s)
				}
				for _, r := range doc.Resources {
					same("resource", r.ID, r)
				}
				// A binding names the call's event in the capture of
				// events 1..after, which holds it with the same arguments.
				for _, b := range doc.ExternalBindings {
					bindings++
					src, err := exportDocument(events, Options{Until: after})
					require.NoError(t, err)
					require.Falsef(t, b.Source.CaptureID != src.Capture.ID || b.Source.SessionID != src.Session.ID, "binding source %+v, earlier capture %s", b.Source, src.Capture.ID)
					found := false
					for _, e := range src.Events {
						if e.ID == b.Source.EventID {
							d := e.Data.(*asifdoc.ToolCallData)
							desc := b.Descriptor.(*asifdoc.CallDescriptor)
							found = string(d.Arguments) == string(desc.Arguments) && d.ArgumentsStatus == desc.ArgumentsStatus && d.ToolID == desc.ToolID
						}
					}
					require.Falsef(t, !found, "window (%d, %d]: binding %+v has no matching event in %s", after, until, b.Source, src.Capture.ID)
				}
			}
		}
	}
	require.NotEqualValues(t, 0, bindings, "no window had a binding")
}
