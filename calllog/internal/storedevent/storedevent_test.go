package storedevent_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/internal/storedevent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestParseKind: every kind is found by its JSON name, and nothing else is.
func TestParseKind(t *testing.T) {
	n := 0
	for k := calllog.KindStarted; k <= calllog.KindUnknown; k++ {
		got, ok := storedevent.ParseKind(k.String())
		require.True(t, ok, "%v", k)
		assert.Equal(t, k, got)
		n++
	}
	assert.Equal(t, 10, n, "every kind")
	for _, s := range []string{"", "Done", "Kind(0)", "completed"} {
		_, ok := storedevent.ParseKind(s)
		assert.False(t, ok, "%q", s)
	}
}

// TestErrorsMatchErrFormat: the too-large error and every decoding error
// match calllog.ErrFormat, malformed JSON included.
func TestErrorsMatchErrFormat(t *testing.T) {
	assert.ErrorIs(t, storedevent.ErrTooLarge, calllog.ErrFormat)
	for _, in := range []string{``, `{`, `[1]`, `{"format":2}`} {
		_, err := storedevent.Decode([]byte(in))
		assert.True(t, errors.Is(err, calllog.ErrFormat), "%q: %v", in, err)
	}
	e, err := storedevent.Decode([]byte(`{"format":1,"kind":"done","tree":"t","writer":"w","seq":2,"after":1,"at":"2026-11-29T22:10:00Z","call":"t","parent":null,"tool":"x"}`))
	require.NoError(t, err)
	assert.Equal(t, calllog.KindCompleted, e.Kind)
	assert.EqualValues(t, 2, e.Seq)
}

// TestCheckBatch: a batch of the claim's tree numbered from 1 upward
// passes; one of another tree, numbered 0 or out of order does not.
func TestCheckBatch(t *testing.T) {
	c := calllog.Claim{Tree: "t", Writer: "w", Epoch: 1}
	ev := func(tree string, seq uint64) calllog.Event { return calllog.Event{Tree: tree, Seq: seq} }
	assert.NoError(t, storedevent.CheckBatch(c, nil))
	assert.NoError(t, storedevent.CheckBatch(c, []calllog.Event{ev("t", 1), ev("t", 2), ev("t", 5)}))
	for name, b := range map[string][]calllog.Event{
		"other tree":   {ev("t", 1), ev("u", 2)},
		"numbered 0":   {ev("t", 0)},
		"out of order": {ev("t", 2), ev("t", 1)},
		"repeated":     {ev("t", 2), ev("t", 2)},
	} {
		assert.Error(t, storedevent.CheckBatch(c, b), name)
	}
}
