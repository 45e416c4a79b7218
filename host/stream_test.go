package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
)

// refusedTree returns the tree a refusal was recorded in.
func refusedTree(t *testing.T, err error) string {
	t.Helper()
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	return re.Tree
}

// endOf returns the end event obs was given for call id.
func endOf(t *testing.T, obs *collector, id string) calllog.Event {
	t.Helper()
	for _, e := range obs.got() {
		if e.Call == id && e.Kind.IsEnd() {
			return e
		}
	}
	require.FailNow(t, "no end event for "+id)
	return calllog.Event{}
}

func TestStreamedArguments(t *testing.T) {
	cfg := fakeConfig("serve")
	invokes := invokeLog(t, &cfg)
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 20*time.Second)
	obs := &collector{}

	// Fragments that assemble into valid arguments: the call runs.
	c, err := h.Call(ctx, "ok", nil, WithObservers(obs), WithArgumentFragments(slices.Values([]string{`{"pre`, `fix":"z`, `"}`})))
	require.NoError(t, err)
	okCall(t, c, "t")
	var evs []calllog.Event
	for e := range c.Events() {
		evs = append(evs, e)
	}
	if got, want := kinds(evs), "started arguments arguments arguments request input(started) input(chunk) output(chunk) input(completed) done"; got != want {
		require.FailNow(t, fmt.Sprintf("events %s, want %s", got, want))
	}
	if !evs[0].ArgumentsStreamed || evs[0].Payload != nil {
		require.FailNow(t, fmt.Sprintf("started %+v", evs[0]))
	}
	for i, f := range []string{`{"pre`, `fix":"z`, `"}`} {
		e := evs[1+i]
		require.Falsef(t, e.FragmentIndex != i || e.FragmentBytes != len(f) || e.Fragment != f || !e.FragmentKept, "fragment %d: %+v", i, e)
	}
	var args struct {
		Prefix string `json:"prefix"`
	}
	if p := evs[4].Payload; p == nil || p.Value.Decode(&args) != nil || args.Prefix != "z" {
		require.FailNow(t, fmt.Sprintf("request payload %+v", evs[4].Payload))
	}

	// Fragments that never make valid arguments: refused, never sent.
	ends := &collector{}
	var refused []string
	for _, frags := range [][]string{
		{`{"prefix":"z"`},            // incomplete
		{`{"n":-1}`},                 // against the schema
		{`{"n":1}`, `{"n":2}`},       // two objects
		{`["not", `, `"an object"]`}, // not an object
		{`{"prefix":"`, strings.Repeat("z", int(h.cfg.Limits.MaxHeader)), `"}`}, // longer than max_header: refused at once
	} {
		want := min(len(frags), 2)
		if len(frags) < 3 {
			want = len(frags)
		}
		given := 0
		fragments := func(yield func(string) bool) {
			for _, f := range frags {
				given++
				if !yield(f) {
					return
				}
			}
		}
		_, err := h.Call(ctx, "ok", nil, WithObservers(ends), WithArgumentFragments(fragments))
		var se *SchemaError
		require.ErrorAsf(t, err, &se, "%.20q: Call", frags)
		require.Equalf(t, want, given, "%.20q: fragments given", frags)
		refused = append(refused, refusedTree(t, err))
	}
	// Given whole as well: refused.
	_, err = h.Call(ctx, "ok", frame.MustPayload(map[string]any{"prefix": "z"}), WithObservers(ends), WithArgumentFragments(slices.Values([]string{`{}`})))
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	refused = append(refused, refusedTree(t, err))

	// Abandoned by its context: cancelled, never sent, and the fragments
	// after it are not asked for.
	sctx, cancel := context.WithCancel(ctx)
	given := 0
	_, err = h.Call(sctx, "ok", nil, WithObservers(ends), WithArgumentFragments(func(yield func(string) bool) {
		given++
		if !yield(`{"prefix":`) {
			return
		}
		cancel()
		given++
		if !yield(`"z"}`) {
			return
		}
		given++
		yield(` `)
	}))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, given)
	require.NoError(t, h.FlushObservers(ctx))
	var abandoned string
	for _, e := range ends.got() {
		if e.Kind == calllog.KindCancelled {
			abandoned = e.Call
		}
	}
	require.NotEmpty(t, abandoned, "no cancelled call among %s", kinds(ends.got()))
	refused = append(refused, abandoned)
	for _, id := range refused[:len(refused)-1] {
		e := endOf(t, ends, id)
		require.Falsef(t, e.Kind != calllog.KindFailed || e.Refused != "schema", "%s: end %+v", id, e)
	}
	_, err = h.Call(ctx, "nope", nil, WithArgumentFragments(slices.Values([]string{`{}`})))
	require.ErrorIs(t, err, ErrUnknownTool)

	// A plain call after them all: the child saw its invoke, and none of
	// the partial calls'.
	c, err = h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	okCall(t, c, "after")
	lines := invokes()
	require.Truef(t, invoked(lines, c.ID()), "invokes %q", lines)
	for _, id := range refused {
		require.Falsef(t, invoked(lines, id), "the child was sent partial call %s: %q", id, lines)
	}

	// Observers get the kept form: sizes, not the fragments' text.
	require.NoError(t, h.FlushObservers(ctx))
	for _, e := range obs.got() {
		require.Falsef(t, e.Kind == calllog.KindArguments && (e.FragmentKept || e.Fragment != "" || e.FragmentBytes == 0), "observer given %+v", e)
	}
	if err := (&argumentStream{closed: true}).fragment("x"); !errors.Is(err, ErrSendClosed) {
		require.FailNow(t, fmt.Sprintf("fragment after done: %v", err))
	}
}

// A call with streamed arguments that its context cancels, under a required
// journal that does not confirm the end: Call returns ctx's error joined
// with the journal's, whichever of the context watch and Call's own range
// ended it (the pause after cancel lets the watch win in most runs).
func TestStreamedArgumentsCancelledJournalEnd(t *testing.T) {
	st := &flakyStore{release: make(chan struct{})}
	j := &calllog.Journal{Store: st, Required: true, Timeout: 300 * time.Millisecond}
	h := recordedHost(t, fakeConfig("serve"), calllog.Options{Journal: j})
	ctx := callCtx(t, 20*time.Second)
	st.holdEnds.Store(true)
	for _, pause := range []time.Duration{0, 50 * time.Millisecond} {
		sctx, cancel := context.WithCancel(ctx)
		_, err := h.Call(sctx, "ok", nil, WithArgumentFragments(func(yield func(string) bool) {
			if !yield(`{"prefix":`) {
				return
			}
			cancel()
			time.Sleep(pause)
			yield(`"z"}`)
		}))
		cancel()
		require.ErrorIsf(t, err, context.Canceled, "pause %v", pause)
		var je *calllog.JournalError
		require.ErrorAsf(t, err, &je, "pause %v: a required journal's failure is lost", pause)
		require.ErrorIs(t, err, calllog.ErrJournalEnd)
		require.Equal(t, calllog.KindCancelled, je.Outcome.Kind)
	}
	close(st.release)
}
