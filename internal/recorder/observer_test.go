package recorder_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// perEvent records n output events on one call and returns the mean time
// per event.
func perEvent(t *testing.T, ctx context.Context, r *recorder.Recorder, n int) time.Duration {
	rec, err := r.Begin(ctx, recorder.CallInfo{Tool: "bench"})
	require.NoError(t, err)
	f := chunk(t, rec.ID(), 1, map[string]any{"text": "x"})
	start := time.Now()
	for i := range n {
		f.Sequence = uint64(i + 1)
		rec.Output(f)
	}
	d := time.Since(start)
	rec.End(ctx, recorder.Done(nil))
	return d / time.Duration(n)
}

func TestBlockedObserverDoesNotSlowCallsAndSeesItsLoss(t *testing.T) {
	ctx := testCtx(t)
	release := make(chan struct{})
	blocked := &collector{}
	blocker := eventstore.ObserverFunc(func(ctx context.Context, e calllog.Event) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return blocked.Observe(ctx, e)
	})
	// An observer costs each event what building it for the observer
	// takes, blocked or not; a blocked one must cost no more than that:
	// what does not fit in its queue is dropped, never waited for.
	plain := newRecorder(t, calllog.Options{})
	keeping := newRecorder(t, calllog.Options{Observers: []calllog.Observer{eventstore.ObserverFunc(func(context.Context, calllog.Event) error { return nil })}})
	slowed := newRecorder(t, calllog.Options{Observers: []calllog.Observer{blocker}})

	// Interleaved rounds, best of each, so both see the same machine load.
	const n = 20_000
	best := func(d, b time.Duration) time.Duration {
		if b == 0 || d < b {
			return d
		}
		return b
	}
	var without, keepingUp, with time.Duration
	for range 3 {
		without = best(perEvent(t, ctx, plain, n), without)
		keepingUp = best(perEvent(t, ctx, keeping, n), keepingUp)
		with = best(perEvent(t, ctx, slowed, n), with)
	}
	t.Logf("per event: %v without an observer, %v with one keeping up, %v with one blocked", without, keepingUp, with)
	require.Falsef(t, with > 3*keepingUp+time.Microsecond, "a blocked observer slowed recording: %v per event against %v", with, keepingUp)

	// A call begun while the observer is blocked: its start is kept, in
	// the room middle events leave to boundaries.
	tail, err := slowed.Begin(ctx, recorder.CallInfo{ID: "tail"})
	require.NoError(t, err)
	close(release)
	require.NoError(t, slowed.Drain(ctx))
	// Given: the first round's start, the outputs that fit in three
	// quarters of the queue beside the room held for its end, and that
	// end; each later round's start and end; tail's start.
	const middle = recorder.ObserverQueue - recorder.ObserverQueue/4
	got := blocked.got()
	require.Falsef(t, len(got) != middle+5, "blocked observer was given %d events, want %d", len(got), middle+5)
	starts, ends := 0, 0
	for _, e := range got {
		switch {
		case e.Kind == calllog.KindStarted:
			starts++
		case e.Kind.IsEnd():
			ends++
		}
	}
	require.Falsef(t, starts != 4 || ends != 3, "given %d starts and %d ends; want every call's (4 and 3)", starts, ends)
	// The first round's end names as after the last output, which the
	// observer was not given: it sees the loss.
	if e := got[middle-1]; e.Kind != calllog.KindCompleted || e.Seq != n+2 || e.After != n+1 || got[middle-2].Seq != uint64(middle-1) {
		require.FailNow(t, fmt.Sprintf("the first round's end = %+v after %d; want event %d after %d", position(e), e.After, n+2, n+1))
	}
	tail.Output(chunk(t, "tail", 1, map[string]any{"a": 1}))
	tail.End(ctx, recorder.Done(nil))
	slowed.Drain(ctx)
	got = blocked.got()
	require.Falsef(t, len(got) != middle+7, "after catching up the observer has %d events, want %d", len(got), middle+7)
	if next := got[middle+5]; next.Call != "tail" || next.Kind != calllog.KindOutput || next.After != 1 {
		require.FailNow(t, fmt.Sprintf("tail's output = %+v after %d; want it after tail's start (1)", position(next), next.After))
	}
	// Every event recorded and not given is counted: three rounds of n
	// outputs between a start and an end, and tail's three.
	if lost, want := slowed.Losses().ObserverEvents, uint64(3*(n+2)+3-len(got)); lost != want {
		require.FailNow(t, fmt.Sprintf("Losses().ObserverEvents = %d, want %d", lost, want))
	}
	if l := plain.Losses(); l != (recorder.Losses{}) {
		require.FailNow(t, fmt.Sprintf("a recorder without observers lost %+v", l))
	}
}

func TestFailingObserverWarnedOnce(t *testing.T) {
	ctx := testCtx(t)
	for _, mode := range []string{"panic", "error"} {
		t.Run(mode, func(t *testing.T) {
			h := &countingHandler{}
			calls := 0
			bad := eventstore.ObserverFunc(func(context.Context, calllog.Event) error {
				calls++
				if mode == "panic" {
					panic("observer bug")
				}
				return errors.New("observer failed")
			})
			good := &collector{}
			r := newLoggingRecorder(t, calllog.Options{Observers: []calllog.Observer{bad, good}}, slog.New(h))
			for range 3 {
				runCall(t, ctx, r, recorder.CallInfo{}, 2)
			}
			require.NoError(t, r.Drain(ctx))
			if calls != 1 || h.warns.Load() != 1 {
				require.FailNow(t, fmt.Sprintf("failing observer called %d times, warned %d times; want 1 and 1", calls, h.warns.Load()))
			}
			if len(good.got()) != 15 {
				require.FailNow(t, fmt.Sprintf("the other observer got %d events, want 15", len(good.got())))
			}
			// The failed observer had the first event only.
			if l := r.Losses(); l.ObserversFailed != 1 || l.ObserverEvents != 14 {
				require.FailNow(t, fmt.Sprintf("Losses() = %+v, want 1 observer failed and 14 events lost", l))
			}
		})
	}
}

func TestObserverLayersAddUp(t *testing.T) {
	ctx := testCtx(t)
	top, prog, call := &collector{}, &collector{}, &collector{}
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{top}})
	err := r.Program(ctx, recorder.CallInfo{ID: "p", Observers: []calllog.Observer{prog}}, func(ctx context.Context) error {
		runCall(t, ctx, r, recorder.CallInfo{ID: "a"}, 1)
		runCall(t, ctx, r, recorder.CallInfo{ID: "b", Observers: []calllog.Observer{call}}, 1)
		return nil
	})
	require.NoError(t, err)
	runCall(t, ctx, r, recorder.CallInfo{ID: "other"}, 0)
	r.Drain(ctx)
	if n := len(top.got()); n != 2+4+4+3 {
		require.FailNow(t, fmt.Sprintf("recorder observer got %d, want 13", n))
	}
	if n := len(prog.got()); n != 10 {
		require.FailNow(t, fmt.Sprintf("program observer got %d, want 10 (the program and its steps)", n))
	}
	cg := call.got()
	require.Falsef(t, len(cg) != 4 || cg[0].Call != "b" || cg[0].After != 0 || cg[1].After != cg[0].Seq, "call observer got %+v", cg)
	// Each reader's after is the event before in what it is shown.
	pg := prog.got()
	for i := 1; i < len(pg); i++ {
		if pg[i].After != pg[i-1].Seq {
			require.FailNow(t, fmt.Sprintf("program observer: event %d after %d, want %d", i, pg[i].After, pg[i-1].Seq))
		}
	}
}

func TestObserverCallsNotFedBack(t *testing.T) {
	ctx := testCtx(t)
	var r *recorder.Recorder
	echo, other := &collector{}, &collector{}
	// An observer that makes a call on every started event it is given.
	caller := eventstore.ObserverFunc(func(octx context.Context, e calllog.Event) error {
		if e.Kind == calllog.KindStarted {
			echo.Observe(octx, e)
			rec, err := r.Begin(octx, recorder.CallInfo{Tool: "from-observer"})
			if err != nil {
				return err
			}
			return rec.End(octx, recorder.Done(nil))
		}
		return nil
	})
	r = newRecorder(t, calllog.Options{Observers: []calllog.Observer{caller, other}})
	runCall(t, ctx, r, recorder.CallInfo{Tool: "user"}, 0)
	// The first Drain lets the calling observer see the user's call and make
	// its own (recorded before its Observe returns); the second lets the
	// other observer be given that call's events.
	r.Drain(ctx)
	r.Drain(ctx)
	if got := echo.got(); len(got) != 1 || got[0].Tool != "user" {
		require.FailNow(t, fmt.Sprintf("the calling observer was given %d started events, want only the user's (not its own call's)", len(got)))
	}
	tools := []string{}
	for _, e := range other.got() {
		tools = append(tools, e.Tool)
	}
	require.Truef(t, slices.Contains(tools, "from-observer"), "other observers must still see the observer's call: %v", tools)
}

func TestDrainWaitsForSlowObserver(t *testing.T) {
	ctx := testCtx(t)
	slow := &collector{}
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{eventstore.ObserverFunc(func(ctx context.Context, e calllog.Event) error {
		time.Sleep(time.Millisecond) // a slow observer, not synchronisation
		return slow.Observe(ctx, e)
	})}})
	runCall(t, ctx, r, recorder.CallInfo{}, 20)
	require.NoError(t, r.Drain(ctx))
	if n := len(slow.got()); n != 23 {
		require.FailNow(t, fmt.Sprintf("after Drain the observer had %d events, want 23", n))
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	runCall(t, ctx, r, recorder.CallInfo{}, 20)
	if err := r.Drain(short); !errors.Is(err, context.Canceled) {
		// The observer may have caught up already on a fast machine.
		if n := len(slow.got()); n != 46 {
			require.FailNow(t, fmt.Sprintf("Drain with a done context = %v", err))
		}
	}
}

func TestClosedRecorderRefusesCalls(t *testing.T) {
	ctx := testCtx(t)
	r, _ := recorder.New(calllog.Options{}, nil)
	rec, _ := r.Begin(ctx, recorder.CallInfo{})
	require.NoError(t, r.Close(ctx))
	if _, err := r.Begin(ctx, recorder.CallInfo{}); !errors.Is(err, recorder.ErrClosed) {
		require.FailNow(t, fmt.Sprintf("Begin after Close = %v", err))
	}
	rec.Output(chunk(t, rec.ID(), 1, map[string]any{"a": 1}))
	rec.End(ctx, recorder.Done(nil))
	require.False(t, r.Close(ctx) != nil, "second Close failed")
	_ = frame.CodeCancelled
}

// endsOnly is a collector that wants started and end events only.
type endsOnly struct{ collector }

func (*endsOnly) WantsKind(k calllog.Kind) bool { return k == calllog.KindStarted || k.IsEnd() }

// An observer with a WantsKind method is given only the kinds it wants;
// the others are not losses, and each After names the event it was given
// before.
func TestKindFilterObserver(t *testing.T) {
	ctx := testCtx(t)
	some, all := &endsOnly{}, &collector{}
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{some, all}})
	for range 3 {
		runCall(t, ctx, r, recorder.CallInfo{}, 4)
	}
	require.NoError(t, r.Drain(ctx))
	if n := len(all.got()); n != 3*(4+3) {
		require.FailNow(t, fmt.Sprintf("the observer of every kind got %d events, want %d", n, 3*(4+3)))
	}
	got := some.got()
	want := []calllog.Kind{calllog.KindStarted, calllog.KindCompleted, calllog.KindStarted, calllog.KindCompleted, calllog.KindStarted, calllog.KindCompleted}
	if !slices.Equal(kinds(got), want) {
		require.FailNow(t, fmt.Sprintf("the filtered observer got %v, want %v", kinds(got), want))
	}
	for i, e := range got {
		require.Falsef(t, i%2 == 1 && e.After != got[i-1].Seq || i%2 == 0 && e.After != 0, "event %d (%v, seq %d) is after %d", i, e.Kind, e.Seq, e.After)
	}
	if l := r.Losses(); l != (recorder.Losses{}) {
		require.FailNow(t, fmt.Sprintf("filtered events counted as losses: %+v", l))
	}
}

// startsOnly is a collector that wants started events only.
type startsOnly struct{ collector }

func (*startsOnly) WantsKind(k calllog.Kind) bool { return k == calllog.KindStarted }

// An observer that takes starts and no ends holds no room for ends it is
// never given: it is given the start of every call, however many calls
// the host makes (room held for each would fill its queue after
// ObserverQueue calls, and every later call would be dropped).
func TestStartsOnlyObserverHoldsNoRoom(t *testing.T) {
	ctx := testCtx(t)
	obs := &startsOnly{}
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{obs}})
	const n = recorder.ObserverQueue + 100
	for i := range n {
		rec, err := r.Begin(ctx, recorder.CallInfo{ID: fmt.Sprint("c", i)})
		require.NoError(t, err)
		require.NoError(t, rec.End(ctx, recorder.Done(nil)))
		if i%1000 == 0 {
			require.NoError(t, r.Drain(ctx)) // the observer keeps up
		}
	}
	require.NoError(t, r.Drain(ctx))
	assert.Len(t, obs.got(), n, "a start for every call")
	assert.Zero(t, r.Losses().ObserverEvents)
}
