package host

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// A caller that streams input to a child whose connection breaks under it
// gets ErrSendClosed or the call's own *frame.Error from Send, and nil from
// CloseSend once the call has ended, never the socket's error (a broken pipe, a closed connection), and Wait
// gives the same outcome.
func TestSendOnBrokenConnection(t *testing.T) {
	for _, tc := range []struct {
		tool string
		code frame.Code
	}{
		{"die", frame.CodeUnreachable},       // the child exits while input streams
		{"hangup", frame.CodeTransportError}, // the child closes the connection and lives
	} {
		t.Run(tc.tool, func(t *testing.T) {
			h, _ := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
			ctx := callCtx(t, 30*time.Second)
			c, err := h.Call(ctx, tc.tool, nil)
			require.NoError(t, err)
			p := frame.MustPayload(map[string]any{"text": strings.Repeat("x", 32<<10)})
			var sendErr error
			for i := 0; i < 10_000 && sendErr == nil; i++ { // 320 MiB: past any socket buffer
				sendErr = c.Send(ctx, p, nil)
			}
			require.Error(t, sendErr, "Send went on into a broken connection")
			assertSendOutcome(t, sendErr, tc.code)
			// The call ended on the provider's side: nothing is left to
			// close, and CloseSend says so with nil (its doc).
			assert.NoError(t, c.CloseSend())
			_, werr := c.Wait()
			var ce *frame.Error
			require.ErrorAs(t, werr, &ce)
			assert.Equal(t, tc.code, ce.Code)
			assert.True(t, ce.Synthetic)
		})
	}
}

// assertSendOutcome checks that err, from Send or CloseSend on a broken
// connection, is ErrSendClosed or a synthetic *frame.Error of code.
func assertSendOutcome(t *testing.T, err error, code frame.Code) {
	t.Helper()
	var ce *frame.Error
	switch {
	case errors.Is(err, ErrSendClosed):
	case errors.As(err, &ce):
		assert.Equal(t, code, ce.Code, "the call's error")
	default:
		require.FailNow(t, fmt.Sprintf("got %v (%T), want ErrSendClosed or the call's *frame.Error", err, err))
	}
	assert.NotContains(t, err.Error(), "broken pipe")
	assert.NotContains(t, err.Error(), "closed network connection")
}
