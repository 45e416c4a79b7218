package child

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// timedCall is a call whose context the deadlines can cancel, and nothing
// more.
func timedCall() *call {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &call{c: &conn{s: &server{}}, ctx: ctx, cancel: cancel}
}

// TestDeadlinesTimer: the timer moves only for a deadline earlier than the
// one it is armed for, and not when a deadline is removed; what is due is
// cancelled with ErrTimeout, in order, and what was removed is not.
func TestDeadlinesTimer(t *testing.T) {
	var d deadlines
	now := time.Now()
	a, b, c := timedCall(), timedCall(), timedCall()
	d.add(a, now.Add(time.Hour))
	require.Equal(t, now.Add(time.Hour), d.armedAt)
	d.add(b, now.Add(2*time.Hour))
	require.Equal(t, now.Add(time.Hour), d.armedAt, "a later deadline moved the timer")
	dc := d.add(c, now.Add(30*time.Millisecond))
	require.Equal(t, now.Add(30*time.Millisecond), d.armedAt)
	d.remove(dc)
	require.Equal(t, now.Add(30*time.Millisecond), d.armedAt, "a removal moved the timer")

	// It fires for the removed deadline, cancels nothing and waits for a.
	e := timedCall()
	de := d.add(e, now.Add(60*time.Millisecond))
	require.Eventually(t, func() bool { return e.ctx.Err() != nil }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, context.Cause(e.ctx), ErrTimeout)
	require.Equal(t, -1, de.idx)
	d.mu.Lock()
	require.Equal(t, now.Add(time.Hour), d.armedAt)
	require.Len(t, d.pending, 2)
	d.mu.Unlock()
	for _, cl := range []*call{a, b, c} {
		require.NoError(t, cl.ctx.Err())
	}

	d.stop()
	d.remove(de) // removed already: nothing
	late := d.add(timedCall(), now.Add(time.Millisecond))
	d.remove(late) // after stop: nothing
	require.Empty(t, d.pending)
}

// TestDeadlineCtx: a deadline context reports its deadline, is not done
// before it is cancelled, and reports context.DeadlineExceeded for the
// deadline's cause only.
func TestDeadlineCtx(t *testing.T) {
	at := time.Now().Add(time.Hour)
	for _, c := range []struct {
		cause error
		want  error
	}{{ErrTimeout, context.DeadlineExceeded}, {ErrCallerCancelled, context.Canceled}} {
		inner, cancel := context.WithCancelCause(context.Background())
		ctx := &deadlineCtx{Context: inner, at: at}
		got, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, at, got)
		require.NoError(t, ctx.Err())
		cancel(c.cause)
		<-ctx.Done()
		require.ErrorIs(t, ctx.Err(), c.want)
		require.ErrorIs(t, context.Cause(ctx), c.cause)
	}
}
