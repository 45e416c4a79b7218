package child

import (
	"context"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/stretchr/testify/require"
)

// timedCall is a call whose context the deadlines can cancel, and nothing
// more.
func timedCall() *call {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &call{c: &conn{s: &server{}}, ctx: ctx, cancel: cancel}
}

// armedAtLocked reads d.armedAt under its lock.
func (d *deadlines) armedAtLocked() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.armedAt
}

// TestDeadlinesTimer: the timer moves (to armSlack before the deadline)
// only for a deadline earlier than the one it is armed for, and not when
// a deadline is removed; what is due is cancelled with ErrTimeout, and
// what was removed is not.
func TestDeadlinesTimer(t *testing.T) {
	var d deadlines
	now := time.Now()
	a, b, c := timedCall(), timedCall(), timedCall()
	d.add(a, now.Add(time.Hour))
	require.Equal(t, now.Add(time.Hour-armSlack), d.armedAtLocked())
	d.add(b, now.Add(2*time.Hour))
	require.Equal(t, now.Add(time.Hour-armSlack), d.armedAtLocked(), "a later deadline moved the timer")
	d.add(timedCall(), now.Add(time.Hour-armSlack/2))
	require.Equal(t, now.Add(time.Hour-armSlack), d.armedAtLocked(), "a deadline within the slack moved the timer")
	dc := d.add(c, now.Add(30*time.Minute))
	require.Equal(t, now.Add(30*time.Minute-armSlack), d.armedAtLocked())
	d.remove(dc)
	require.Equal(t, now.Add(30*time.Minute-armSlack), d.armedAtLocked(), "a removal moved the timer")
	d.stop()
	require.NoError(t, c.ctx.Err())
}

// TestDeadlinesFire: the timer fires early (armSlack) for a deadline that
// was removed since, cancels nothing then, and is armed again for the
// next; that one's call is cancelled with ErrTimeout, not before its
// deadline, and the timer waits for the one after.
func TestDeadlinesFire(t *testing.T) {
	var d deadlines
	defer d.stop()
	start := time.Now()
	later, removed, due := timedCall(), timedCall(), timedCall()
	d.add(later, start.Add(time.Hour))
	d.remove(d.add(removed, start.Add(20*time.Millisecond)))
	dd := d.add(due, start.Add(60*time.Millisecond))
	select {
	case <-due.ctx.Done():
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the due deadline never fired")
	}
	require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond)
	require.ErrorIs(t, context.Cause(due.ctx), ErrTimeout)
	require.NoError(t, removed.ctx.Err())
	require.NoError(t, later.ctx.Err())
	require.Equal(t, start.Add(time.Hour), d.armedAtLocked())
	d.mu.Lock()
	require.Equal(t, -1, dd.idx)
	require.Len(t, d.pending, 1)
	d.mu.Unlock()
}

// TestDeadlinesAfterStop: after stop, add arms nothing (the timer keeps
// the time it had) and remove of any deadline, in the heap at stop or
// not, does nothing.
func TestDeadlinesAfterStop(t *testing.T) {
	var d deadlines
	kept := d.add(timedCall(), time.Now().Add(time.Hour))
	armed := d.armedAtLocked()
	d.stop()
	d.remove(kept)
	lateCall := timedCall()
	late := d.add(lateCall, time.Now().Add(time.Millisecond))
	d.remove(late)
	d.remove(late)
	require.Empty(t, d.pending)
	require.True(t, d.armedAtLocked().Before(time.Now().Add(time.Hour)))
	require.Equal(t, armed, d.armedAtLocked(), "an add after stop armed the timer")
	require.NoError(t, lateCall.ctx.Err())
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

// TestDeadlinesRemovedWhenCallsEnd: a call's deadline leaves the server's
// deadlines by the time its end is written, however the call ended
// (completed, refused at once, cancelled), so that no finished call is
// held until its timeout_ms runs out.
func TestDeadlinesRemovedWhenCallsEnd(t *testing.T) {
	hostEnd, childEnd := testnet.SocketPair(t)
	nl, path := testnet.Listen(t)
	waits := Tool{ID: "waits", Handler: func(ctx context.Context, s *Stream) (frame.Payload, error) {
		<-ctx.Done()
		return nil, nil
	}}
	echo := Tool{ID: "echo", Handler: func(ctx context.Context, s *Stream) (frame.Payload, error) {
		for _, err := range s.Input() {
			if err != nil {
				return nil, err
			}
		}
		return nil, nil
	}}
	opts := Options{Tools: []Tool{waits, echo}}
	require.NoError(t, opts.validate())
	s := newServer(childEnd, NewListener(nl.Accept, nl.Close), &opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx) }() // stopped by the cleanup below
	h := testnet.NewHost(hostEnd, path)
	t.Cleanup(func() {
		h.Close()
		cancel()
		<-done
	})
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	_, err := h.Handshake(hctx, nil)
	require.NoError(t, err)
	pending := func() int {
		s.deadlines.mu.Lock()
		defer s.deadlines.mu.Unlock()
		return len(s.deadlines.pending)
	}
	read := func(st *testnet.Stream, id string, want frame.Kind) {
		t.Helper()
		res, err := st.ReadCall(id, time.Now().Add(10*time.Second))
		require.NoError(t, err)
		require.Equal(t, want, res.Terminal.Kind)
	}

	st, err := h.Dial(hctx)
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Invoke("rd1", "echo", nil, time.Hour))
	require.NoError(t, st.Started("rd1"))
	require.NoError(t, st.Complete("rd1", 1, nil))
	read(st, "rd1", frame.KindCompleted)
	require.Zero(t, pending(), "a completed call's deadline")

	require.NoError(t, st.Invoke("rd2", "no-such-tool", nil, time.Hour))
	read(st, "rd2", frame.KindFailed)
	require.Zero(t, pending(), "a refused call's deadline")

	st2, err := h.Dial(hctx)
	require.NoError(t, err)
	defer st2.Close()
	require.NoError(t, st2.Invoke("rd3", "waits", nil, time.Hour))
	require.NoError(t, st2.Started("rd3"))
	require.NoError(t, st2.CancelCall("rd3", 1))
	read(st2, "rd3", frame.KindCancelled)
	require.Zero(t, pending(), "a cancelled call's deadline")
}
