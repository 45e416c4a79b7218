package hostile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// TestLostCallsEnd: a call with no deadline on a child that answers pings
// but never finishes it (and stops counting it), never reads its stream
// connection, or never accepts it, ends with a synthetic unreachable once
// two pongs in a row counted fewer streams than the host had calls on the
// child older than the health timeout (four when the child has not read
// the invoke); the child is recycled (ErrCallsLost,
// not counted as a restart) and, where it can, takes the next call.
func TestLostCallsEnd(t *testing.T) {
	for _, tc := range []struct {
		name, mode, tool string
		timeouts         time.Duration // health timeouts before the call counts
	}{
		{"never finishes", "serve", "lostfinish", 1},
		// The child never read the invoke: the call counts after four
		// health timeouts (a starved child may be slow to read).
		{"never reads", "lostread", "ok", 4},
		{"never accepts", "lostaccept", "ok", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, tc.mode, t.TempDir())
			h := startHost(t, cfg)
			first := h.Children()[0].PID
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			c, err := h.Call(context.Background(), tc.tool, nil) // no deadline: only the host can end it
			require.NoError(t, err)
			term := terminal(t, c, 25*time.Second)
			took := time.Since(start)
			t.Logf("terminal %s %v after %v", term.Kind, term.Error, took)
			require.Equal(t, frame.KindFailed, term.Kind)
			require.NotNil(t, term.Error)
			assert.True(t, term.Synthetic)
			assert.Equal(t, frame.CodeUnreachable, term.Error.Code)
			// The health timeouts, then two pings; generous for a loaded machine.
			assert.Greater(t, took, tc.timeouts*cfg.HealthTimeout)
			assert.Less(t, took, tc.timeouts*cfg.HealthTimeout+5*time.Second)
			var info host.ChildInfo
			for {
				info = h.Children()[0]
				if info.PID != first && info.State == "ready" {
					break
				}
				require.NoError(t, ctx.Err(), "the child was not recycled: %+v", info)
				time.Sleep(5 * time.Millisecond)
			}
			assert.True(t, errors.Is(info.LastCause, host.ErrCallsLost), "cause %v", info.LastCause)
			if tc.mode == "serve" {
				works(t, h)
			}
		})
	}
}

// TestUnreadOutputIsNotLost: a call whose child completed it while its
// caller read nothing for longer than lost-call detection takes is not
// failed: the child's output waits unread on the host's side, so the
// child's pongs rightly no longer count it.
func TestUnreadOutputIsNotLost(t *testing.T) {
	cfg := config(t, "serve", t.TempDir())
	h := startHost(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := h.Call(ctx, "ok", nil, host.WithInput(frame.MustPayload(map[string]any{"text": "a"})))
	require.NoError(t, err)
	time.Sleep(cfg.HealthTimeout + 10*cfg.HealthInterval)
	res, err := c.Wait()
	require.NoError(t, err)
	var v struct{ N int }
	require.NoError(t, res.Decode(&v))
	assert.Equal(t, 1, v.N)
	assert.NoError(t, h.Children()[0].LastCause)
}
