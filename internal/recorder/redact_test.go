package recorder_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// Options.Redact replaces the values of the keys it names, at any depth,
// in what observers and journals are given; the payload's shape is the
// original's, the content is marked redacted, a streamed fragment is kept
// as its size only, and the call's own watchers still see everything.
func TestRedactedKeysNeverKept(t *testing.T) {
	ctx := testCtx(t)
	obs := &collector{}
	st := &eventstore.Memory{}
	r := newRecorder(t, calllog.Options{FullContent: true, Redact: []string{"password", "token"},
		Observers: []calllog.Observer{obs}, Journal: &calllog.Journal{Store: st, Required: true}})

	args := frame.MustPayload(map[string]any{"user": "ada", "password": "hunter2",
		"session": map[string]any{"token": "t0k3n", "scopes": []any{"a", map[string]any{"password": "p2"}}}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "login", Args: args})
	require.NoError(t, err)
	rec.Output(chunk(t, "c1", 1, map[string]any{"text": "ok", "token": "again"}))
	plain := frame.MustPayload(map[string]any{"n": 1})
	require.NoError(t, rec.End(ctx, recorder.Done(plain)))

	sa, err := r.Begin(ctx, recorder.CallInfo{ID: "c2", Tool: "login", ArgumentsStreamed: true})
	require.NoError(t, err)
	sa.Arguments(`{"password": "hunter2"}`)
	require.NoError(t, sa.End(ctx, recorder.Cancelled("")))
	require.NoError(t, r.Drain(ctx))

	want := map[string]any{"user": "ada", "password": recorder.RedactedValue,
		"session": map[string]any{"token": recorder.RedactedValue, "scopes": []any{"a", map[string]any{"password": recorder.RedactedValue}}}}
	for name, evs := range map[string][]calllog.Event{"observer": obs.got(), "journal": mustEvents(t, st, "c1")} {
		started := evs[0]
		got, err := started.Payload.Value.Map()
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
		assert.True(t, started.Payload.Redacted, name)
		assert.Equal(t, len(args), started.Payload.Bytes, "%s: the shape is the payload's as it was", name)
		out, err := evs[1].Payload.Value.Map()
		require.NoError(t, err, name)
		assert.Equal(t, map[string]any{"text": "ok", "token": recorder.RedactedValue}, out, name)
		end := evs[2]
		assert.False(t, end.Payload.Redacted, "%s: nothing named in the value", name)
		assert.Equal(t, plain, end.Payload.Value, name)
		b, err := started.MarshalJSON()
		require.NoError(t, err)
		assert.NotContains(t, string(b), "hunter2", name)
		assert.NotContains(t, string(b), "t0k3n", name)
	}
	frag := mustEvents(t, st, "c2")[1]
	assert.Equal(t, calllog.KindArguments, frag.Kind)
	assert.False(t, frag.FragmentKept, "a fragment cannot be redacted by key: only its size is kept")
	assert.Equal(t, len(`{"password": "hunter2"}`), frag.FragmentBytes)

	var own []calllog.Event
	for e := range rec.Events() {
		own = append(own, e)
	}
	assert.Equal(t, args, own[0].Payload.Value, "the call's own watchers see its full content")
}

func TestRedactRefusesAnEmptyKey(t *testing.T) {
	_, err := recorder.New(calllog.Options{Redact: []string{"password", ""}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Options.Redact[1]")
}

func mustEvents(t *testing.T, st calllog.EventStore, tree string) []calllog.Event {
	t.Helper()
	evs, err := st.EventsAfter(testCtx(t), tree, 0, 0)
	require.NoError(t, err)
	return evs
}
