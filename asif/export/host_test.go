package export

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/asif"
	"github.com/skulkrt/skulk/asif/internal/asifdoc"
	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/replay"
	"github.com/skulkrt/skulk/skulktest"
)

// buildChild builds cmd/skulk-child into dir.
func buildChild(dir string) (string, error) {
	return skulktest.BuildIn(dir, "github.com/skulkrt/skulk/cmd/skulk-child")
}

// realHost starts cmd/skulk-child (with its test tools) under a host whose
// recorder keeps full content in a required journal, and returns the host
// and the journal's store. Both are closed when the test ends.
func realHost(t *testing.T) (*host.Host, *eventstore.Memory) {
	t.Helper()
	store := &eventstore.Memory{}
	// A short directory: a Unix socket path holds at most 107 bytes.
	base, err := os.MkdirTemp("", "sk")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{Command: childBin, Args: []string{"--test-tools"}, TempDir: base,
		CallLog: calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: store, Required: true}},
		Restart: host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, h.Close(ctx), "host close")
	})
	return h, store
}

func treeEvents(t *testing.T, store *eventstore.Memory, tree string) []calllog.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := store.EventsAfter(ctx, tree, 0, 1<<20)
	require.NoError(t, err)
	if n := len(events); n == 0 || !events[n-1].Kind.IsEnd() {
		require.FailNow(t, fmt.Sprintf("tree %s: %d events, not ended", tree, n))
	}
	return events
}

// TestRealCalls exports calls made through cmd/skulk-child: each document
// passes the schema and every rule (Marshal checks, and Check again from
// the bytes), and its text assembles to the text the caller saw.
func TestRealCalls(t *testing.T) {
	h, store := realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools := h.Tools()

	type result struct {
		id, text string
		err      error
	}
	run := func(tool string, args map[string]any, input ...string) result {
		c, err := h.Call(ctx, tool, frame.MustPayload(args))
		require.NoErrorf(t, err, "%s", tool)
		for _, s := range input {
			require.NoErrorf(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil), "%s: send", tool)
		}
		if err := c.CloseSend(); err != nil && tool != "crash" {
			require.FailNow(t, fmt.Sprintf("%s: close send: %v", tool, err))
		}
		text, err := waitText(ctx, c)
		return result{id: c.ID(), text: text, err: err}
	}

	upper := run("upper", map[string]any{}, "héllo ", "wörld")
	require.Falsef(t, upper.err != nil || upper.text != "HÉLLO WÖRLD", "upper: %q, %v", upper.text, upper.err)
	events := treeEvents(t, store, upper.id)
	doc, rep, _ := exportCheck(t, events, Options{Tools: tools})
	ts := textStreams(rep)
	if len(ts) != 1 || ts[0].Status != asif.StreamComplete || string(ts[0].Bytes) != upper.text ||
		replay.Events(events).Call(upper.id).Text != upper.text {
		require.FailNow(t, fmt.Sprintf("upper: streams %+v, caller saw %q", ts, upper.text))
	}
	require.Falsef(t, hasLoss(doc, "tool_definition_incomplete") || !hasLoss(doc, "caller_input_not_represented"), "upper losses %+v", doc.Losses)
	if st := callState(t, rep, upper.id); st.Outcome != asif.OutcomeSuccess || st.Results != 2 {
		require.FailNow(t, fmt.Sprintf("upper state %+v", st))
	}

	count := run("count", map[string]any{"n": 3})
	require.NoError(t, count.err)
	_, rep, _ = exportCheck(t, treeEvents(t, store, count.id), Options{Tools: tools})
	if st := callState(t, rep, count.id); st.Outcome != asif.OutcomeSuccess || st.Results != 4 || string(st.Arguments) != `{"n":3}` {
		require.FailNow(t, fmt.Sprintf("count state %+v", st))
	}

	failed := run("fail", map[string]any{"message": "no such document"})
	var ce *frame.Error
	require.ErrorAsf(t, failed.err, &ce, "fail: %v", failed.err)
	doc, rep, _ = exportCheck(t, treeEvents(t, store, failed.id), Options{Tools: tools})
	if st := callState(t, rep, failed.id); st.Outcome != asif.OutcomeError || hasLoss(doc, "synthetic_outcome") {
		require.FailNow(t, fmt.Sprintf("fail state %+v, losses %+v", st, doc.Losses))
	}

	crashed := run("crash", map[string]any{"after": 2})
	require.ErrorAsf(t, crashed.err, &ce, "crash: %v", crashed.err)
	require.Truef(t, ce.Synthetic, "crash: %v", crashed.err)
	events = treeEvents(t, store, crashed.id)
	doc, rep, _ = exportCheck(t, events, Options{Tools: tools})
	term := doc.Events[len(doc.Events)-1]
	// The chunks the caller was given before the host saw the death (0 to
	// 2: the child writes them and exits at once) are each a result.
	chunks := len(replay.Events(events).Call(crashed.id).Frames) - 1
	if st := callState(t, rep, crashed.id); st.Outcome != asif.OutcomeError || st.Results != chunks+1 ||
		term.Provenance.Mode != "synthetic" || !hasLoss(doc, "synthetic_outcome") {
		require.FailNow(t, fmt.Sprintf("crash: state %+v, terminal %+v", st, term))
	}
}

// TestRealCallCutByWindow exports a real call in two captures cut after
// its first chunk: the later one binds the call to the earlier capture's
// event, holds the late results locally and invents no call event; the
// two captures' text together is what the caller saw.
func TestRealCallCutByWindow(t *testing.T) {
	h, store := realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := h.Call(ctx, "upper", frame.MustPayload(map[string]any{}))
	require.NoError(t, err)
	for _, s := range []string{"first ", "second ", "third"} {
		require.NoError(t, c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil))
	}
	require.NoError(t, c.CloseSend())
	text, err := waitText(ctx, c)
	if err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	events := treeEvents(t, store, c.ID())
	var cut uint64
	for _, e := range events {
		if e.Kind == calllog.KindOutput {
			cut = e.Seq // the first chunk
			break
		}
	}
	require.NotEqualValues(t, 0, cut, "no output event")

	early, erep, _ := exportCheck(t, events, Options{Until: cut, Tools: h.Tools()})
	late, lrep, data := exportCheck(t, events, Options{After: cut, Tools: h.Tools()})
	require.False(t, len(eventsOfKind(late, asifdoc.EventToolCall)) != 0 || strings.Contains(string(data), `"kind": "tool_call"`), "the window document holds a tool_call event")
	calls := eventsOfKind(early, asifdoc.EventToolCall)
	if len(late.ExternalBindings) != 1 || len(calls) != 1 || late.ExternalBindings[0].Source.EventID != calls[0].ID ||
		late.ExternalBindings[0].Source.CaptureID != early.Capture.ID {
		require.FailNow(t, fmt.Sprintf("binding %+v, early calls %+v", late.ExternalBindings, calls))
	}
	if st := callState(t, lrep, c.ID()); st.External == nil || st.EventID != "" || !st.Terminal || st.Outcome != asif.OutcomeSuccess {
		require.FailNow(t, fmt.Sprintf("late state %+v", st))
	}
	// The early stream holds segment 0, the late one the rest: together
	// they are the caller's text.
	et, lt := textStreams(erep), textStreams(lrep)
	require.Falsef(t, len(et) != 1 || len(lt) != 1 || et[0].Status != asif.StreamPartial || lt[0].Status != asif.StreamPartial, "early %+v, late %+v", et, lt)
	var lateText strings.Builder
	for _, s := range late.Streams {
		for _, seg := range s.Segments {
			for _, r := range late.Resources {
				if r.ID == seg.ResourceID {
					lateText.WriteString((*r.Text)[seg.Offset : seg.Offset+seg.Length])
				}
			}
		}
	}
	if got := string(et[0].Bytes) + lateText.String(); got != text || text != "FIRST SECOND THIRD" {
		require.FailNow(t, fmt.Sprintf("early %q + late %q, the caller saw %q", et[0].Bytes, lateText.String(), text))
	}
}

// childBin is cmd/skulk-child, built once by TestMain.
var childBin string

// TestRealStreamedArguments streams a call's arguments through
// host.WithArgumentFragments to cmd/skulk-child and exports it: whole, cut after the
// first fragment, and from there on (the worked examples' progression);
// then a call aborted and one refused before their arguments completed.
func TestRealStreamedArguments(t *testing.T) {
	h, store := realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools := h.Tools()

	c, err := h.Call(ctx, "count", nil, host.WithArgumentFragments(slices.Values([]string{`{"n"`, `: 2}`})))
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	events := treeEvents(t, store, c.ID())
	var firstFrag, request uint64
	for _, e := range events {
		switch {
		case e.Kind == calllog.KindArguments && firstFrag == 0:
			firstFrag = e.Seq
		case e.Kind == calllog.KindRequest:
			request = e.Seq
		}
	}
	require.Falsef(t, firstFrag == 0 || request == 0, "no fragment or request in %d events", len(events))

	full, frep, _ := exportCheck(t, events, Options{Tools: tools})
	complete := "call-" + seqStr(request)
	if calls := eventsOfKind(full, asifdoc.EventToolCall); len(calls) != 1 || calls[0].ID != complete {
		require.FailNow(t, fmt.Sprintf("full calls %+v", calls))
	}
	s := frep.Stream("arguments-" + complete)
	require.Falsef(t, s == nil || s.Status != asif.StreamComplete || !s.Executable || string(s.Bytes) != `{"n": 2}`, "full stream %+v", s)
	if st := callState(t, frep, c.ID()); string(st.Arguments) != `{"n":2}` || !st.Terminal || st.Outcome != asif.OutcomeSuccess || st.Results != 3 {
		require.FailNow(t, fmt.Sprintf("full state %+v", st))
	}

	early, erep, _ := exportCheck(t, events, Options{Until: firstFrag, Tools: tools})
	partial := "call-" + seqStr(firstFrag)
	if calls := eventsOfKind(early, asifdoc.EventToolCall); len(calls) != 1 || calls[0].ID != partial {
		require.FailNow(t, fmt.Sprintf("early calls %+v", calls))
	}
	if s := erep.Stream("arguments-" + partial); s == nil || s.Status != asif.StreamPartial || s.Executable || string(s.Bytes) != `{"n"` {
		require.FailNow(t, fmt.Sprintf("early stream %+v", s))
	}
	late, lrep, _ := exportCheck(t, events, Options{After: firstFrag, Tools: tools})
	calls := eventsOfKind(late, asifdoc.EventToolCall)
	require.Falsef(t, len(late.ExternalBindings) != 0 || len(calls) != 2 || calls[0].ID != partial || calls[1].Supersedes == nil || calls[1].Supersedes.EventID != partial, "late calls %+v, bindings %+v", calls, late.ExternalBindings)
	amended := complete + "-amends-" + seqStr(firstFrag)
	if calls[1].ID != amended {
		require.FailNow(t, fmt.Sprintf("late amendment %s, want %s", calls[1].ID, amended))
	}
	if s := lrep.Stream("arguments-" + amended); s == nil || !s.Executable || string(s.Bytes) != `{"n": 2}` {
		require.FailNow(t, fmt.Sprintf("late stream %+v", s))
	}
	if p := lrep.Stream("arguments-" + partial); p == nil || string(p.Bytes) != `{"n"` {
		require.FailNow(t, fmt.Sprintf("late partial stream %+v", p))
	}

	// Abandoned by its context, and refused by the schema: partial calls,
	// never executable.
	abCtx, abandon := context.WithCancel(ctx)
	var abID string
	_, err = h.Call(abCtx, "count", nil, host.WithObservers(eventstore.ObserverFunc(func(_ context.Context, e calllog.Event) error {
		if e.Kind == calllog.KindStarted {
			abID = e.Call
		}
		return nil
	})), host.WithArgumentFragments(func(yield func(string) bool) {
		if yield(`{"n": 1`) {
			abandon()
		}
	}))
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, h.FlushObservers(ctx))
	_, err = h.Call(ctx, "count", nil, host.WithArgumentFragments(slices.Values([]string{`{"n": "two"}`})))
	var se *host.SchemaError
	var re *host.RefusedError
	require.Falsef(t, !errors.As(err, &se) || !errors.As(err, &re), "refused: %v", err)
	for id, want := range map[string]asif.Outcome{abID: asif.OutcomeCancelled, re.Tree: asif.OutcomeError} {
		_, rep, _ := exportCheck(t, treeEvents(t, store, id), Options{Tools: tools})
		st := callState(t, rep, id)
		if st.ArgumentsStatus != asif.ArgumentsPartial || !st.Terminal || st.Outcome != want || len(rep.Streams) != 1 ||
			rep.Streams[0].Status != asif.StreamPartial || rep.Streams[0].Executable {
			require.FailNow(t, fmt.Sprintf("%s: state %+v, streams %+v", id, st, rep.Streams))
		}
	}
}

// waitText reads c to its end and returns the "text" strings of its
// chunks, what the caller saw, and Wait's error.
func waitText(ctx context.Context, c *host.Call) (string, error) {
	var text strings.Builder
	for {
		f, err := c.Recv(ctx)
		if err != nil {
			break
		}
		if s, ok := f.Payload.Text(); ok && f.Kind == frame.KindChunk {
			text.WriteString(s)
		}
	}
	_, err := c.Wait()
	return text.String(), err
}
