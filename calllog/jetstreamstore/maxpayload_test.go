package jetstreamstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/calllogtest"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/internal/replay"
)

// An event larger than the server's max_payload does not make the store
// unusable (which would stop the tree's journal writer and lose every
// later start and end of the tree): it is kept without its content (the
// payload's value, marked ValueDropped, and the media's data), and when
// even that does not fit it is left out, a gap readers are shown as a lost
// event. The events after it are kept, by Keep and by KeepNew.
func TestEventOverMaxPayload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const maxPayload = 16 << 10
	srv := natstest.Run(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	s := open(t, srv.URL()+"/SMALL")

	big := strings.Repeat("x", 4*maxPayload)
	batch := func(tree, writer string) []calllog.Event {
		evs := calllogtest.Events(tree, writer, 1, 5)
		evs[1].Payload.Value = frame.MustPayload(map[string]any{"text": big}) // too large: kept without it
		evs[2].Media = &calllog.MediaInfo{Kind: "inline", MediaType: "application/octet-stream",
			Bytes: int64(len(big)), Data: []byte(big)} // too large: kept without its data
		evs[2].Payload.Value = frame.MustPayload(map[string]any{"n": 1})
		evs[3].Tool = big // too large even without content: lost
		evs[4].Payload.Value = frame.MustPayload(map[string]any{"n": 5})
		return evs
	}
	check := func(tree string, want ...uint64) {
		t.Helper()
		got, err := s.EventsAfter(ctx, tree, 0, 0)
		require.NoError(t, err)
		seqs := make([]uint64, len(got))
		for i, e := range got {
			seqs[i] = e.Seq
		}
		require.Equal(t, want, seqs, "event 4 lost, the others kept")
		require.NotNil(t, got[1].Payload)
		assert.Nil(t, got[1].Payload.Value)
		assert.True(t, got[1].Payload.ValueDropped)
		require.NotNil(t, got[2].Media)
		assert.Nil(t, got[2].Media.Data)
		assert.Equal(t, int64(len(big)), got[2].Media.Bytes)
		assert.Nil(t, got[2].Payload.Value, "the event's content is left out whole")
		assert.True(t, got[2].Payload.ValueDropped)
		assert.False(t, got[3].Payload.ValueDropped)
		assert.NotNil(t, got[3].Payload.Value, "an event that fits keeps its content")
		assert.Equal(t, uint64(1), replay.Events(got).Lost, "replay counts the gap")
	}

	c, err := s.Claim(ctx, "k", "A")
	require.NoError(t, err)
	require.NoError(t, s.Keep(ctx, c, batch("k", "A")))
	// The writer goes on after it.
	require.NoError(t, s.Keep(ctx, c, calllogtest.Events("k", "A", 6, 1)))
	check("k", 1, 2, 3, 5, 6)

	_, err = s.KeepNew(ctx, "n", "A", batch("n", "A"))
	require.NoError(t, err)
	check("n", 1, 2, 3, 5)

	// A piece made only of events lost is passed over, and the next kept.
	lost := calllogtest.Events("k", "A", 7, 2)
	lost[0].Tool, lost[1].Tool = big, big
	require.NoError(t, s.Keep(ctx, c, lost))
	require.NoError(t, s.Keep(ctx, c, calllogtest.Events("k", "A", 9, 1)))
	got, err := s.EventsAfter(ctx, "k", 6, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, uint64(9), got[0].Seq)
}
