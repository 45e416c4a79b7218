package child

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
)

// TestCallEndedBeforeItsWatch: a call made through the host can be ended
// (offer.close, or its handler's end, draining it) as soon as it is
// published, before Stream.Call set its context watch: end then runs
// without one, and the watch set afterwards is stopped, so the context's
// end does not cancel the ended call.
func TestCallEndedBeforeItsWatch(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	of := &offer{calls: &wire.Calls{MaxInFlight: 1}, open: map[*Call]struct{}{}, inFlight: 1}
	c := &Call{id: "n1", o: of, cc: newCallConn(a, packetio.DefaultLimits()), nc: a, rd: make(chan struct{}, 1), done: make(chan struct{})}
	c.w = c.cc.w
	of.open[c] = struct{}{}

	require.NotPanics(t, func() { c.end(false) }, "end before the watch")
	require.Empty(t, of.open)
	require.Zero(t, of.inFlight)

	ctx, cancel := context.WithCancel(context.Background())
	c.watch(ctx)
	cancel()
	require.Nil(t, c.stop, "the watch of an ended call is stopped, not kept")
	require.False(t, c.cancelled.Load(), "the context's end does not cancel the ended call")
}
