package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/stretchr/testify/require"
)

// A call ended by its context gives an error that matches the context's
// error and is still a *frame.Error; one the caller cancelled through
// Call.Cancel, or one that failed on its own, matches neither.
func TestCallErrorMatchesContext(t *testing.T) {
	h, _ := testHost(t, Config{Command: childBin}, 60*time.Second)
	sleep := frame.MustPayload(map[string]any{"ms": 60000})

	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c, err := h.Call(ctx, "sleep", sleep)
		require.NoError(t, err)
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err = c.Wait()
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		var ce *frame.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, frame.CodeCancelled, ce.Code)
	})
	t.Run("Cancel with a live context", func(t *testing.T) {
		c, err := h.Call(context.Background(), "sleep", sleep)
		require.NoError(t, err)
		c.Cancel()
		_, err = c.Wait()
		var ce *frame.Error
		require.ErrorAs(t, err, &ce)
		require.False(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	})
	t.Run("a failure of the tool's own", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := h.Call(ctx, "fail", frame.MustPayload(map[string]any{"message": "no"}))
		require.NoError(t, err)
		_, err = c.Wait()
		var ce *frame.Error
		require.ErrorAs(t, err, &ce)
		require.Nil(t, errors.Unwrap(err))
	})
}
