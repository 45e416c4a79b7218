package mcpbridge

import (
	"context"
	"errors"
	"fmt"
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
