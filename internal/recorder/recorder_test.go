package recorder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/replay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCtx bounds a test: every wait in these tests has this deadline.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newRecorder(t *testing.T, opts calllog.Options) *recorder.Recorder {
	t.Helper()
	return newLoggingRecorder(t, opts, nil)
}

// newLoggingRecorder is newRecorder with its warnings given to logger.
func newLoggingRecorder(t *testing.T, opts calllog.Options, logger *slog.Logger) *recorder.Recorder {
	t.Helper()
	r, err := recorder.New(opts, logger)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A test whose store fails drops what it queued, and says so;
		// the tests that count it check Close themselves.
		if err := r.Close(ctx); err != nil && !errors.Is(err, calllog.ErrCloseDropped) {
			assert.Fail(t, fmt.Sprintf("Close: %v", err))
		}
	})
	return r
}

func chunk(t *testing.T, id string, seq uint64, v map[string]any) frame.Frame {
	t.Helper()
	f, err := frame.NewChunk(id, frame.ProviderToCaller, seq, frame.MustPayload(v), nil)
	require.NoError(t, err)
	return f
}

// collector is an observer that keeps what it is given.
type collector struct {
	mu     sync.Mutex
	events []calllog.Event
}

func (c *collector) Observe(_ context.Context, e calllog.Event) error {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
	return nil
}

func (c *collector) got() []calllog.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// readersFor is the Options of a recorder whose events only watchers read
// ("none"), or also obs ("observer"), or also a required journal on store
// ("journal").
func readersFor(tc string, obs calllog.Observer, store calllog.EventStore) calllog.Options {
	var opts calllog.Options
	switch tc {
	case "observer":
		opts.Observers = []calllog.Observer{obs}
	case "journal":
		opts.Journal = &calllog.Journal{Store: store, Required: true}
	}
	return opts
}

// runCall records a whole leaf call: started, request, n chunks, done.
func runCall(t *testing.T, ctx context.Context, r *recorder.Recorder, info recorder.CallInfo, n int) *recorder.Record {
	t.Helper()
	rec, err := r.Begin(ctx, info)
	require.NoError(t, err, "Begin")
	rec.Request(recorder.RequestInfo{Child: "c0"})
	for i := range n {
		rec.Output(chunk(t, rec.ID(), uint64(i+1), map[string]any{"i": i}))
	}
	require.NoError(t, rec.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"n": n}))), "End")
	return rec
}

func kinds(evs []calllog.Event) []calllog.Kind {
	out := make([]calllog.Kind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func TestCallEventsInOrder(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{Writer: "w1"})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "echo", ToolVersion: "v1", Args: frame.MustPayload(map[string]any{"a": 1})})
	require.NoError(t, err)
	in, _ := frame.NewStarted("c1", frame.CallerToProvider)
	rec.Input(in)
	rec.Request(recorder.RequestInfo{Child: "child-1", ToolVersion: "v2"})
	rec.Output(chunk(t, "c1", 1, map[string]any{"text": "he"}))
	rec.Output(chunk(t, "c1", 2, map[string]any{"text": "llo"}))
	rec.Retry(frame.CodeTransportError, "child died")
	rec.Request(recorder.RequestInfo{Child: "child-2"})
	rec.Output(chunk(t, "c1", 1, map[string]any{"text": "hi"}))
	require.NoError(t, rec.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"ok": true}))))
	if err := rec.End(ctx, recorder.Done(nil)); !errors.Is(err, recorder.ErrEnded) {
		require.FailNow(t, fmt.Sprintf("second End = %v, want ErrEnded", err))
	}
	rec.Output(chunk(t, "c1", 2, map[string]any{"text": "late"})) // ignored after the end

	evs := slices.Collect(rec.Events())
	want := []calllog.Kind{calllog.KindStarted, calllog.KindInput, calllog.KindRequest, calllog.KindOutput, calllog.KindOutput,
		calllog.KindRetry, calllog.KindRequest, calllog.KindOutput, calllog.KindCompleted}
	if !slices.Equal(kinds(evs), want) {
		require.FailNow(t, fmt.Sprintf("kinds = %v, want %v", kinds(evs), want))
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Tree != "c1" || e.Call != "c1" || e.Writer != "w1" || e.Parent != "" {
			require.FailNow(t, fmt.Sprintf("event %d position = %+v", i, position(e)))
		}
		if wantAfter := uint64(i); e.After != wantAfter {
			require.FailNow(t, fmt.Sprintf("event %d after = %d, want %d", i, e.After, wantAfter))
		}
	}
	if evs[0].ToolVersion != "v1" || evs[8].ToolVersion != "v2" || evs[6].Attempt != 2 || evs[6].Child != "child-2" {
		require.FailNow(t, fmt.Sprintf("version/attempt not recorded: %+v / %+v", evs[0], evs[6]))
	}
	if evs[0].Payload == nil || evs[0].Payload.Keys != 1 {
		require.FailNow(t, fmt.Sprintf("started keeps no arguments: %+v", evs[0].Payload))
	}
	if evs[5].Error == nil || evs[5].Error.Code != frame.CodeTransportError {
		require.FailNow(t, fmt.Sprintf("retry has no reason: %+v", evs[5]))
	}
	if o, ok := rec.Outcome(); !ok || o.Kind != calllog.KindCompleted {
		require.FailNow(t, fmt.Sprintf("Outcome = %+v, %v", o, ok))
	}
}

func TestEventsWatchedLive(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{})
	rec, err := r.Begin(ctx, recorder.CallInfo{Tool: "count"})
	require.NoError(t, err)
	seen := make(chan calllog.Event)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // stopped by the call's end, which ends the iteration
		defer wg.Done()
		for e := range rec.Events() {
			seen <- e
		}
		close(seen)
	}()
	next := func() calllog.Event {
		select {
		case e, ok := <-seen:
			require.True(t, ok, "stream ended early")
			return e
		case <-ctx.Done():
			require.FailNow(t, "no event")
		}
		return calllog.Event{}
	}
	if e := next(); e.Kind != calllog.KindStarted || e.After != 0 {
		require.FailNow(t, fmt.Sprintf("first = %v after %d", e.Kind, e.After))
	}
	rec.Request(recorder.RequestInfo{})
	if e := next(); e.Kind != calllog.KindRequest {
		require.FailNow(t, fmt.Sprintf("second = %v", e.Kind))
	}
	rec.End(ctx, recorder.Cancelled("stop"))
	if e := next(); e.Kind != calllog.KindCancelled || e.Error.Code != frame.CodeCancelled {
		require.FailNow(t, fmt.Sprintf("third = %+v", e))
	}
	if _, ok := <-seen; ok {
		require.FailNow(t, "stream did not end at the call's end")
	}
	wg.Wait()
}

func TestProgramTree(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{Writer: "w"})
	var progRec, stepRec *recorder.Record
	release := make(chan struct{})
	var bg sync.WaitGroup
	err := r.Program(ctx, recorder.CallInfo{ID: "p1", Tool: "reply"}, func(ctx context.Context) error {
		progRec = recorder.Running(ctx)
		stepRec = runCall(t, ctx, r, recorder.CallInfo{ID: "s1", Tool: "triage"}, 2)
		// Steps made concurrently, and one that outlives fn.
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runCall(t, ctx, r, recorder.CallInfo{ID: "s2-" + string(rune('a'+i)), Tool: "support"}, 3)
			}()
		}
		wg.Wait()
		late, err := r.Begin(ctx, recorder.CallInfo{ID: "late", Tool: "slow"})
		if err != nil {
			return err
		}
		bg.Add(1)
		go func() {
			defer bg.Done()
			<-release
			late.End(context.Background(), recorder.Failed(frame.CodeTimeout, "deadline", true))
		}()
		// Detached work is a tree of its own.
		runCall(t, recorder.Detached(ctx), r, recorder.CallInfo{ID: "d1", Tool: "log"}, 1)
		close(release)
		return nil
	})
	bg.Wait()
	require.NoError(t, err)
	evs := slices.Collect(progRec.Events())
	// 1 started + s1 (started, request, 2 out, done = 5) + 4×(1+1+3+1) + late (2) + end = 1+5+24+2+1
	require.EqualValuesf(t, 33, len(evs), "program stream has %d events, want 33", len(evs))
	for i, e := range evs {
		require.Falsef(t, e.Tree != "p1" || e.Seq != uint64(i+1), "event %d: tree %q seq %d: the tree is numbered once", i, e.Tree, e.Seq)
		require.NotEqualValues(t, "d1", e.Call, "detached call in the program's tree")
		require.Falsef(t, e.Call != "p1" && e.Parent != "p1", "step %s has parent %q", e.Call, e.Parent)
	}
	last := evs[len(evs)-1]
	require.Falsef(t, last.Call != "p1" || last.Kind != calllog.KindCompleted || !last.Program, "last event = %+v; the program's end must come after every step's", last)
	// A stream on a step shows its events with the tree's numbers, first after none.
	sevs := slices.Collect(stepRec.Events())
	if len(sevs) != 5 || sevs[0].After != 0 || sevs[0].Seq != 2 || sevs[1].After != sevs[0].Seq {
		require.FailNow(t, fmt.Sprintf("step stream: %d events, first %+v", len(sevs), position(sevs[0])))
	}
	// The program's context is gone: a call begun with it now is refused.
	if _, err := r.Begin(progRec.Context(ctx), recorder.CallInfo{Tool: "x"}); !errors.Is(err, calllog.ErrParentEnded) {
		require.FailNow(t, fmt.Sprintf("Begin under an ended call = %v, want ErrParentEnded", err))
	}
}

func TestEndWaitsForStepsAndGivesUpWithContext(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{})
	root, _ := r.Begin(ctx, recorder.CallInfo{ID: "root", Program: true})
	step, err := r.Begin(root.Context(ctx), recorder.CallInfo{ID: "step"})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := root.End(short, recorder.Done(nil)); !errors.Is(err, recorder.ErrStepsRunning) {
		require.FailNow(t, fmt.Sprintf("End with a running step = %v, want ErrStepsRunning", err))
	} else if !errors.Is(err, context.DeadlineExceeded) || err.Error() != recorder.ErrStepsRunning.Error() {
		// A user of the host cannot name ErrStepsRunning: it matches
		// the context's error, its message unchanged.
		require.FailNow(t, fmt.Sprintf("End with a running step = %q, want it to match context.DeadlineExceeded too", err))
	}
	select {
	case <-root.Done():
		require.FailNow(t, "root ended before its step")
	default:
	}
	step.End(ctx, recorder.Done(nil))
	<-root.Done()
	evs := slices.Collect(root.Events())
	if e := evs[len(evs)-1]; e.Call != "root" || e.Kind != calllog.KindCancelled {
		require.FailNow(t, fmt.Sprintf("root's end = %+v, want cancelled after the step", e))
	}
}

func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 22, 10, 0, 123456789, time.UTC)
	full := calllog.Event{Kind: calllog.KindOutput, Tree: "t", Writer: "w", Seq: 7, After: 6, At: at, Call: "c", Parent: "t",
		Tool: "count", ToolVersion: "1.0", Attempt: 2, FrameKind: frame.KindChunk, FrameSeq: 3,
		Payload: &calllog.Content{Type: "object", Bytes: 4, Keys: 1, Value: frame.MustPayload(map[string]any{"i": 1})},
		Media:   &calllog.MediaInfo{Kind: "inline", MediaType: "audio/pcm", Bytes: 3, Data: []byte{1, 2, 3}}}
	failed := calllog.Event{Kind: calllog.KindFailed, Tree: "t", Writer: "w", Seq: 1, At: at, Call: "t", Tool: "x",
		Error: &frame.Error{Code: frame.CodeUnreachable, Message: "pool down", Synthetic: true}, Refused: "pool_down"}
	for _, e := range []calllog.Event{full, failed} {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var back calllog.Event
		require.NoErrorf(t, json.Unmarshal(b, &back), "%s", b)
		b2, _ := json.Marshal(back)
		require.Falsef(t, string(b) != string(b2), "round trip changed the JSON:\n%s\n%s", b, b2)
	}
	b, _ := json.Marshal(failed)
	var m map[string]any
	json.Unmarshal(b, &m)
	require.Falsef(t, m["format"] != float64(1) || m["after"] != nil || m["parent"] != nil || m["kind"] != "failed", "format/after/parent/kind wrong: %s", b)
	if _, ok := m["after"]; !ok {
		require.FailNow(t, fmt.Sprintf("after must be present (null) on the first event: %s", b))
	}
	bad := []string{`{"format":2,"kind":"done"}`, `{"format":1,"kind":"nope","at":"2026-01-01T00:00:00Z"}`,
		`{"format":1,"kind":"failed","at":"2026-01-01T00:00:00Z","error":{"code":"nope"}}`, `[1]`}
	for _, s := range bad {
		var e calllog.Event
		if err := json.Unmarshal([]byte(s), &e); !errors.Is(err, calllog.ErrFormat) {
			assert.Fail(t, fmt.Sprintf("%s: err = %v, want ErrFormat", s, err))
		}
	}
}

func TestContentPolicy(t *testing.T) {
	ctx := testCtx(t)
	for _, full := range []bool{false, true} {
		obs := &collector{}
		store := &eventstore.Memory{}
		r := newRecorder(t, calllog.Options{FullContent: full, Observers: []calllog.Observer{obs}, Journal: &calllog.Journal{Store: store, Required: true}})
		rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c", Tool: "t", Args: frame.MustPayload(map[string]any{"secret": "abc", "n": 2})})
		require.NoError(t, err)
		f, _ := frame.NewChunk("c", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}),
			&frame.InlineMedia{Data: []byte("raw"), MediaType: "text/plain"})
		rec.Output(f)
		require.NoError(t, rec.End(ctx, recorder.Done(nil)))
		r.Drain(ctx)
		kept, _ := store.EventsAfter(ctx, "c", 0, 0)
		for _, evs := range [][]calllog.Event{obs.got(), kept} {
			require.EqualValuesf(t, 3, len(evs), "%d events", len(evs))
			args, out := evs[0].Payload, evs[1]
			require.Falsef(t, args.Type != "object" || args.Keys != 2 || args.Bytes == 0 || out.Media.Bytes != 3, "shape not kept: %+v %+v", args, out.Media)
			hasContent := args.Value != nil && out.Payload.Value != nil && out.Media.Data != nil
			require.Falsef(t, hasContent != full, "full content %v: content kept = %v", full, hasContent)
		}
		// The caller's own stream always has the content.
		if evs := slices.Collect(rec.Events()); evs[0].Payload.Value == nil {
			require.FailNow(t, "watcher's stream lost the content")
		}
	}
}

func TestRefusedCallIsInTheLog(t *testing.T) {
	ctx := testCtx(t)
	obs := &collector{}
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{obs}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c", Tool: "nope"})
	require.NoError(t, err)
	unknown := errors.New("host: unknown tool")
	rec.End(ctx, recorder.Refused("unknown_tool", frame.CodeInvalidFrame, unknown))
	r.Drain(ctx)
	evs := obs.got()
	require.Falsef(t, len(evs) != 2 || evs[1].Kind != calllog.KindFailed || evs[1].Refused != "unknown_tool" || evs[1].Error.Code != frame.CodeInvalidFrame, "refused call log = %+v", evs)
}

func TestReplay(t *testing.T) {
	ctx := testCtx(t)
	store := &eventstore.Memory{}
	r := newRecorder(t, calllog.Options{FullContent: true, Journal: &calllog.Journal{Store: store, Required: true}})
	err := r.Program(ctx, recorder.CallInfo{ID: "p", Tool: "prog"}, func(ctx context.Context) error {
		rec, err := r.Begin(ctx, recorder.CallInfo{ID: "a", Tool: "say", ToolVersion: "v9"})
		if err != nil {
			return err
		}
		rec.Request(recorder.RequestInfo{})
		rec.Output(chunk(t, "a", 1, map[string]any{"text": "lost"}))
		rec.Retry(frame.CodeTransportError, "reset")
		rec.Request(recorder.RequestInfo{})
		rec.Output(chunk(t, "a", 1, map[string]any{"text": "hel"}))
		rec.Output(chunk(t, "a", 2, map[string]any{"text": "lo"}))
		rec.End(ctx, recorder.Done(frame.MustPayload(map[string]any{"v": 1})))
		b, _ := r.Begin(ctx, recorder.CallInfo{ID: "b", Tool: "fail"})
		b.Request(recorder.RequestInfo{})
		b.End(ctx, recorder.Failed(frame.CodeUnreachable, "child died", true))
		return &frame.Error{Code: frame.CodeUnreachable, Message: "child died"}
	})
	var fe *frame.Error
	require.ErrorAs(t, err, &fe, "Program =")
	kept, _ := store.EventsAfter(ctx, "p", 0, 0)
	rp := replay.Events(kept)
	a, b, p := rp.Call("a"), rp.Call("b"), rp.Call("p")
	require.Falsef(t, a.Text != "hello" || a.Attempts != 2 || len(a.Frames) != 3 || a.Err() != nil || a.ToolVersion != "v9", "a replay = %+v", a)
	var v map[string]any
	a.Outcome.Result.Decode(&v)
	if v["v"] != float64(1) { // Decode follows encoding/json: a number in an any is a float64
		require.FailNow(t, fmt.Sprintf("a's value = %v", v))
	}
	if err := b.Err(); !errors.As(err, &fe) || fe.Code != frame.CodeUnreachable || !b.Frames[0].Synthetic {
		require.FailNow(t, fmt.Sprintf("b replay = %+v, err %v", b, err))
	}
	require.Falsef(t, !p.Program || !p.Ended || p.Outcome.Kind != calllog.KindFailed || rp.Lost != 0, "p replay = %+v", p)
	if got := replay.Events(append(slices.Clone(kept[:2]), kept[4:]...)); got.Lost != 2 {
		require.FailNow(t, fmt.Sprintf("replay with a gap: lost %d, want 2", got.Lost))
	}
	if got := replay.Events(kept[3:]); got.Lost != 3 {
		require.FailNow(t, fmt.Sprintf("replay without the first three: lost %d, want 3", got.Lost))
	}
}

// countingHandler counts warnings.
type countingHandler struct{ warns atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level == slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func TestHistoryBoundShowsTheLoss(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{History: 5})
	rec := runCall(t, ctx, r, recorder.CallInfo{}, 10) // 13 events
	evs := slices.Collect(rec.Events())
	require.EqualValuesf(t, 6, len(evs), "watcher got %d events, want the 5 kept and the end", len(evs))
	end := evs[5]
	require.Falsef(t, end.Kind != calllog.KindCompleted || end.Seq != 13 || end.After != 12 || evs[4].Seq != 5, "end = seq %d after %d; want 13 after 12 (not given)", end.Seq, end.After)
}

// Past a full history a chunk is still given to observers and the
// journal, and still joins a parent's history that has room; the next event kept shows the gap.
func TestOutputPastFullHistory(t *testing.T) {
	ctx := testCtx(t)
	const n = 12
	obs := &collector{}
	store := &eventstore.Memory{}
	for _, tc := range []string{"none", "observer", "journal"} {
		t.Run(tc, func(t *testing.T) {
			opts := readersFor(tc, obs, store)
			opts.History = 4
			r := newRecorder(t, opts)
			rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c-" + tc, Tool: "t"})
			require.NoError(t, err)
			rec.Request(recorder.RequestInfo{Child: "c0"})
			for i := range n {
				rec.Output(chunk(t, rec.ID(), uint64(i+1), map[string]any{"text": "ab"}))
			}
			require.NoError(t, rec.End(ctx, recorder.Done(nil)))
			evs := slices.Collect(rec.Events())
			if len(evs) != 5 || evs[4].Seq != n+3 || evs[4].After != n+2 {
				require.FailNow(t, fmt.Sprintf("history: %d events, last seq %d after %d; want 5, %d after %d", len(evs), evs[len(evs)-1].Seq, evs[len(evs)-1].After, n+3, n+2))
			}
			require.NoError(t, r.Drain(ctx))
			var kept []calllog.Event
			switch tc {
			case "none":
				return
			case "observer":
				kept = obs.got()
			case "journal":
				if kept, err = store.EventsAfter(ctx, rec.ID(), 0, 0); err != nil {
					require.FailNow(t, fmt.Sprint(err))
				}
			}
			require.Falsef(t, len(kept) != n+3, "%s kept %d events, want all %d", tc, len(kept), n+3)
			for i, ev := range kept {
				require.Falsef(t, ev.Seq != uint64(i+1) || ev.After != uint64(i), "%s event %d: seq %d after %d", tc, i, ev.Seq, ev.After)
			}
		})
	}
	t.Run("step", func(t *testing.T) {
		r := newRecorder(t, calllog.Options{History: 4})
		parent, err := r.Begin(ctx, recorder.CallInfo{ID: "p", Tool: "t", Program: true})
		require.NoError(t, err)
		step := runCall(t, parent.Context(ctx), r, recorder.CallInfo{ID: "s", Tool: "t"}, 2)
		// The parent's history (4) fills with its start and the step's
		// first three events; the step's own keeps its four and its end.
		require.NoError(t, parent.End(ctx, recorder.Done(nil)))
		if got := len(slices.Collect(step.Events())); got != 5 {
			require.FailNow(t, fmt.Sprintf("step kept %d events, want 4 and its end", got))
		}
		pe := slices.Collect(parent.Events())
		if len(pe) != 5 || pe[3].Call != "s" || pe[3].Kind != calllog.KindOutput {
			require.FailNow(t, fmt.Sprintf("parent history %v, want its start and the step's first three, then its end", kinds(pe)))
		}
	})
}

// Output events keep each chunk's own content whoever reads them: with no
// observer and no journal (the kept form is never built), with only an
// observer, and with only a journal; across many chunks.
func TestOutputContentPerChunk(t *testing.T) {
	ctx := testCtx(t)
	const n = 700
	for _, tc := range []string{"none", "observer", "journal"} {
		t.Run(tc, func(t *testing.T) {
			obs := &collector{}
			store := &eventstore.Memory{}
			opts := readersFor(tc, obs, store)
			opts.History = n + 3 // every event, for Events to read back
			r := newRecorder(t, opts)
			rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c", Tool: "t"})
			require.NoError(t, err)
			rec.Request(recorder.RequestInfo{Child: "c0"})
			want := make([]frame.Payload, n)
			for i := range n {
				s := strings.Repeat("x", i%7)
				f := chunk(t, "c", uint64(i+1), map[string]any{"i": i, "text": s})
				want[i] = f.Payload
				rec.Output(f)
			}
			require.NoError(t, rec.End(ctx, recorder.Done(nil)))
			evs := slices.Collect(rec.Events())
			require.Falsef(t, len(evs) != n+3, "%d events, want %d", len(evs), n+3)
			for i, ev := range evs[2 : n+2] {
				require.Falsef(t, ev.Kind != calllog.KindOutput || ev.FrameSeq != uint64(i+1) || ev.Seq != uint64(i+3) || ev.After != uint64(i+2), "event %d: kind %v frame %d seq %d after %d", i, ev.Kind, ev.FrameSeq, ev.Seq, ev.After)
				if !bytes.Equal(ev.Payload.Value, want[i]) || ev.Payload.Bytes != len(want[i]) || ev.Payload.Keys != 2 {
					require.FailNow(t, fmt.Sprintf("event %d: content %+v, want %d bytes", i, ev.Payload, len(want[i])))
				}
			}
			require.NoError(t, r.Drain(ctx))
			var kept []calllog.Event
			switch tc {
			case "observer":
				kept = obs.got()
			case "journal":
				// Required: End returned once the end was kept.
				if kept, err = store.EventsAfter(ctx, "c", 0, 0); err != nil {
					require.FailNow(t, fmt.Sprint(err))
				}
			}
			if tc == "none" {
				return
			}
			require.Falsef(t, len(kept) != n+3, "%s kept %d events, want %d", tc, len(kept), n+3)
			for i, ev := range kept[2 : n+2] {
				if ev.Payload == nil || ev.Payload.Value != nil || ev.Payload.Bytes != len(want[i]) || ev.Payload.Keys != 2 {
					require.FailNow(t, fmt.Sprintf("%s event %d: kept form %+v, want shape of %d bytes", tc, i, ev.Payload, len(want[i])))
				}
			}
		})
	}
}

// OutputsAt records a batch of frames as OutputAt records each: in order,
// all at the time given, their text in Text, and nothing after the end.
func TestOutputsAtRecordsABatchInOrder(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c", Tool: "t"})
	require.NoError(t, err)
	rec.Request(recorder.RequestInfo{Child: "c0"})
	received := time.Now()
	rec.OutputsAt([]frame.Frame{
		chunk(t, "c", 1, map[string]any{"text": "a"}),
		chunk(t, "c", 2, map[string]any{"text": "b"}),
		chunk(t, "c", 3, map[string]any{"i": 3}),
	}, received)
	rec.OutputsAt(nil, received)
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))
	rec.OutputsAt([]frame.Frame{chunk(t, "c", 4, map[string]any{"text": "late"})}, received)
	evs := slices.Collect(rec.Events())
	require.Len(t, evs, 6, "started, request, three outputs, end")
	for i, ev := range evs[2:5] {
		require.Equal(t, calllog.KindOutput, ev.Kind)
		require.EqualValues(t, i+1, ev.FrameSeq)
		require.True(t, ev.At.Equal(received), "output %d at %v, want %v", i+1, ev.At, received)
	}
}

// OutputAt records the time it is given, but never one before the tree's
// last event.
func TestOutputAtKeepsTimesInOrder(t *testing.T) {
	ctx := testCtx(t)
	r := newRecorder(t, calllog.Options{})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c", Tool: "t"})
	require.NoError(t, err)
	rec.Request(recorder.RequestInfo{Child: "c0"})
	received := time.Now()
	rec.OutputAt(chunk(t, "c", 1, map[string]any{"i": 1}), received)
	rec.OutputAt(chunk(t, "c", 2, map[string]any{"i": 2}), received)
	rec.OutputAt(chunk(t, "c", 3, map[string]any{"i": 3}), received.Add(-time.Hour))
	rec.Output(chunk(t, "c", 4, map[string]any{"i": 4}))
	future := time.Now().Add(time.Hour)
	rec.OutputAt(chunk(t, "c", 5, map[string]any{"i": 5}), future)
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))
	evs := slices.Collect(rec.Events())
	require.EqualValuesf(t, 8, len(evs), "%d events, want 8", len(evs))
	if !evs[6].At.Equal(future) || evs[7].At.Before(future) {
		require.FailNow(t, fmt.Sprintf("after a time in the future (%v) the end is at %v: times went backwards", evs[6].At, evs[7].At))
	}
	out := evs[2:6]
	if !out[0].At.Equal(received) || !out[1].At.Equal(received) {
		require.FailNow(t, fmt.Sprintf("output times %v, %v; want the given %v", out[0].At, out[1].At, received))
	}
	require.Falsef(t, evs[1].At.After(received), "the request was recorded after the time given for the output: test is wrong")
	if !out[2].At.Equal(received) {
		require.FailNow(t, fmt.Sprintf("a time before the last event's was kept: %v, want %v", out[2].At, received))
	}
	if out[3].At.Before(received) {
		require.FailNow(t, fmt.Sprintf("Output's own time %v is before the last event's %v", out[3].At, received))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			require.FailNow(t, fmt.Sprintf("event %d at %v is before event %d at %v", i, evs[i].At, i-1, evs[i-1].At))
		}
	}
}

// position names where e is in its tree's log, for failure messages.
func position(e calllog.Event) string {
	return fmt.Sprintf("%s/%s/%d", e.Tree, e.Writer, e.Seq)
}

// A call begun with WithCaller that starts a tree names the caller on its
// started event; a step does not (it is in its parent's tree). BeginStep
// begins a step of the running call, or nothing without one; a request
// names the remote tree it is given.
func TestLinksAcrossTrees(t *testing.T) {
	ctx := testCtx(t)
	store := &eventstore.Memory{}
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: store, Required: true}})
	far := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: store, Required: true}})

	rec, err := recorder.BeginStep(ctx, recorder.CallInfo{ID: "lonely", Tool: "x"})
	require.Falsef(t, rec != nil || err != nil, "BeginStep without a running call = %v, %v; want nothing", rec, err)
	err = r.Program(ctx, recorder.CallInfo{ID: "p", Tool: "prog"}, func(ctx context.Context) error {
		step, err := recorder.BeginStep(ctx, recorder.CallInfo{ID: "p-1", Tool: "echo"})
		if err != nil {
			return err
		}
		if step.Tree() != "p" || step.Parent() == nil || step.Parent().ID() != "p" {
			return fmt.Errorf("step in tree %q", step.Tree())
		}
		cctx := recorder.WithCaller(context.Background(), &calllog.Link{Tree: step.Tree(), Call: step.ID()})
		remote, err := far.Begin(cctx, recorder.CallInfo{ID: "r", Tool: "echo"})
		if err != nil {
			return err
		}
		inner, err := far.Begin(remote.Context(cctx), recorder.CallInfo{ID: "r-1", Tool: "inner"})
		if err != nil {
			return err
		}
		step.Request(recorder.RequestInfo{Child: "remote:far", Remote: &calllog.Link{Tree: remote.Tree(), Call: remote.ID()}})
		if err := inner.End(ctx, recorder.Done(nil)); err != nil {
			return err
		}
		if err := remote.End(ctx, recorder.Done(nil)); err != nil {
			return err
		}
		return step.End(ctx, recorder.Done(nil))
	})
	require.NoError(t, err)
	mine, _ := store.EventsAfter(ctx, "p", 0, 0)
	var req *calllog.Event
	for i := range mine {
		if mine[i].Caller != nil {
			require.FailNow(t, fmt.Sprintf("the caller's tree names a caller: %+v", mine[i]))
		}
		if mine[i].Kind == calllog.KindRequest {
			req = &mine[i]
		}
	}
	require.Falsef(t, req == nil || req.Call != "p-1" || req.Remote == nil || *req.Remote != (calllog.Link{Tree: "r", Call: "r"}), "request = %+v", req)
	theirs, _ := store.EventsAfter(ctx, "r", 0, 0)
	require.Falsef(t, len(theirs) != 4 || theirs[0].Caller == nil || *theirs[0].Caller != (calllog.Link{Tree: "p", Call: "p-1"}), "remote tree = %+v", theirs)
	if theirs[1].Kind != calllog.KindStarted || theirs[1].Call != "r-1" || theirs[1].Caller != nil {
		require.FailNow(t, fmt.Sprintf("the remote tree's step names a caller: %+v", theirs[1]))
	}
}
