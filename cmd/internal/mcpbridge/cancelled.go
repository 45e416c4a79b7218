package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
//     request read has been answered, or after drain, or when the
//     connection is closed or the session's context ends (SIGINT or
//     SIGTERM, which also stop a read of an input still open). A request
//     the server sent the client and the client did not answer before its
//     input ended gets an error answer (errInputEnded) at once, so a tool
//     that waits on one fails rather than holding the wait.
//
// The wrapper hides the go-sdk connection's unexported sessionUpdated
// hook, so the connection never learns the negotiated protocol version,
// which it uses only to refuse JSON-RPC batches from 2025-06-18 on. Wrap
// a LineTransport, which answers a batch with an error before the go-sdk
// reads it, so that none reaches the connection.
//
// Over streamable HTTP the go-sdk owns the connection (noAnswerHTTP).
func StdioTransport(t mcp.Transport, drain time.Duration) mcp.Transport {
	return &stdioTransport{inner: t, drain: drain}
}

type stdioTransport struct {
	inner mcp.Transport
	drain time.Duration // the bound on the wait for answers once the input ended
}

// errInputEnded answers a request this server sent the client (sampling,
// elicitation, roots) that the client can no longer answer: its input
// ended first.
var errInputEnded = errors.New("the client's input ended before it answered")

// Connect connects the inner transport. ctx is the session's (Server.Run
// gives its own): its end closes the connection, which stops a read of an
// input still open and a wait for answers.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := &stdioConn{Connection: c, drain: t.drain, inflight: map[jsonrpc.ID]bool{}, outgoing: map[jsonrpc.ID]struct{}{},
		wake: make(chan struct{}, 1), closed: make(chan struct{})}
	sc.stopAfter = context.AfterFunc(ctx, func() { _ = sc.shutdown() })
	return sc, nil
}

// stdioConn tracks the requests read and not yet answered (inflight:
// id → cancelled) and the requests written and not yet answered
// (outgoing). Their sizes are bounded by the requests the go-sdk keeps in
// flight each way: an id leaves inflight when its response is written or
// dropped, outgoing when its response is read, when the server cancels
// it, when its write fails, or when an answer is made up after the input
// ended.
type stdioConn struct {
	mcp.Connection
	drain time.Duration

	mu       sync.Mutex
	inflight map[jsonrpc.ID]bool
	outgoing map[jsonrpc.ID]struct{}

	// Read's own: the go-sdk reads from one goroutine.
	inputErr error     // the input's end (a failed read), once seen
	drainEnd time.Time // when the wait for answers gives up: drain after inputErr

	wake      chan struct{} // inflight lost an id or outgoing gained one (size 1: a wake-up, not a count)
	closed    chan struct{} // closed by shutdown
	closeOnce sync.Once
	stopAfter func() bool // stops Connect's AfterFunc
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.inputErr != nil {
		return c.afterInput()
	}
	m, err := c.Connection.Read(ctx)
	if err != nil {
		c.inputErr, c.drainEnd = err, time.Now().Add(c.drain)
		return c.afterInput()
	}
	switch m := m.(type) {
	case *jsonrpc.Response:
		c.mu.Lock()
		delete(c.outgoing, m.ID)
		c.mu.Unlock()
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			c.mu.Lock()
			c.inflight[m.ID] = false
			c.mu.Unlock()
		case m.Method == "notifications/cancelled":
			if id, ok := cancelledID(m); ok {
				c.mu.Lock()
				if _, ok := c.inflight[id]; ok {
					c.inflight[id] = true
				}
				c.mu.Unlock()
			}
		}
	}
	return m, nil
}

// cancelledID is the id of the request a notifications/cancelled names.
func cancelledID(m *jsonrpc.Request) (jsonrpc.ID, bool) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	return id, err == nil
}

// afterInput is what Read returns once the input ended: a made-up error
// response (errInputEnded) to each request this server sent and the client
// did not answer, one per read, and then the input's error, once every
// request read has been answered, or at drainEnd, or once the connection
// is closed (Close, or the session's context ended).
func (c *stdioConn) afterInput() (jsonrpc.Message, error) {
	limit := time.NewTimer(time.Until(c.drainEnd))
	defer limit.Stop()
	for {
		c.mu.Lock()
		for id := range c.outgoing {
			delete(c.outgoing, id)
			c.mu.Unlock()
			return &jsonrpc.Response{ID: id, Error: errInputEnded}, nil
		}
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 0 {
			return nil, c.inputErr
		}
		select {
		case <-c.wake:
		case <-limit.C:
			return nil, c.inputErr
		case <-c.closed:
			return nil, c.inputErr
		}
	}
}

func (c *stdioConn) Write(ctx context.Context, m jsonrpc.Message) error {
	switch m := m.(type) {
	case *jsonrpc.Response:
		c.mu.Lock()
		cancelled := c.inflight[m.ID]
		delete(c.inflight, m.ID)
		c.mu.Unlock()
		defer c.signal() // after the response is written
		if cancelled {
			return nil
		}
	case *jsonrpc.Request:
		switch {
		case m.IsCall():
			c.mu.Lock()
			c.outgoing[m.ID] = struct{}{}
			c.mu.Unlock()
			defer c.signal() // an answer to make up if the input ended
			if err := c.Connection.Write(ctx, m); err != nil {
				c.mu.Lock()
				delete(c.outgoing, m.ID) // never sent: no answer to wait for
				c.mu.Unlock()
				return err
			}
			return nil
		case m.Method == "notifications/cancelled":
			// The server gave up on its own request: the client is not
			// to answer it.
			if id, ok := cancelledID(m); ok {
				c.mu.Lock()
				delete(c.outgoing, id)
				c.mu.Unlock()
			}
		}
	}
	return c.Connection.Write(ctx, m)
}

// signal wakes afterInput.
func (c *stdioConn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close stops Connect's AfterFunc and shuts the connection down.
func (c *stdioConn) Close() error {
	c.stopAfter()
	return c.shutdown()
}

// shutdown ends a wait for answers (afterInput) and closes the inner
// connection, which may be closed many times.
func (c *stdioConn) shutdown() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}
