package calllog_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/internal/replay"
)

// A tree as a best-effort journal that lost the end of some calls left it
// (the log issue 41 found: ends dropped, the writer gone): a program, a
// step that ended, two that did not, and a gap. The takeover records an
// unknown end for each call without one, steps before their program, and
// no failure: the log proves none. Replay then shows every call ended, the
// unknown ones as unknown, and the loss.
func TestTakeOverOfAnOverflowedTreeRecordsNoFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlitestore.Open(filepath.Join(t.TempDir(), "calls.db"))
	require.NoError(t, err)
	defer st.Close()

	at := time.Date(2026, 11, 29, 22, 10, 0, 0, time.UTC)
	ev := func(seq uint64, kind calllog.Kind, call, parent string) calllog.Event {
		return calllog.Event{Kind: kind, Tree: "p", Writer: "A", Seq: seq, After: seq - 1, At: at, Call: call, Parent: parent,
			Tool: "count", Program: call == "p"}
	}
	kept := []calllog.Event{
		ev(1, calllog.KindStarted, "p", ""),
		ev(2, calllog.KindStarted, "s1", "p"),
		ev(3, calllog.KindStarted, "s2", "p"),
		ev(4, calllog.KindCompleted, "s1", "p"),
		ev(5, calllog.KindStarted, "s3", "p"),
		// 6..9 dropped: among them s2's and s3's ends, and the program's.
		ev(10, calllog.KindOutput, "s3", "p"),
	}
	c, err := st.Claim(ctx, "p", "A")
	require.NoError(t, err)
	require.NoError(t, st.Keep(ctx, c, kept))

	wrote, err := calllog.TakeOver(ctx, st, "p", "B")
	require.NoError(t, err)
	require.Len(t, wrote, 3)
	for i, call := range []string{"s3", "s2", "p"} {
		e := wrote[i]
		assert.Equal(t, call, e.Call)
		assert.Equal(t, calllog.KindUnknown, e.Kind, "call %s", call)
		assert.Nil(t, e.Error, "no error is made up for call %s", call)
		assert.Equal(t, uint64(11+i), e.Seq)
		assert.Equal(t, "B", e.Writer)
	}

	all, err := st.EventsAfter(ctx, "p", 0, 0)
	require.NoError(t, err)
	r := replay.Events(all)
	assert.Equal(t, uint64(4), r.Lost)
	for _, c := range r.Calls {
		require.True(t, c.Ended, "call %s", c.Call)
		if c.Call == "s1" {
			assert.NoError(t, c.Err())
			continue
		}
		assert.Equal(t, calllog.KindUnknown, c.Outcome.Kind, "call %s", c.Call)
		assert.ErrorIs(t, c.Err(), replay.ErrOutcomeUnknown)
	}

	// Its JSON form is kind "unknown", with no error.
	b, err := wrote[0].MarshalJSON()
	require.NoError(t, err)
	assert.Contains(t, string(b), `"kind":"unknown"`)
	assert.NotContains(t, string(b), `"error"`)
	var back calllog.Event
	require.NoError(t, back.UnmarshalJSON(b))
	assert.Equal(t, calllog.KindUnknown, back.Kind)
}
