package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdinDrain bounds how long a server on stdio (StdioTransport) goes on
// answering the requests it read once its input ended, before it lets the
// go-sdk cancel those left and end the session: as long as the host's own
// drain of a child (10 s).
const stdinDrain = 10 * time.Second

// StdioTransport wraps a server transport over stdio so that
//   - a request the client cancelled (notifications/cancelled) gets no
//     response, as MCP says a server should not send one: the go-sdk
//     answers every request it handled, a cancelled tool call with its
//     cancelled result. The call is still cancelled (the go-sdk cancels
//     the handler's context);
//   - the requests read before the input ended are answered: the go-sdk
//     cancels every request in flight as soon as a read fails, so a client
//     that writes its requests and closes its end (a pipe) would get no
//     answers. The end of the input is given to the go-sdk once every
//     request read has been answered, or after stdinDrain, or when the
//     connection is closed or the context of its read ends.
//
// Over streamable HTTP the go-sdk owns the connection (noAnswerHTTP).
func StdioTransport(t mcp.Transport) mcp.Transport { return &stdioTransport{inner: t} }

type stdioTransport struct{ inner mcp.Transport }

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &stdioConn{Connection: c, inflight: map[string]bool{}, answered: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// stdioConn tracks the requests read and not yet answered (inflight:
// id → cancelled). Its size is bounded by the requests the go-sdk keeps in
// flight: an id leaves when its response is written or dropped.
type stdioConn struct {
	mcp.Connection
	mu       sync.Mutex
	inflight map[string]bool

	answered  chan struct{} // a response left inflight (size 1: a wake-up, not a count)
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
}

func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		c.awaitAnswers(ctx)
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

func (c *stdioConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if resp, ok := m.(*jsonrpc.Response); ok {
		k := idKey(resp.ID)
		c.mu.Lock()
		cancelled := c.inflight[k]
		delete(c.inflight, k)
		c.mu.Unlock()
		defer c.wake() // after the response is written
		if cancelled {
			return nil
		}
	}
	return c.Connection.Write(ctx, m)
}

// wake tells awaitAnswers a request left inflight.
func (c *stdioConn) wake() {
	select {
	case c.answered <- struct{}{}:
	default:
	}
}

// awaitAnswers returns once no request read is unanswered, or after
// stdinDrain, or once the connection is closed or ctx ends.
func (c *stdioConn) awaitAnswers(ctx context.Context) {
	limit := time.NewTimer(stdinDrain)
	defer limit.Stop()
	for {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
		case <-limit.C:
			return
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Close ends a wait for answers (awaitAnswers) and closes the connection.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}
