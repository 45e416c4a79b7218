package jetstreamstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/replay"
)

// keepTree keeps a tree of n events (treeEvents).
func keepTree(ctx context.Context, t *testing.T, s *jetstreamstore.Store, id string, n int, ended bool) {
	t.Helper()
	_, err := s.KeepNew(ctx, id, "A", treeEvents(id, n, ended))
	require.NoError(t, err)
}

// treeEvents are the n events of a tree: its outermost call's start,
// chunks, and its end when ended.
func treeEvents(id string, n int, ended bool) []calllog.Event {
	evs := calllogtest.Events(id, "A", 1, n)
	evs[0].Kind = calllog.KindStarted
	if ended {
		evs[n-1].Kind, evs[n-1].FrameKind, evs[n-1].FrameSeq = calllog.KindCompleted, 0, 0
	}
	return evs
}

// TestReadsLeaveNoConsumer: reading 200 ended trees whole (small ones
// from the leader, larger ones through a consumer) leaves no consumer on
// the server, and a follower's consumer of a running tree is deleted by
// Close.
func TestReadsLeaveNoConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	s := open(t, srv.URL()+"/CALLS")
	// The 100 trees read through a consumer are many times the Store's
	// open consumers (maxCursors, 8): a reader that kept the consumer of
	// an ended tree would leave maxCursors of them, and one that left
	// every consumer would leave 100. Each read makes and deletes its
	// own consumer, so more trees would repeat the same work.
	const trees = 200
	// The trees are written by a few writers at once (the Store is safe
	// for concurrent use): one at a time, the writing took four times as
	// long as the reading this test is about.
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() { // stopped after its share of the trees
			for i := w; i < trees && errs[w] == nil; i += writers {
				n := 4
				if i%2 == 1 {
					n = 40 // past smallRead: read through a consumer
				}
				id := fmt.Sprintf("t%d", i)
				_, errs[w] = s.KeepNew(ctx, id, "A", treeEvents(id, n, true))
			}
		})
	}
	wg.Wait()
	for w, err := range errs {
		require.NoErrorf(t, err, "writer %d", w)
	}
	r, err := jetstreamstore.Open(ctx, srv.URL()+"/CALLS", jetstreamstore.Options{ReadOnly: true})
	require.NoError(t, err)
	start := time.Now()
	for i := range trees {
		rep, err := replay.FromStore(ctx, r, fmt.Sprintf("t%d", i), &replay.Replayer{})
		require.NoError(t, err)
		require.True(t, rep.Calls[0].Ended)
	}
	t.Logf("read %d trees in %v (%v a tree)", trees, time.Since(start), time.Since(start)/trees)
	st := jsStream(ctx, t, srv.URL(), "CALLS")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Consumers, "consumers left on the server after reading ended trees")

	keepTree(ctx, t, s, "live", 40, false)
	got, err := r.EventsAfter(ctx, "live", 0, 10)
	require.NoError(t, err)
	require.Len(t, got, 10)
	info, err = st.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Consumers, "a reader of a running tree keeps its consumer")
	require.NoError(t, r.Close())
	info, err = st.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Consumers, "Close deletes the reader's consumer")
}

// TestListTreesAndPrune: ListTrees gives the trees newest first with their
// tool, counts and end; Prune purges whole old trees, which readers then
// do not find and whose writer is fenced.
func TestListTreesAndPrune(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	s := open(t, srv.URL()+"/CALLS")
	keepTree(ctx, t, s, "t1", 3, true)
	keepTree(ctx, t, s, "t2", 12, false)
	trees, err := s.ListTrees(ctx)
	require.NoError(t, err)
	require.Len(t, trees, 2)
	assert.Equal(t, "t2", trees[0].Tree)
	assert.EqualValues(t, 12, trees[0].Events)
	assert.EqualValues(t, 12, trees[0].LastSeq)
	assert.Zero(t, trees[0].End)
	assert.Equal(t, "count", trees[0].Tool)
	assert.Equal(t, calllog.KindCompleted, trees[1].End)
	assert.False(t, trees[1].Start.IsZero())

	p, err := s.Prune(ctx, time.Hour)
	require.NoError(t, err)
	assert.Zero(t, p.Trees)
	time.Sleep(50 * time.Millisecond)
	p, err = s.Prune(ctx, 10*time.Millisecond)
	require.NoError(t, err)
	assert.EqualValues(t, 2, p.Trees)
	_, err = replay.FromStore(ctx, s, "t1", &replay.Replayer{})
	require.ErrorIs(t, err, calllog.ErrNoTree)
	trees, err = s.ListTrees(ctx)
	require.NoError(t, err)
	assert.Empty(t, trees)
	_, err = s.Prune(ctx, 0)
	require.ErrorIs(t, err, jetstreamstore.ErrPruneAge)
}

// TestCorruptEventAndMustExist: an event message that is not the event
// JSON form is a *CorruptEventError (ErrFormat) between readable events,
// read through a consumer and from the leader; MustExist never creates a
// stream.
func TestCorruptEventAndMustExist(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	_, err := jetstreamstore.Open(ctx, srv.URL()+"/NOPE", jetstreamstore.Options{MustExist: true})
	require.ErrorIs(t, err, jetstreamstore.ErrNoStream)
	s := open(t, srv.URL()+"/CALLS")
	for _, n := range []int{4, 20} { // from the leader, through a consumer
		tree := fmt.Sprintf("t%d", n)
		keepTree(ctx, t, s, tree, 2, false)
		// an event message by hand, in the store's layout, whose body is cut
		nc, err := nats.Connect(srv.URL())
		require.NoError(t, err)
		m := nats.NewMsg("skulk.calllog.CALLS." + tree + ".e")
		m.Header.Set("Skulk-Writer", "A")
		m.Header.Set("Skulk-Epoch", "1")
		m.Header.Set("Skulk-Seq", "3")
		m.Data = []byte(`{"format":1,"kind":`)
		_, err = nc.RequestMsg(m, 5*time.Second)
		require.NoError(t, err)
		nc.Close()
		c, err := s.Claim(ctx, tree, "A")
		require.NoError(t, err)
		rest := calllogtest.Events(tree, "A", 4, n-3)
		rest[len(rest)-1].Kind, rest[len(rest)-1].FrameKind = calllog.KindCompleted, 0
		require.NoError(t, s.Keep(ctx, c, rest))

		r, err := jetstreamstore.Open(ctx, srv.URL()+"/CALLS", jetstreamstore.Options{ReadOnly: true})
		require.NoError(t, err)
		rep, err := replay.FromStore(ctx, r, tree, &replay.Replayer{})
		require.NoError(t, err)
		assert.EqualValues(t, 1, rep.Corrupt, tree)
		assert.EqualValues(t, n-1, rep.Events, tree)
		got, err := r.EventsAfter(ctx, tree, 0, 0)
		var ce *calllog.CorruptEventError
		require.True(t, errors.As(err, &ce) && errors.Is(err, calllog.ErrFormat), "%v", err)
		assert.EqualValues(t, 3, ce.Seq)
		assert.Len(t, got, 2)
		require.NoError(t, r.Close())
	}
}
