package host

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestRecvInBusyGateReturnsWithItsContext: a Recv whose reading waits in
// line for a slot of the host's busy gate returns with its context's
// error as soon as the context ends, not once a slot comes (seconds, with
// thousands of busy streams). The test holds every slot, so that the
// stream's busy reader can only wait.
func TestRecvInBusyGateReturnsWithItsContext(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	call, err := h.Call(context.Background(), "count", frame.MustPayload(map[string]any{"n": 1 << 30, "size": 32}))
	require.NoError(t, err)
	// Read until the reader is busy, so that its next read needs a slot.
	// A read of a stream the child writes flat out finds data at once.
	deadline := time.Now().Add(20 * time.Second)
	for !call.conn.busy {
		require.True(t, time.Now().Before(deadline), "the stream's reader never became busy")
		_, err := call.Recv(context.Background())
		require.NoError(t, err)
	}
	slots := runtime.GOMAXPROCS(0)
	for range slots {
		require.False(t, h.busy.Enter(make(chan struct{}, 1)), "nobody else holds a slot")
	}
	released := false
	release := func() {
		if !released {
			released = true
			for range slots {
				h.busy.Leave()
			}
		}
	}
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recvErr := make(chan error, 1)
	go func() { // ends when Recv returns its context's error: at the latest, once release gives the slots back and the context has ended
		for {
			if _, err := call.Recv(ctx); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	require.Eventually(t, h.busy.Waiting, 20*time.Second, time.Millisecond, "the reading Recv waits for a slot")
	cancel()
	select {
	case err := <-recvErr:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		release()
		<-recvErr
		require.FailNow(t, "Recv waited in the busy gate after its context ended")
	}
	// The gate's line holds nothing of the Recv that left it; the stream
	// goes on once the slots come back, and ends with its cancel.
	release()
	call.Cancel()
	_, err = call.Wait()
	var fe *frame.Error
	require.ErrorAs(t, err, &fe, "the call ends with its cancel")
}
