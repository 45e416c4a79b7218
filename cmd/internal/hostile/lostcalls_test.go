package hostile_test

import (
	"context"
	"errors"
	"sync"
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
	cases := []struct {
		name, mode, tool string
		timeouts         time.Duration // health timeouts before the call counts
	}{
		{"never finishes", "serve", "lostfinish", 1},
		// The child never read the invoke: the call counts after four
		// health timeouts (a starved child may be slow to read).
		{"never reads", "lostread", "ok", 4},
		{"never accepts", "lostaccept", "ok", 4},
	}
	// The cases wait out health timeouts: they run at once, each on a
	// host of its own, and each call's terminal is taken by a reader of
	// its own as it comes.
	type ended struct {
		term frame.Frame
		err  error
		took time.Duration
	}
	cfgs := make([]host.Config, len(cases))
	for i, tc := range cases {
		cfgs[i] = config(t, tc.mode, t.TempDir())
	}
	hs := startHosts(t, cfgs...)
	firsts := make([]int, len(cases))
	ends := make([]ended, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		firsts[i] = hs[i].Children()[0].PID
		start := time.Now()
		c, err := hs[i].Call(context.Background(), tc.tool, nil) // no deadline: only the host can end it
		require.NoErrorf(t, err, "%s: Call", tc.name)
		wg.Go(func() { // stopped by the call's terminal or the 25 s limit
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			for {
				f, err := c.Recv(ctx)
				if err != nil || f.Kind.IsTerminal() {
					ends[i] = ended{f, err, time.Since(start)}
					return
				}
			}
		})
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, cfg, e := hs[i], cfgs[i], ends[i]
			require.NoError(t, e.err, "Recv")
			term, took := e.term, e.took
			t.Logf("terminal %s %v after %v", term.Kind, term.Error, took)
			require.Equal(t, frame.KindFailed, term.Kind)
			require.NotNil(t, term.Error)
			assert.True(t, term.Synthetic)
			assert.Equal(t, frame.CodeUnreachable, term.Error.Code)
			// The health timeouts, then two pings; generous for a loaded machine.
			assert.Greater(t, took, tc.timeouts*cfg.HealthTimeout)
			assert.Less(t, took, tc.timeouts*cfg.HealthTimeout+5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var info host.ChildInfo
			for {
				info = h.Children()[0]
				if info.PID != firsts[i] && info.State == "ready" {
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
