package calllog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/replay"
)

// TestDecodeErrorsMatchErrFormat: malformed JSON, a value of the wrong
// type and an unknown kind all match ErrFormat as *FormatError, from
// storedevent.Decode and Event.UnmarshalJSON (json.Unmarshal checks the
// syntax before it calls UnmarshalJSON: stores decode with
// storedevent.Decode).
func TestDecodeErrorsMatchErrFormat(t *testing.T) {
	for _, in := range []string{`{"format":1,"kind":`, `[1,2]`, `{"format":1,"kind":"started","seq":"one"}`,
		`{"format":1,"kind":"outburst","tree":"t","writer":"w","seq":1,"after":null,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x"}`, ``} {
		_, err := storedevent.Decode([]byte(in))
		require.ErrorIs(t, err, calllog.ErrFormat, "%q", in)
		var fe *calllog.FormatError
		require.ErrorAs(t, err, &fe, "%q", in)
		var e calllog.Event
		require.ErrorIs(t, e.UnmarshalJSON([]byte(in)), calllog.ErrFormat, "%q", in)
	}
}

// textEvent is an output event of call c with a "text" chunk.
func textEvent(tree, c string, seq uint64, text string) calllog.Event {
	p := frame.MustPayload(map[string]any{"text": text})
	return calllog.Event{Kind: calllog.KindOutput, Tree: tree, Writer: "w", Seq: seq, At: time.Unix(1, 0), Call: c, Tool: "t",
		FrameKind: frame.KindChunk, FrameSeq: seq, Payload: &calllog.Content{Type: "object", Bytes: len(p), Keys: 1, Value: p}}
}

// TestReplayerBounds: a Replayer keeps at most MaxText bytes of each
// call's text (cut at a character's start) and no value larger than
// MaxValue, and counts the rest; without Frames it keeps no frame.
func TestReplayerBounds(t *testing.T) {
	p := &replay.Replayer{MaxText: 10, MaxValue: 8}
	p.Add(calllog.Event{Kind: calllog.KindStarted, Tree: "t", Writer: "w", Seq: 1, Call: "t", Tool: "t"})
	p.Add(textEvent("t", "t", 2, "abcdefgh"))
	p.Add(textEvent("t", "t", 3, "ééé")) // 6 bytes: only one é fits after 8
	p.Add(textEvent("t", "t", 4, "more"))
	big := frame.MustPayload(map[string]any{"v": strings.Repeat("x", 40)})
	p.Add(calllog.Event{Kind: calllog.KindCompleted, Tree: "t", Writer: "w", Seq: 6, Call: "t", Tool: "t",
		Payload: &calllog.Content{Type: "object", Bytes: len(big), Keys: 1, Value: big}})
	r := p.Tree()
	c := r.Call("t")
	require.NotNil(t, c)
	assert.Equal(t, "abcdefghé", c.Text)
	assert.Equal(t, 18, c.TextBytes)
	assert.Nil(t, c.Outcome.Result)
	assert.Equal(t, len(big), c.ResultBytes)
	assert.Empty(t, c.Frames)
	assert.True(t, c.Ended)
	assert.EqualValues(t, 1, r.Lost, "event 5")
	assert.EqualValues(t, 5, r.Events)
}

// TestEventsPages: Events reads a tree of more events than one page in
// order, and replay.FromStore of a tree with no event is ErrNoTree.
func TestEventsPages(t *testing.T) {
	ctx := context.Background()
	var st eventstore.Memory
	c, err := st.Claim(ctx, "t", "w")
	require.NoError(t, err)
	var evs []calllog.Event
	for seq := uint64(1); seq <= 600; seq++ {
		evs = append(evs, textEvent("t", "t", seq, "x"))
	}
	require.NoError(t, st.Keep(ctx, c, evs))
	var n uint64
	for e, err := range calllog.Events(ctx, &st, "t", 0) {
		require.NoError(t, err)
		n++
		require.Equal(t, n, e.Seq)
	}
	assert.EqualValues(t, 600, n)
	_, err = replay.FromStore(ctx, &st, "none", &replay.Replayer{})
	require.ErrorIs(t, err, calllog.ErrNoTree)
}

// TestReplayerMaxKept: past MaxKept bytes of text and values in all, a
// call's text and value are counted and not kept.
func TestReplayerMaxKept(t *testing.T) {
	p := &replay.Replayer{MaxText: 100, MaxKept: 12}
	p.Add(textEvent("t", "a", 1, "0123456789"))
	p.Add(textEvent("t", "b", 2, "abcdef"))
	p.Add(textEvent("t", "c", 3, "xyz"))
	v := frame.MustPayload(map[string]any{"n": 1})
	p.Add(calllog.Event{Kind: calllog.KindCompleted, Tree: "t", Writer: "w", Seq: 4, Call: "c", Tool: "t",
		Payload: &calllog.Content{Type: "object", Bytes: len(v), Keys: 1, Value: v}})
	r := p.Tree()
	assert.Equal(t, "0123456789", r.Call("a").Text)
	assert.Equal(t, "ab", r.Call("b").Text)
	assert.Equal(t, 6, r.Call("b").TextBytes)
	assert.Empty(t, r.Call("c").Text)
	assert.Nil(t, r.Call("c").Outcome.Result)
	assert.Equal(t, len(v), r.Call("c").ResultBytes)
}
