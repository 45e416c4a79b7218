package recorder_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/recorder"
)

// stuckStore keeps nothing until released; unlike testStore's gate it
// honours its context, as a store must.
type stuckStore struct {
	mem     eventstore.Memory // not embedded: no KeepNew, every send goes through Keep
	release chan struct{}
}

func (s *stuckStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.mem.Keep(ctx, c, evs)
}

func (s *stuckStore) Claim(ctx context.Context, tree, writer string) (calllog.Claim, error) {
	return s.mem.Claim(ctx, tree, writer)
}

func (s *stuckStore) EventsAfter(ctx context.Context, tree string, after uint64, limit int) ([]calllog.Event, error) {
	return s.mem.EventsAfter(ctx, tree, after, limit)
}

func mediaChunk(t *testing.T, id string, seq uint64, n int) frame.Frame {
	t.Helper()
	f, err := frame.NewChunk(id, frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"i": seq}),
		&frame.InlineMedia{MediaType: "application/octet-stream", Data: bytes.Repeat([]byte{7}, n)})
	require.NoError(t, err)
	return f
}

// The journal queue is bounded in bytes, media and payloads counted: with
// the store stalled, chunks of 200 KiB of media fill the three quarters
// of a 1 MiB bound middle events may use and the rest are dropped; a call's
// end and a start whose values do not fit beside them are kept without
// their values (value_dropped); the bound is never passed, and once the
// store answers everything admitted is kept and the room given back.
func TestJournalQueueBoundInBytes(t *testing.T) {
	ctx := testCtx(t)
	const bound = 1 << 20
	st := &stuckStore{release: make(chan struct{})}
	r := newRecorder(t, calllog.Options{FullContent: true,
		Journal: &calllog.Journal{Store: st, QueueBytes: bound}})

	c1, err := r.Begin(ctx, recorder.CallInfo{ID: "c1", Tool: "media"})
	require.NoError(t, err)
	for i := range 12 {
		c1.Output(mediaChunk(t, "c1", uint64(i+1), 200<<10))
		_, b := r.JournalQueued()
		require.LessOrEqual(t, b, int64(bound), "after chunk %d", i)
	}
	big := frame.MustPayload(map[string]any{"blob": strings.Repeat("v", 500<<10)})
	require.NoError(t, c1.End(ctx, recorder.Done(big)))
	c2, err := r.Begin(ctx, recorder.CallInfo{ID: "c2", Tool: "media", Args: big})
	require.NoError(t, err)
	require.NoError(t, c2.End(ctx, recorder.Done(nil)))
	_, b := r.JournalQueued()
	require.LessOrEqual(t, b, int64(bound))

	l := r.Losses()
	assert.Equal(t, uint64(9), l.JournalEvents, "3 chunks of 200 KiB fit in 768 KiB, 9 do not")
	assert.Equal(t, uint64(2), l.JournalValues, "c1's value and c2's arguments did not fit")

	close(st.release)
	require.NoError(t, r.Close(ctx))
	n, b := r.JournalQueued()
	assert.Zero(t, n, "room given back")
	assert.Zero(t, b, "room given back")

	kept, _ := st.EventsAfter(ctx, "c1", 0, 0)
	require.Equal(t, []calllog.Kind{calllog.KindStarted, calllog.KindOutput, calllog.KindOutput, calllog.KindOutput, calllog.KindCompleted}, kinds(kept))
	assert.Equal(t, uint64(14), kept[4].Seq)
	assert.True(t, kept[4].Payload.ValueDropped)
	assert.Nil(t, kept[4].Payload.Value)
	assert.Equal(t, len(big), kept[4].Payload.Bytes, "the shape of what was not kept")
	assert.Equal(t, 200<<10, len(kept[1].Media.Data))
	kept, _ = st.EventsAfter(ctx, "c2", 0, 0)
	require.Equal(t, []calllog.Kind{calllog.KindStarted, calllog.KindCompleted}, kinds(kept))
	assert.True(t, kept[0].Payload.ValueDropped)
}

// Close waits for a stalled store until its context's deadline and then
// says how many events it did not keep.
func TestCloseDrainBoundSaysWhatItDropped(t *testing.T) {
	ctx := testCtx(t)
	st := &stuckStore{release: make(chan struct{})}
	r, err := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: st}}, nil)
	require.NoError(t, err)
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "c1"})
	require.NoError(t, err)
	for i := range 5 {
		rec.Output(chunk(t, "c1", uint64(i+1), map[string]any{"i": i}))
	}
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = r.Close(cctx)
	took := time.Since(start)
	require.ErrorIs(t, err, calllog.ErrCloseDropped)
	assert.Contains(t, err.Error(), ": 7 events")
	assert.Less(t, took, 5*time.Second, "Close waited past its drain bound")
	assert.Equal(t, uint64(7), r.Losses().JournalEvents)
}
