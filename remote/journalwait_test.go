package remote_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/eventstore"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/remote"
)

// endlessStore is an in-memory store that fails every batch holding the
// end of a call of tool (the disk full, say), so a required journal never
// confirms those ends.
type endlessStore struct {
	eventstore.Memory
	tool  string
	fails atomic.Int32
}

var errStoreFull = errors.New("test store: disk full")

func (s *endlessStore) Keep(ctx context.Context, c calllog.Claim, evs []calllog.Event) error {
	if slices.ContainsFunc(evs, func(e calllog.Event) bool { return e.Kind.IsEnd() && e.Tool == s.tool }) {
		s.fails.Add(1)
		return errStoreFull
	}
	return s.Memory.Keep(ctx, c, evs)
}

// A remote call recorded as a step of the caller's host whose end that
// host's required journal did not confirm: Wait returns the
// *calllog.JournalError alone, its Outcome holding the result, as
// host.Call.Wait does; never the result as if it were kept. Frames (and
// Recv) give the terminal, then the JournalError once, then the end.
func TestWaitJournalEndNotConfirmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	startServing(t, exe, []string{srv.URL()}, "far", dir)
	st := &endlessStore{tool: "tick"}
	h, err := host.Start(ctx, host.Config{
		Command: exe, Args: []string{"-test.run=^$"}, PoolSize: 1,
		ExtraEnv: []string{roleEnv + "=child", dirEnv + "=" + dir, "GORACE=atexit_sleep_ms=0"},
		CallLog:  calllog.Options{Journal: &calllog.Journal{Store: st, Required: true, Timeout: 300 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close(context.Background()) }) // its journal reports the ends it could not keep
	cl := dialTools(t, srv.URL())

	var res frame.Payload
	var werr error
	var rc *remote.Call
	_ = h.Program(ctx, "step", func(ctx context.Context) error {
		c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0, "n": 1}))
		if err != nil {
			return err
		}
		rc = c
		res, werr = c.Wait()
		return nil
	})
	require.NotNil(t, rc, "the call was refused")
	require.Positive(t, st.fails.Load(), "the store never refused the step's end")
	var je *calllog.JournalError
	require.ErrorAs(t, werr, &je)
	require.ErrorIs(t, werr, calllog.ErrJournalEnd)
	assert.Nil(t, res, "a result its journal did not keep is given only in the JournalError's Outcome")
	var fe *frame.Error
	assert.False(t, errors.As(werr, &fe), "the journal's error alone, as host.Call.Wait: %v", werr)
	assert.Equal(t, rc.ID(), je.Call)
	assert.Equal(t, calllog.KindCompleted, je.Outcome.Kind)

	var kinds []string
	var werr2 error
	_ = h.Program(ctx, "frames", func(ctx context.Context) error {
		c, err := cl.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0, "n": 1}))
		if err != nil {
			return err
		}
		for f, err := range c.Frames() {
			switch {
			case errors.Is(err, calllog.ErrJournalEnd):
				kinds = append(kinds, "journal_end")
			case err != nil:
				kinds = append(kinds, err.Error())
			default:
				kinds = append(kinds, f.Kind.String())
			}
		}
		_, werr2 = c.Wait()
		return nil
	})
	assert.Equal(t, []string{"started", "chunk", "completed", "journal_end"}, kinds)
	assert.ErrorIs(t, werr2, calllog.ErrJournalEnd, "Wait after Frames gave the journal's error still does not take the result as final")
}
