package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NoAnswerToCancelled wraps a server transport so that a request the
// client cancelled (notifications/cancelled) gets no response, as MCP
// says a server should not send one: the go-sdk answers every request it
// handled, a cancelled tool call with its cancelled result. The call is
// still cancelled (the go-sdk cancels the handler's context). Use it for
// stdio; over streamable HTTP the go-sdk owns the connection.
func NoAnswerToCancelled(t mcp.Transport) mcp.Transport { return &cancelTransport{inner: t} }

type cancelTransport struct{ inner mcp.Transport }

func (t *cancelTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cancelConn{Connection: c, inflight: map[string]bool{}}, nil
}

// cancelConn tracks the requests read and not yet answered (inflight:
// id → cancelled). Its size is bounded by the requests the go-sdk keeps in
// flight: an id leaves when its response is written or dropped.
type cancelConn struct {
	mcp.Connection
	mu       sync.Mutex
	inflight map[string]bool
}

func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

func (c *cancelConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		return m, err
	}
	if req, ok := m.(*jsonrpc.Request); ok {
		switch {
		case req.IsCall():
			c.mu.Lock()
			c.inflight[idKey(req.ID)] = false
			c.mu.Unlock()
		case req.Method == "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(req.Params, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
					c.mu.Lock()
					if _, ok := c.inflight[idKey(id)]; ok {
						c.inflight[idKey(id)] = true
					}
					c.mu.Unlock()
				}
			}
		}
	}
	return m, nil
}

func (c *cancelConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if resp, ok := m.(*jsonrpc.Response); ok {
		k := idKey(resp.ID)
		c.mu.Lock()
		cancelled := c.inflight[k]
		delete(c.inflight, k)
		c.mu.Unlock()
		if cancelled {
			return nil
		}
	}
	return c.Connection.Write(ctx, m)
}
