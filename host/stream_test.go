package host

import (
	"context"
	"errors"
	"fmt"
	"github.com/stretchr/testify/require"
	"testing"
	"time"

	"github.com/skulkrt/skulk/calllog"
)

func TestStreamedArguments(t *testing.T) {
	cfg := fakeConfig("serve")
	invokes := invokeLog(t, &cfg)
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 20*time.Second)
	obs := &collector{}

	// Fragments that assemble into valid arguments: the call runs.
	a, err := h.StreamArguments(ctx, "ok", WithObservers(obs))
	require.NoError(t, err)
	for _, f := range []string{`{"pre`, `fix":"z`, `"}`} {
		require.NoError(t, a.Fragment(f))
	}
	c, err := a.Done(ctx)
	require.NoError(t, err)
	okCall(t, c, "t")
	if err := a.Fragment("x"); !errors.Is(err, errArgsClosed) {
		require.FailNow(t, fmt.Sprintf("Fragment after Done: %v", err))
	}
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
	var refused []string
	for _, frags := range [][]string{
		{`{"prefix":"z"`},            // incomplete
		{`{"n":-1}`},                 // against the schema
		{`{"n":1}`, `{"n":2}`},       // two objects
		{`["not", `, `"an object"]`}, // not an object
	} {
		a, err := h.StreamArguments(ctx, "ok")
		require.NoError(t, err)
		for _, f := range frags {
			require.NoError(t, a.Fragment(f))
		}
		_, err = a.Done(ctx)
		var se *SchemaError
		require.ErrorAsf(t, err, &se, "%q: Done", frags)
		refused = append(refused, a.ID())
		o, ended := a.rec.Outcome()
		require.Falsef(t, !ended || o.Refused != "schema", "%q: outcome %+v %v", frags, o, ended)
	}
	// Aborted, and abandoned by its context: cancelled, never sent.
	a, err = h.StreamArguments(ctx, "ok")
	require.NoError(t, err)
	a.Fragment(`{"prefix":`)
	require.NoError(t, a.Abort("the model stopped"))
	if _, err := a.Done(ctx); !errors.Is(err, errArgsClosed) {
		require.FailNow(t, fmt.Sprintf("Done after Abort: %v", err))
	}
	refused = append(refused, a.ID())
	sctx, cancel := context.WithCancel(ctx)
	a, err = h.StreamArguments(sctx, "ok")
	require.NoError(t, err)
	a.Fragment(`{`)
	cancel()
	<-a.rec.Done()
	if o, _ := a.rec.Outcome(); o.Kind != calllog.KindCancelled {
		require.FailNow(t, fmt.Sprintf("abandoned: %+v", o))
	}
	refused = append(refused, a.ID())
	if _, err := h.StreamArguments(ctx, "nope"); !errors.Is(err, ErrUnknownTool) {
		require.FailNow(t, fmt.Sprintf("unknown tool: %v", err))
	}

	// A plain call after them all: the child saw its invoke, and none of
	// the partial calls'.
	c, err = h.Call(ctx, "ok", nil)
	require.NoError(t, err)
	okCall(t, c, "after")
	lines := invokes()
	require.Falsef(t, !invoked(lines, c.ID()), "invokes %q", lines)
	for _, id := range refused {
		require.Falsef(t, invoked(lines, id), "the child was sent partial call %s: %q", id, lines)
	}

	// Observers get the kept form: sizes, not the fragments' text.
	require.NoError(t, h.FlushObservers(ctx))
	for _, e := range obs.got() {
		require.Falsef(t, e.Kind == calllog.KindArguments && (e.FragmentKept || e.Fragment != "" || e.FragmentBytes == 0), "observer given %+v", e)
	}
}
