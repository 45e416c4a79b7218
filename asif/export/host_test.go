package export

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, host.Config{Command: childBin, Args: []string{"--test-tools"}, TempDir: base,
		CallLog: calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: store, Required: true}},
		Restart: host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("host close: %v", err)
		}
	})
	return h, store
}

func treeEvents(t *testing.T, store *eventstore.Memory, tree string) []calllog.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := store.EventsAfter(ctx, tree, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(events); n == 0 || !events[n-1].Kind.IsEnd() {
		t.Fatalf("tree %s: %d events, not ended", tree, n)
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
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		for _, s := range input {
			if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil); err != nil {
				t.Fatalf("%s: send: %v", tool, err)
			}
		}
		if err := c.CloseSend(); err != nil && tool != "crash" {
			t.Fatalf("%s: close send: %v", tool, err)
		}
		_, err = c.Wait()
		return result{id: c.ID(), text: c.Text(), err: err}
	}

	upper := run("upper", map[string]any{}, "héllo ", "wörld")
	if upper.err != nil || upper.text != "HÉLLO WÖRLD" {
		t.Fatalf("upper: %q, %v", upper.text, upper.err)
	}
	events := treeEvents(t, store, upper.id)
	doc, rep, _ := exportCheck(t, events, Options{Tools: tools})
	ts := textStreams(rep)
	if len(ts) != 1 || ts[0].Status != asif.StreamComplete || string(ts[0].Bytes) != upper.text ||
		replay.Events(events).Call(upper.id).Text != upper.text {
		t.Fatalf("upper: streams %+v, caller saw %q", ts, upper.text)
	}
	if hasLoss(doc, "tool_definition_incomplete") || !hasLoss(doc, "caller_input_not_represented") {
		t.Fatalf("upper losses %+v", doc.Losses)
	}
	if st := callState(t, rep, upper.id); st.Outcome != asif.OutcomeSuccess || st.Results != 2 {
		t.Fatalf("upper state %+v", st)
	}

	count := run("count", map[string]any{"n": 3})
	if count.err != nil {
		t.Fatal(count.err)
	}
	_, rep, _ = exportCheck(t, treeEvents(t, store, count.id), Options{Tools: tools})
	if st := callState(t, rep, count.id); st.Outcome != asif.OutcomeSuccess || st.Results != 4 || string(st.Arguments) != `{"n":3}` {
		t.Fatalf("count state %+v", st)
	}

	failed := run("fail", map[string]any{"message": "no such document"})
	var ce *frame.Error
	if !errors.As(failed.err, &ce) {
		t.Fatalf("fail: %v", failed.err)
	}
	doc, rep, _ = exportCheck(t, treeEvents(t, store, failed.id), Options{Tools: tools})
	if st := callState(t, rep, failed.id); st.Outcome != asif.OutcomeError || hasLoss(doc, "synthetic_outcome") {
		t.Fatalf("fail state %+v, losses %+v", st, doc.Losses)
	}

	crashed := run("crash", map[string]any{"after": 2})
	if !errors.As(crashed.err, &ce) || !ce.Synthetic {
		t.Fatalf("crash: %v", crashed.err)
	}
	events = treeEvents(t, store, crashed.id)
	doc, rep, _ = exportCheck(t, events, Options{Tools: tools})
	term := doc.Events[len(doc.Events)-1]
	// The chunks the caller was given before the host saw the death (0 to
	// 2: the child writes them and exits at once) are each a result.
	chunks := len(replay.Events(events).Call(crashed.id).Frames) - 1
	if st := callState(t, rep, crashed.id); st.Outcome != asif.OutcomeError || st.Results != chunks+1 ||
		term.Provenance.Mode != "synthetic" || !hasLoss(doc, "synthetic_outcome") {
		t.Fatalf("crash: state %+v, terminal %+v", st, term)
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
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"first ", "second ", "third"} {
		if err := c.Send(ctx, frame.MustPayload(map[string]any{"text": s}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	events := treeEvents(t, store, c.ID())
	var cut uint64
	for _, e := range events {
		if e.Kind == calllog.KindOutput {
			cut = e.Seq // the first chunk
			break
		}
	}
	if cut == 0 {
		t.Fatal("no output event")
	}

	early, erep, _ := exportCheck(t, events, Options{Until: cut, Tools: h.Tools()})
	late, lrep, data := exportCheck(t, events, Options{After: cut, Tools: h.Tools()})
	if len(eventsOfKind(late, asifdoc.EventToolCall)) != 0 || strings.Contains(string(data), `"kind": "tool_call"`) {
		t.Fatal("the window document holds a tool_call event")
	}
	calls := eventsOfKind(early, asifdoc.EventToolCall)
	if len(late.ExternalBindings) != 1 || len(calls) != 1 || late.ExternalBindings[0].Source.EventID != calls[0].ID ||
		late.ExternalBindings[0].Source.CaptureID != early.Capture.ID {
		t.Fatalf("binding %+v, early calls %+v", late.ExternalBindings, calls)
	}
	if st := callState(t, lrep, c.ID()); st.External == nil || st.EventID != "" || !st.Terminal || st.Outcome != asif.OutcomeSuccess {
		t.Fatalf("late state %+v", st)
	}
	// The early stream holds segment 0, the late one the rest: together
	// they are the caller's text.
	et, lt := textStreams(erep), textStreams(lrep)
	if len(et) != 1 || len(lt) != 1 || et[0].Status != asif.StreamPartial || lt[0].Status != asif.StreamPartial {
		t.Fatalf("early %+v, late %+v", et, lt)
	}
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
	if got := string(et[0].Bytes) + lateText.String(); got != c.Text() || c.Text() != "FIRST SECOND THIRD" {
		t.Fatalf("early %q + late %q, the caller saw %q", et[0].Bytes, lateText.String(), c.Text())
	}
}

// childBin is cmd/skulk-child, built once by TestMain.
var childBin string

// TestRealStreamedArguments streams a call's arguments through
// host.StreamArguments to cmd/skulk-child and exports it: whole, cut after the
// first fragment, and from there on (the worked examples' progression);
// then a call aborted and one refused before their arguments completed.
func TestRealStreamedArguments(t *testing.T) {
	h, store := realHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools := h.Tools()

	a, err := h.StreamArguments(ctx, "count")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`{"n"`, `: 2}`} {
		if err := a.Fragment(f); err != nil {
			t.Fatal(err)
		}
	}
	c, err := a.Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	events := treeEvents(t, store, a.ID())
	var firstFrag, request uint64
	for _, e := range events {
		switch {
		case e.Kind == calllog.KindArguments && firstFrag == 0:
			firstFrag = e.Seq
		case e.Kind == calllog.KindRequest:
			request = e.Seq
		}
	}
	if firstFrag == 0 || request == 0 {
		t.Fatalf("no fragment or request in %d events", len(events))
	}

	full, frep, _ := exportCheck(t, events, Options{Tools: tools})
	complete := "call-" + seqStr(request)
	if calls := eventsOfKind(full, asifdoc.EventToolCall); len(calls) != 1 || calls[0].ID != complete {
		t.Fatalf("full calls %+v", calls)
	}
	s := frep.Stream("arguments-" + complete)
	if s == nil || s.Status != asif.StreamComplete || !s.Executable || string(s.Bytes) != `{"n": 2}` {
		t.Fatalf("full stream %+v", s)
	}
	if st := callState(t, frep, a.ID()); string(st.Arguments) != `{"n":2}` || !st.Terminal || st.Outcome != asif.OutcomeSuccess || st.Results != 3 {
		t.Fatalf("full state %+v", st)
	}

	early, erep, _ := exportCheck(t, events, Options{Until: firstFrag, Tools: tools})
	partial := "call-" + seqStr(firstFrag)
	if calls := eventsOfKind(early, asifdoc.EventToolCall); len(calls) != 1 || calls[0].ID != partial {
		t.Fatalf("early calls %+v", calls)
	}
	if s := erep.Stream("arguments-" + partial); s == nil || s.Status != asif.StreamPartial || s.Executable || string(s.Bytes) != `{"n"` {
		t.Fatalf("early stream %+v", s)
	}
	late, lrep, _ := exportCheck(t, events, Options{After: firstFrag, Tools: tools})
	calls := eventsOfKind(late, asifdoc.EventToolCall)
	if len(late.ExternalBindings) != 0 || len(calls) != 2 || calls[0].ID != partial || calls[1].Supersedes == nil || calls[1].Supersedes.EventID != partial {
		t.Fatalf("late calls %+v, bindings %+v", calls, late.ExternalBindings)
	}
	amended := complete + "-amends-" + seqStr(firstFrag)
	if calls[1].ID != amended {
		t.Fatalf("late amendment %s, want %s", calls[1].ID, amended)
	}
	if s := lrep.Stream("arguments-" + amended); s == nil || !s.Executable || string(s.Bytes) != `{"n": 2}` {
		t.Fatalf("late stream %+v", s)
	}
	if p := lrep.Stream("arguments-" + partial); p == nil || string(p.Bytes) != `{"n"` {
		t.Fatalf("late partial stream %+v", p)
	}

	// Aborted, and refused by the schema: partial calls, never executable.
	ab, err := h.StreamArguments(ctx, "count")
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.Fragment(`{"n": 1`); err != nil {
		t.Fatal(err)
	}
	if err := ab.Abort("gave up"); err != nil {
		t.Fatal(err)
	}
	rf, err := h.StreamArguments(ctx, "count")
	if err != nil {
		t.Fatal(err)
	}
	if err := rf.Fragment(`{"n": "two"}`); err != nil {
		t.Fatal(err)
	}
	var se *host.SchemaError
	if _, err := rf.Done(ctx); !errors.As(err, &se) {
		t.Fatalf("refused: %v", err)
	}
	for id, want := range map[string]asif.Outcome{ab.ID(): asif.OutcomeCancelled, rf.ID(): asif.OutcomeError} {
		_, rep, _ := exportCheck(t, treeEvents(t, store, id), Options{Tools: tools})
		st := callState(t, rep, id)
		if st.ArgumentsStatus != asif.ArgumentsPartial || !st.Terminal || st.Outcome != want || len(rep.Streams) != 1 ||
			rep.Streams[0].Status != asif.StreamPartial || rep.Streams[0].Executable {
			t.Fatalf("%s: state %+v, streams %+v", id, st, rep.Streams)
		}
	}
}
