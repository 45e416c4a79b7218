package host

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/toolschema"
)

// TestHostToolSendEndsWithTheCall: a host tool's Send given a context of
// the handler's own (not derived from Run's) still returns once the call
// ends, while its frame waits for room on the call connection.
func TestHostToolSendEndsWithTheCall(t *testing.T) {
	own, cancelOwn := context.WithCancel(context.Background())
	defer cancelOwn()
	sendErr := make(chan error, 1)
	ht := &HostTool{Run: func(ctx context.Context, c *ToolCall) (frame.Payload, error) {
		sendErr <- c.Send(own, frame.MustPayload(map[string]any{"n": 1}), nil)
		return nil, nil
	}}
	callCtx, cancelCall := context.WithCancel(context.Background())
	defer cancelCall()
	hc := newHostCallee(callCtx, cancelCall, ht, &toolschema.Tool{}, &ToolCall{ID: "t1"})
	waiting := make(chan struct{})
	hc.start(func(ctx context.Context, f frame.Frame) error {
		if f.Kind.IsTerminal() {
			return nil
		}
		close(waiting)
		<-ctx.Done() // a connection whose queue stays full
		return ctx.Err()
	})
	<-waiting
	hc.abort()
	select {
	case err := <-sendErr:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		cancelOwn()
		<-hc.done
		require.FailNow(t, "Send waited on after its call ended")
	}
	<-hc.done
}
