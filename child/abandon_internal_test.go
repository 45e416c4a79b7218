package child

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
)

// abandonedCall returns a call cancelled by a drain on a connection of a
// server that serves nothing else, the host's end of the connection, and
// a function that fills the connection's socket from the child's side.
func abandonedCall(t *testing.T) (cl *call, host *packetio.Reader, fill func()) {
	t.Helper()
	hostEnd, childEnd := testnet.SocketPair(t)
	s := newServer(nil, nil, &Options{})
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.cancelGrace = time.Minute // the grace writes no terminal meanwhile: abandon does
	c := newConn(s, childEnd)
	t.Cleanup(func() {
		c.w.Close()
		s.cancel(errHostGone)
	})
	cl = newCall(c, &wire.Invoke{CallID: "late1", ToolID: "sleep"})
	cl.superviseGrace()
	cl.cancelWith(ErrDrained)
	t.Cleanup(cl.stopGrace) // the handler "returns" when the test ends
	hostEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
	fill = func() { // until a write waits 100 ms for room: the socket is full
		for {
			childEnd.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := childEnd.Write(make([]byte, 64<<10)); err != nil {
				childEnd.SetWriteDeadline(time.Time{})
				return
			}
		}
	}
	return cl, packetio.NewReader(hostEnd, packetio.DefaultLimits()), fill
}

// TestDrainLateChildLosesNoTerminal: a drain's goroutine that runs after
// the deadline it gave the terminals (the child waited for a processor
// that long, as on a loaded machine: TestDrainSmallCancelGrace/serve lost
// its terminal so, with a cancel grace of 2 ms, whose deadline is 20 ms
// away) still gets the terminal to a host that reads it. The deadline
// ends only the writes of a host that does not read (the next test).
func TestDrainLateChildLosesNoTerminal(t *testing.T) {
	cl, r, _ := abandonedCall(t)
	cl.abandon(time.Now().Add(-time.Second))
	p, err := r.ReadPacket()
	require.NoError(t, err, "the terminal was lost")
	f, ok := p.(*wire.Frame)
	require.True(t, ok, "got %T", p)
	require.Equal(t, frame.KindCancelled, f.Frame.Kind)
	require.Equal(t, "late1", f.Frame.CallID)
}

// TestDrainGivesUpOnHostNotReading: to a host that does not read (the
// socket is full), abandon returns soon after its deadline: bye is not
// held up by the terminal that cannot go out.
func TestDrainGivesUpOnHostNotReading(t *testing.T) {
	cl, _, fill := abandonedCall(t)
	fill()
	start := time.Now()
	cl.abandon(start.Add(minTerminalWindow))
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, minTerminalWindow)
	// The watch looks every fullPoll; the rest is room for a loaded
	// machine. A child that waited for the host to read would return only
	// at the watch's last resort, connWriteGrace after the deadline.
	require.Less(t, elapsed, minTerminalWindow+connWriteGrace*9/10)
}
