package recorder_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
)

// A call's history keeps what each frame's media is, never its bytes,
// while an observer with full content is still given them.
func TestHistoryKeepsNoMediaBytes(t *testing.T) {
	ctx := testCtx(t)
	obs := &collector{}
	r := newRecorder(t, calllog.Options{FullContent: true, Observers: []calllog.Observer{obs}})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "m", Tool: "t"})
	require.NoError(t, err)
	rec.Request(recorder.RequestInfo{Child: "c0"})
	data := make([]byte, 1<<20)
	inline, err := frame.NewChunk("m", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{MediaType: "image/png", Data: data})
	require.NoError(t, err)
	rec.Output(inline)
	sum := strings.Repeat("ab", 32)
	blob, err := frame.NewChunk("m", frame.ProviderToCaller, 2, nil, &frame.BlobMedia{MediaType: "video/mp4", BlobID: "b1", SHA256: sum, SizeBytes: 5 << 30})
	require.NoError(t, err)
	rec.Output(blob)
	in, err := frame.NewChunk("m", frame.CallerToProvider, 1, nil, &frame.InlineMedia{MediaType: "audio/wav", Data: data})
	require.NoError(t, err)
	rec.Input(in)
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))

	var media []*calllog.MediaInfo
	for ev := range rec.Events() {
		if ev.Media != nil {
			media = append(media, ev.Media)
		}
	}
	require.Len(t, media, 3)
	assert.Equal(t, calllog.MediaInfo{Kind: "inline", MediaType: "image/png", Bytes: 1 << 20}, *media[0])
	assert.Equal(t, calllog.MediaInfo{Kind: "blob", MediaType: "video/mp4", Bytes: 5 << 30, BlobID: "b1", SHA256: sum}, *media[1])
	assert.Equal(t, calllog.MediaInfo{Kind: "inline", MediaType: "audio/wav", Bytes: 1 << 20}, *media[2])

	require.NoError(t, r.Drain(ctx))
	var given int
	for _, ev := range obs.got() {
		if ev.Media != nil && ev.Media.Kind == "inline" {
			assert.Len(t, ev.Media.Data, 1<<20, "an observer with full content is given the bytes")
			given++
		}
	}
	assert.Equal(t, 2, given)
}

// A history is bounded in bytes as well as in events: past HistoryBytes
// only the call's end is kept, and its After shows the loss.
func TestHistoryBoundInBytes(t *testing.T) {
	ctx := testCtx(t)
	const limit = 64 << 10
	r := newRecorder(t, calllog.Options{History: 10_000, HistoryBytes: limit})
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "b", Tool: "t"})
	require.NoError(t, err)
	rec.Request(recorder.RequestInfo{Child: "c0"})
	big := strings.Repeat("x", 8<<10)
	const n = 100 // 800 KiB of payload
	for i := range n {
		rec.Output(chunk(t, "b", uint64(i+1), map[string]any{"text": big}))
	}
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))
	evs := slices.Collect(rec.Events())
	kept := 0
	for _, ev := range evs {
		if ev.Payload != nil {
			kept += len(ev.Payload.Value)
		}
	}
	assert.Less(t, len(evs), 12, "events kept past the byte bound")
	assert.LessOrEqual(t, kept, limit+9<<10, "payload bytes kept: the bound plus one event")
	end := evs[len(evs)-1]
	assert.Equal(t, calllog.KindCompleted, end.Kind)
	assert.Equal(t, uint64(n+2), end.After, "the end shows the events not kept")
}

// A journal's queue is bounded in the bytes its events hold, not only in
// events: with full content a store that falls behind a media flood drops
// what does not fit in Journal.QueueBytes (counted in Losses) instead of
// holding every attachment, and still keeps the call's end.
func TestJournalQueueBytesBound(t *testing.T) {
	ctx := testCtx(t)
	st := &testStore{}
	r := newRecorder(t, calllog.Options{FullContent: true,
		Journal: &calllog.Journal{Store: st, QueueBytes: 4 << 20, Timeout: time.Minute}})
	st.block()
	rec, err := r.Begin(ctx, recorder.CallInfo{ID: "q", Tool: "t"})
	require.NoError(t, err)
	data := make([]byte, 1<<20)
	for i := range 10 {
		f, err := frame.NewChunk("q", frame.ProviderToCaller, uint64(i+1), nil, &frame.InlineMedia{MediaType: "image/png", Data: data})
		require.NoError(t, err)
		rec.Output(f)
	}
	require.NoError(t, rec.End(ctx, recorder.Done(nil)))
	st.unblock()
	require.NoError(t, r.Close(ctx))
	kept, err := st.EventsAfter(ctx, "q", 0, 0)
	require.NoError(t, err)
	media := 0
	for _, ev := range kept {
		if ev.Media != nil {
			media++
			assert.Len(t, ev.Media.Data, 1<<20)
		}
	}
	// Middle events may fill three quarters of QueueBytes (the rest is
	// held for calls' starts and ends): at most 3 MiB of media waits.
	assert.Positive(t, media)
	assert.LessOrEqual(t, media, 3, "media events kept: no more than 3 MiB of them")
	assert.Equal(t, uint64(10-media), r.Losses().JournalEvents, "every chunk left out is counted")
	assert.Equal(t, calllog.KindCompleted, kept[len(kept)-1].Kind, "the end, holding nothing, still fits")
}
