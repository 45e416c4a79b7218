package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/replay"
)

// slowStore is a real SQLite store whose Keep waits until gate is closed
// (when set) and then takes delay longer, so that a best-effort journal's
// queue fills as it would behind a stalled or loaded disk.
type slowStore struct {
	*sqlitestore.Store
	gate  chan struct{}
	delay time.Duration
}

func (s *slowStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
	// The store keeps nothing until the program has ended (its first
	// batch, the tree's claim, excepted): the queue overflows whatever
	// the machine's load.
	store := &slowStore{gate: make(chan struct{})}
	h := recordedHost(t, realConfig(), calllog.Options{FullContent: true,
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
	close(store.gate)

	// A follower from the start, reading while the writer drains.
	type followed struct {
		steps []replay.Step
		err   error
	}
	fdone := make(chan followed, 1)
	go func() { // ends at the tree's end, or with ctx
		var f followed
		for st, err := range replay.Steps(calllog.Follow(ctx, st, tree, 0, 10*time.Millisecond)) {
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
		require.FailNow(t, "the follower did not end: the tree's end was not kept")
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
	assert.Equal(t, calllog.KindCompleted, last.Kind)
	assert.Equal(t, lost, gaps, "the gaps a follower is shown are the events the host counted as lost")
	assert.Equal(t, uint64(len(f.steps))+lost, last.Seq, "every numbered event is kept or counted")

	events, err := st.EventsAfter(ctx, tree, 0, 0)
	require.NoError(t, st.Close()) // before the host's leak check: opened before the host
	require.NoError(t, err)
	r := replay.Events(events)
	require.Len(t, r.Calls, 1+workers*each, "every call's start was kept")
	for _, c := range r.Calls {
		require.True(t, c.Ended, "call %s shown running", c.Call)
		assert.Equal(t, calllog.KindCompleted, c.Outcome.Kind, "call %s", c.Call)
	}
	assert.Equal(t, lost, r.Lost, "replay counts the loss exactly")

}

// heapPeak samples the live Go heap (as of the last collection) every
// 5 ms until stop is closed, and returns the largest sample.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() { // stopped by close(stop)
		var peak uint64
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// TestJournalQueueBytesBoundsHostMemory measures the host's heap while
// calls stream media of 1 MiB chunks under full content into a best-effort
// journal whose store keeps less than they make: the queue's byte bound
// holds the heap near QueueBytes, where an event bound alone let it grow
// with the media. The figures are in docs/performance.md.
func TestJournalQueueBytesBoundsHostMemory(t *testing.T) {
	if os.Getenv("SKULK_JOURNAL_MEMORY") == "" {
		t.Skip("streams 512 MiB of media twice: set SKULK_JOURNAL_MEMORY=1")
	}
	run := func(queueBytes int64) (peak uint64, lost uint64) {
		store := &slowStore{delay: 20 * time.Millisecond}
		h := recordedHost(t, realConfig(), calllog.Options{FullContent: true,
			Journal: &calllog.Journal{Store: store, QueueBytes: queueBytes}})
		st := openSQLite(t)
		store.Store = st
		ctx := callCtx(t, 3*time.Minute)
		runtime.GC()
		stop := make(chan struct{})
		peakC := heapPeak(stop)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() { // waited for below
				defer wg.Done()
				c, err := h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": 64 << 20, "chunk": 1 << 20}))
				if err != nil {
					assert.Fail(t, fmt.Sprint(err))
					return
				}
				for _, err := range c.Frames() {
					if err != nil {
						assert.Fail(t, fmt.Sprint(err))
						return
					}
				}
			}()
		}
		wg.Wait()
		err := h.Close(ctx)
		assert.False(t, err != nil && !errors.Is(err, calllog.ErrCloseDropped), err)
		close(stop)
		peak = <-peakC
		lost = h.Stats().JournalEventsLost
		require.NoError(t, st.Close())
		return peak, lost
	}
	bounded, lostB := run(0)
	unbounded, lostU := run(1 << 40)
	t.Logf("512 MiB of media in 1 MiB chunks: live heap peak %d MiB with QueueBytes 64 MiB (%d events dropped), %d MiB with no byte bound (%d dropped)",
		bounded>>20, lostB, unbounded>>20, lostU)
	assert.Less(t, bounded, uint64(160<<20), "the live heap stays near the byte bound")
}
