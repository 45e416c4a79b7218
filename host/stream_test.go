package host

import (
	"context"
	"errors"
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
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`{"pre`, `fix":"z`, `"}`} {
		if err := a.Fragment(f); err != nil {
			t.Fatal(err)
		}
	}
	c, err := a.Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	okCall(t, c, "t")
	if err := a.Fragment("x"); !errors.Is(err, errArgsClosed) {
		t.Fatalf("Fragment after Done: %v", err)
	}
	var evs []calllog.Event
	for e := range c.Events() {
		evs = append(evs, e)
	}
	if got, want := kinds(evs), "started arguments arguments arguments request input(started) input(chunk) output(chunk) input(completed) done"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if !evs[0].ArgumentsStreamed || evs[0].Payload != nil {
		t.Fatalf("started %+v", evs[0])
	}
	for i, f := range []string{`{"pre`, `fix":"z`, `"}`} {
		e := evs[1+i]
		if e.FragmentIndex != i || e.FragmentBytes != len(f) || e.Fragment != f || !e.FragmentKept {
			t.Fatalf("fragment %d: %+v", i, e)
		}
	}
	var args struct {
		Prefix string `json:"prefix"`
	}
	if p := evs[4].Payload; p == nil || p.Value.Decode(&args) != nil || args.Prefix != "z" {
		t.Fatalf("request payload %+v", evs[4].Payload)
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
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frags {
			if err := a.Fragment(f); err != nil {
				t.Fatal(err)
			}
		}
		_, err = a.Done(ctx)
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Fatalf("%q: Done: %v", frags, err)
		}
		refused = append(refused, a.ID())
		o, ended := a.rec.Outcome()
		if !ended || o.Refused != "schema" {
			t.Fatalf("%q: outcome %+v %v", frags, o, ended)
		}
	}
	// Aborted, and abandoned by its context: cancelled, never sent.
	a, err = h.StreamArguments(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	a.Fragment(`{"prefix":`)
	if err := a.Abort("the model stopped"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Done(ctx); !errors.Is(err, errArgsClosed) {
		t.Fatalf("Done after Abort: %v", err)
	}
	refused = append(refused, a.ID())
	sctx, cancel := context.WithCancel(ctx)
	a, err = h.StreamArguments(sctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	a.Fragment(`{`)
	cancel()
	<-a.rec.Done()
	if o, _ := a.rec.Outcome(); o.Kind != calllog.KindCancelled {
		t.Fatalf("abandoned: %+v", o)
	}
	refused = append(refused, a.ID())
	if _, err := h.StreamArguments(ctx, "nope"); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}

	// A plain call after them all: the child saw its invoke, and none of
	// the partial calls'.
	c, err = h.Call(ctx, "ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	okCall(t, c, "after")
	lines := invokes()
	if !invoked(lines, c.ID()) {
		t.Fatalf("invokes %q", lines)
	}
	for _, id := range refused {
		if invoked(lines, id) {
			t.Fatalf("the child was sent partial call %s: %q", id, lines)
		}
	}

	// Observers get the kept form: sizes, not the fragments' text.
	if err := h.FlushObservers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range obs.got() {
		if e.Kind == calllog.KindArguments && (e.FragmentKept || e.Fragment != "" || e.FragmentBytes == 0) {
			t.Fatalf("observer given %+v", e)
		}
	}
}
