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
