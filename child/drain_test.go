package child_test

import (
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestDrainedChildLeavesNothing: after a drain, Serve has returned, every
// connection it had is closed, and no goroutine of it is left.
func TestDrainedChildLeavesNothing(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := serveChild(t, config{}, demoOptions())
	_, err := srv.host.Handshake(ctxT(t), nil)
	require.NoError(t, err)
	var streams []*testnet.Stream
	for range 3 { // idle connections
		streams = append(streams, dial(t, srv.host))
	}
	used := dial(t, srv.host) // a connection that served a call
	begin(t, used, "n1", "count", map[string]any{"n": 3})
	require.NoError(t, used.Complete("n1", 1, nil))
	requireTerminal(t, readCall(t, used, "n1"), frame.KindCompleted, 0)
	running := dial(t, srv.host) // a call cancelled by the drain
	beginSleep(t, srv.host, running, "n2")
	streams = append(streams, used, running)

	require.NoError(t, srv.host.Drain(50*time.Millisecond))
	requireTerminal(t, readCall(t, running, "n2"), frame.KindCancelled, 0)
	_, err = srv.host.WaitBye(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, srv.result(t))
	require.NoError(t, srv.host.WaitClosed(ctxT(t)))
	for _, s := range streams {
		requireClosed(t, s)
	}
	// The listener is closed too: nobody accepts any more.
	_, err = srv.host.Dial(ctxT(t))
	require.Error(t, err)
	srv.host.Close()
	goleak.VerifyNone(t, before)
}
