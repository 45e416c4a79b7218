package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// writeOnlyConn is an mcp.Connection whose writes fail while failing is
// set; it reads nothing.
type writeOnlyConn struct{ failing bool }

func (c *writeOnlyConn) Read(context.Context) (jsonrpc.Message, error) {
	return nil, errors.New("no input")
}
func (c *writeOnlyConn) Write(context.Context, jsonrpc.Message) error {
	if c.failing {
		return errors.New("write failed")
	}
	return nil
}
func (c *writeOnlyConn) Close() error      { return nil }
func (c *writeOnlyConn) SessionID() string { return "" }

type connTransport struct{ c mcp.Connection }

func (t connTransport) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }

// TestOutgoingForgetsWhatIsNotAnswered: a request the server sent the
// client and then cancelled, or failed to send, is not waited for: the
// connection keeps no entry of it.
func TestOutgoingForgetsWhatIsNotAnswered(t *testing.T) {
	t.Parallel()
	inner := &writeOnlyConn{}
	conn, err := StdioTransport(connTransport{inner}, time.Minute).Connect(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	sc := conn.(*stdioConn)
	ctx := t.Context()
	for i := range 100 {
		id, err := jsonrpc.MakeID(float64(i))
		require.NoError(t, err)
		req := &jsonrpc.Request{ID: id, Method: "elicitation/create"}
		require.NoError(t, sc.Write(ctx, req))
		cancel := &jsonrpc.Request{Method: "notifications/cancelled", Params: []byte(fmt.Sprintf(`{"requestId":%d}`, i))}
		require.NoError(t, sc.Write(ctx, cancel))
	}
	inner.failing = true
	id, err := jsonrpc.MakeID("x")
	require.NoError(t, err)
	require.Error(t, sc.Write(ctx, &jsonrpc.Request{ID: id, Method: "sampling/createMessage"}))
	sc.mu.Lock()
	defer sc.mu.Unlock()
	require.Empty(t, sc.outgoing, "requests cancelled or never sent")
}

// scriptedConn is an mcp.Connection whose reads return msgs in turn and
// then io.EOF, closing eof as they first do; its writes succeed.
type scriptedConn struct {
	msgs []jsonrpc.Message
	eof  chan struct{}
}

func (c *scriptedConn) Read(context.Context) (jsonrpc.Message, error) {
	if len(c.msgs) == 0 {
		select {
		case <-c.eof:
		default:
			close(c.eof)
		}
		return nil, io.EOF
	}
	m := c.msgs[0]
	c.msgs = c.msgs[1:]
	return m, nil
}
func (c *scriptedConn) Write(context.Context, jsonrpc.Message) error { return nil }
func (c *scriptedConn) Close() error                                 { return nil }
func (c *scriptedConn) SessionID() string                            { return "" }

// TestSessionEndStopsTheWaitForAnswers: once the input ended, a call still
// unanswered holds the input's end back (for up to the drain bound), and
// the session's end (SIGINT, SIGTERM) gives it at once.
func TestSessionEndStopsTheWaitForAnswers(t *testing.T) {
	t.Parallel()
	id, err := jsonrpc.MakeID(float64(1))
	require.NoError(t, err)
	inner := &scriptedConn{msgs: []jsonrpc.Message{&jsonrpc.Request{ID: id, Method: "tools/call"}}, eof: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := StdioTransport(connTransport{inner}, time.Minute).Connect(ctx)
	require.NoError(t, err)
	defer conn.Close()
	m, err := conn.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, id, m.(*jsonrpc.Request).ID)
	done := make(chan error, 1)
	go func() { // ends with the Read; waited for below
		_, err := conn.Read(ctx)
		done <- err
	}()
	<-inner.eof
	select {
	case err := <-done:
		require.FailNow(t, "the input's end was given while a call was unanswered", "%v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, io.EOF)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the session's end did not stop the wait for answers")
	}
}
