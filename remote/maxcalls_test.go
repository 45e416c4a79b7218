package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/remote"
)

// TestMaxCalls: a serving host holding MaxCalls calls refuses the next
// open at once, with a synthetic unreachable, and takes calls again once
// one has ended; a negative MaxCalls is refused.
func TestMaxCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := natstest.Run(t)
	h := startLocalHost(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	_, err = remote.Serve(nc, "tools", h, remote.ServeOptions{ID: "neg", MaxCalls: -1})
	require.ErrorIs(t, err, remote.ErrOptions)
	s, err := remote.Serve(nc, "tools", h, remote.ServeOptions{Options: testOptions, ID: "a", MaxCalls: 1})
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close(context.Background())) }()
	c, err := remote.Dial(nc, "tools", testOptions)
	require.NoError(t, err)
	defer c.Close()

	long, err := c.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 60_000}))
	require.NoError(t, err)
	f, err := long.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, frame.KindStarted, f.Kind, "the first call runs")

	start := time.Now()
	full, err := c.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
	require.NoError(t, err)
	_, err = full.Wait()
	var fe *frame.Error
	require.ErrorAs(t, err, &fe, "the call past MaxCalls is refused")
	assert.Equal(t, frame.CodeUnreachable, fe.Code)
	assert.True(t, fe.Synthetic)
	assert.Less(t, time.Since(start), 10*time.Second, "refused at once, not after a heartbeat timeout")

	long.Cancel()
	_, _ = long.Wait()
	require.Eventually(t, func() bool {
		next, err := c.Call(ctx, "tick", frame.MustPayload(map[string]any{"ms": 0}))
		if err != nil {
			return false
		}
		_, err = next.Wait()
		return err == nil
	}, 20*time.Second, 100*time.Millisecond, "calls are taken again once one ended")
}
