package recorder_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// When starts alone fill an observer's queue (each holds room for its
// end), the next call is dropped whole, with the calls made inside it;
// every call the observer was given the start of, it is given the end of,
// and the loss is counted exactly.
func TestObserverDropsACallWholeWhenItsStartDoesNotFit(t *testing.T) {
	ctx := testCtx(t)
	release := make(chan struct{})
	seen := &collector{}
	obs := eventstore.ObserverFunc(func(ctx context.Context, e calllog.Event) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return seen.Observe(ctx, e)
	})
	r := newRecorder(t, calllog.Options{Observers: []calllog.Observer{obs}})
	root, err := r.Begin(ctx, recorder.CallInfo{ID: "root", Program: true})
	require.NoError(t, err)
	// The root and fits-1 steps take the whole queue: a start and the room
	// for its end each.
	const fits = recorder.ObserverQueue / 2
	var steps []*recorder.Record
	for i := range fits - 1 {
		s, err := r.Begin(root.Context(ctx), recorder.CallInfo{ID: fmt.Sprint("s", i)})
		require.NoError(t, err)
		steps = append(steps, s)
	}
	lost, err := r.Begin(root.Context(ctx), recorder.CallInfo{ID: "lost", Program: true})
	require.NoError(t, err)
	inner, err := r.Begin(lost.Context(ctx), recorder.CallInfo{ID: "inner"})
	require.NoError(t, err)
	require.NoError(t, inner.End(ctx, recorder.Done(nil)))
	require.NoError(t, lost.End(ctx, recorder.Done(nil)))
	for _, s := range steps {
		require.NoError(t, s.End(ctx, recorder.Done(nil)))
	}
	require.NoError(t, root.End(ctx, recorder.Done(nil)))
	close(release)
	require.NoError(t, r.Drain(ctx))

	got := seen.got()
	open := map[string]bool{}
	for _, e := range got {
		assert.NotEqual(t, "lost", e.Call)
		assert.NotEqual(t, "inner", e.Call)
		switch {
		case e.Kind == calllog.KindStarted:
			open[e.Call] = true
		case e.Kind.IsEnd():
			assert.True(t, open[e.Call], "end of %s without its start", e.Call)
			delete(open, e.Call)
		}
	}
	assert.Empty(t, open, "calls given started and not ended")
	assert.Len(t, got, 2*fits)
	assert.Equal(t, uint64(4), r.Losses().ObserverEvents, "lost's and inner's starts and ends")
	last := got[len(got)-1]
	assert.Equal(t, "root", last.Call)
	assert.Equal(t, calllog.KindCompleted, last.Kind)
}

// A best-effort journal whose queue has no room for a step's start drops
// that step whole, with the steps made inside it; every call whose start
// it queued it keeps the end of, so the store holds no call started and
// not ended, and the loss is counted exactly.
func TestJournalDropsAStepWholeWhenItsStartDoesNotFit(t *testing.T) {
	ctx := testCtx(t)
	st := &stuckStore{release: make(chan struct{})}
	// Queue 8: the root and three steps take it all, a start and the room
	// for its end each.
	r := newRecorder(t, calllog.Options{Journal: &calllog.Journal{Store: st, Queue: 8}})
	root, err := r.Begin(ctx, recorder.CallInfo{ID: "root", Program: true})
	require.NoError(t, err)
	var steps []*recorder.Record
	for i := range 3 {
		s, err := r.Begin(root.Context(ctx), recorder.CallInfo{ID: fmt.Sprint("s", i)})
		require.NoError(t, err)
		steps = append(steps, s)
	}
	lost, err := r.Begin(root.Context(ctx), recorder.CallInfo{ID: "lost", Program: true})
	require.NoError(t, err)
	n, _ := r.JournalQueued()
	require.Equal(t, int64(8), n, "the queue's bound")
	// The store keeps what waits: only the room held for the four ends
	// stays taken, so a step made inside lost now would fit; it is
	// dropped all the same, with lost.
	close(st.release)
	require.Eventually(t, func() bool { n, _ := r.JournalQueued(); return n == 4 }, 10*time.Second, 5*time.Millisecond)
	inner, err := r.Begin(lost.Context(ctx), recorder.CallInfo{ID: "inner"})
	require.NoError(t, err)
	require.NoError(t, inner.End(ctx, recorder.Done(nil)))
	require.NoError(t, lost.End(ctx, recorder.Done(nil)))
	for _, s := range steps {
		require.NoError(t, s.End(ctx, recorder.Done(nil)))
	}
	require.NoError(t, root.End(ctx, recorder.Done(nil)))
	require.NoError(t, r.Close(ctx))

	kept, err := st.EventsAfter(ctx, "root", 0, 0)
	require.NoError(t, err)
	open := map[string]bool{}
	for _, e := range kept {
		assert.NotEqual(t, "lost", e.Call)
		assert.NotEqual(t, "inner", e.Call)
		switch {
		case e.Kind == calllog.KindStarted:
			open[e.Call] = true
		case e.Kind.IsEnd():
			assert.True(t, open[e.Call], "end of %s without its start", e.Call)
			delete(open, e.Call)
		}
	}
	assert.Empty(t, open, "calls kept started and not ended")
	assert.Len(t, kept, 8, "the root's and three steps' starts and ends")
	assert.Equal(t, uint64(4), r.Losses().JournalEvents, "lost's and inner's starts and ends")
	assert.Equal(t, calllog.KindCompleted, kept[len(kept)-1].Kind)
	assert.Equal(t, "root", kept[len(kept)-1].Call)
}
