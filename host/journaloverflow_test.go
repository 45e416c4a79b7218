package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
)

// slowStore is a real SQLite store whose Keep takes delay longer, so that
// a best-effort journal's queue fills as it would behind a loaded disk.
type slowStore struct {
	*sqlitestore.Store
	delay time.Duration
}

func (s *slowStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Keep(ctx, c, evs)
}

func openSQLite(t *testing.T) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "calls.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// The overflow run of issue 41 in small: a program of many streaming
// calls, a best-effort journal whose queue holds a few hundred events and
// whose store is slow. The middle events that did not fit are dropped and
// counted; every call's start and end is kept, so a follower of the tree
// ends, replay shows every call ended, the gaps it shows add up to the
// host's count exactly, and a takeover of the tree records nothing.
func TestBestEffortJournalOverflowKeepsEveryCallsBoundaries(t *testing.T) {
	// The store is opened after the host's leak check counted its
	// descriptors, and closed before that check runs again.
	store := &slowStore{delay: 50 * time.Millisecond}
	h := recordedHost(t, realConfig(), calllog.Options{Content: calllog.ContentFull,
		Journal: &calllog.Journal{Store: store, Queue: 300}})
	st := openSQLite(t)
	store.Store = st
	ctx := callCtx(t, 90*time.Second)

	const workers, each, chunks = 6, 5, 150
	var tree string
	var treeOnce sync.Once
	treeKnown := make(chan struct{})
	err := h.Program(ctx, "load", func(ctx context.Context) error {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() { // waited for below
				defer wg.Done()
				for range each {
					c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": chunks}))
					if err != nil {
						errs <- err
						return
					}
					treeOnce.Do(func() { tree = c.Tree(); close(treeKnown) })
					res, err := c.Wait()
					if err != nil {
						errs <- err
						return
					}
					if n, _ := res.Map(); fmt.Sprint(n["n"]) != fmt.Sprint(chunks) {
						errs <- fmt.Errorf("a call's value: %v", n)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return errors.Join(<-errs)
	})
	require.NoError(t, err, "every caller gets its value")
	<-treeKnown

	// A follower from the start, reading while the writer drains.
	type followed struct {
		steps []calllog.Step
		err   error
	}
	fdone := make(chan followed, 1)
	go func() { // ends at the tree's end, or with ctx
		var f followed
		for st, err := range calllog.NewFollower(st, tree, 0, 10*time.Millisecond).Steps(ctx) {
			if err != nil {
				f.err = err
				break
			}
			f.steps = append(f.steps, st)
		}
		fdone <- f
	}()

	require.NoError(t, h.Close(ctx), "Close keeps the queue within its drain bound")
	lost := h.Stats().JournalEventsLost
	require.NotZero(t, lost, "the queue never overflowed: the test shows nothing")

	var f followed
	select {
	case f = <-fdone:
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end: the tree's end was not kept")
	}
	require.NoError(t, f.err)
	var gaps uint64
	for _, s := range f.steps {
		if s.LostFrom != 0 {
			gaps += s.LostTo - s.LostFrom + 1
		}
	}
	last := f.steps[len(f.steps)-1].Event
	t.Logf("%d events numbered, %d kept, %d dropped", last.Seq, len(f.steps), lost)
	assert.Equal(t, tree, last.Call, "the follower ended at the tree's end")
	assert.Equal(t, calllog.KindDone, last.Kind)
	assert.Equal(t, lost, gaps, "the gaps a follower is shown are the events the host counted as lost")
	assert.Equal(t, uint64(len(f.steps))+lost, last.Seq, "every numbered event is kept or counted")

	events, err := st.EventsAfter(ctx, tree, 0, 0)
	require.NoError(t, st.Close()) // before the host's leak check: opened before the host
	require.NoError(t, err)
	r := calllog.Replay(events)
	require.Len(t, r.Calls, 1+workers*each, "every call's start was kept")
	for _, c := range r.Calls {
		require.True(t, c.Ended, "call %s shown running", c.Call)
		assert.Equal(t, calllog.KindDone, c.Outcome.Kind, "call %s", c.Call)
	}
	assert.Equal(t, lost, r.Lost, "replay counts the loss exactly")

}
