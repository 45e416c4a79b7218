package mcpbridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// noAnswerHTTP wraps the go-sdk's streamable HTTP handler so that a
// request the client cancelled (notifications/cancelled) gets no
// response, as MCP says a server should not send one.
//
// The go-sdk answers every request its handler returned from, on the
// request's stream while it is open: its JSON-RPC connection writes the
// response whatever the request's context says
// (internal/jsonrpc2/conn.go, processResult: "writeErr :=
// c.write(notDone{req.ctx}, response)"), and the HTTP handler builds its
// transport itself, so the connection cannot be wrapped as on stdio
// (NoAnswerToCancelled). What can be wrapped is the http.ResponseWriter
// the go-sdk writes each SSE event to, one Write per event (mcp/event.go,
// writeEvent): the POST that carries a call registers its writer under
// (session, request id); the POST of a notifications/cancelled for that
// id marks it; a marked writer drops the event that is the request's
// response. The stream then ends as it would have, without it. Progress
// and other notifications of the call still pass.
//
// Only the POST that made the call is guarded: a stream resumed with
// Last-Event-ID (GET) after the cancel gets the response from the
// go-sdk's event store, which keeps it.
type noAnswerHTTP struct {
	next http.Handler
	mu   sync.Mutex
	// calls: the open POSTs of calls, by session and request id; an entry
	// lives as long as its POST, so the map holds at most one per open
	// HTTP request.
	calls map[callKey]*cancelWriter
}

type callKey struct{ session, id string }

func newNoAnswerHTTP(next http.Handler) *noAnswerHTTP {
	return &noAnswerHTTP{next: next, calls: map[callKey]*cancelWriter{}}
}

// requestIDKey is the canonical form of a JSON-RPC id (a string or a
// number), "" when raw is none.
func requestIDKey(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	switch v.(type) {
	case string, float64:
		return fmt.Sprintf("%T:%v", v, v)
	}
	return ""
}

// rpcHead is what noAnswerHTTP reads of a message: enough to tell a call,
// a cancellation and a response apart.
type rpcHead struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

func (h *noAnswerHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	session := r.Header.Get("Mcp-Session-Id")
	if r.Method != http.MethodPost || session == "" || r.Body == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	// The body is read whole (as the go-sdk does), up to its bound; one
	// past it goes on unread for the go-sdk to refuse.
	b, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	var msg rpcHead
	if err != nil || len(b) > mcp.DefaultMaxRequestBodyBytes || json.Unmarshal(b, &msg) != nil {
		h.next.ServeHTTP(w, r)
		return
	}
	id := requestIDKey(msg.ID)
	switch {
	case msg.Method == "notifications/cancelled" && id == "":
		if k := requestIDKey(msg.Params.RequestID); k != "" {
			h.mu.Lock()
			if cw := h.calls[callKey{session, k}]; cw != nil {
				cw.cancel()
			}
			h.mu.Unlock()
		}
	case msg.Method != "" && id != "":
		key := callKey{session, id}
		h.mu.Lock()
		_, taken := h.calls[key] // an id in use: the go-sdk refuses it
		cw := &cancelWriter{ResponseWriter: w, id: id}
		if !taken {
			h.calls[key] = cw
		}
		h.mu.Unlock()
		if !taken {
			defer func() {
				h.mu.Lock()
				delete(h.calls, key)
				h.mu.Unlock()
			}()
			w = cw
		}
	}
	h.next.ServeHTTP(w, r)
}

// cancelWriter is the ResponseWriter of a call's POST: once the call is
// cancelled it drops the SSE event of the call's response.
type cancelWriter struct {
	http.ResponseWriter
	id string

	mu        sync.Mutex
	cancelled bool
}

func (c *cancelWriter) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled = true
}

// Unwrap gives http.ResponseController the writer beneath, for Flush.
func (c *cancelWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *cancelWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	cancelled := c.cancelled
	c.mu.Unlock()
	if cancelled && c.isResponse(p) {
		return len(p), nil
	}
	return c.ResponseWriter.Write(p)
}

// isResponse reports whether p, one SSE event (or a JSON body), is the
// response to the call.
func (c *cancelWriter) isResponse(p []byte) bool {
	data := p
	if i := bytes.Index(p, []byte("data: ")); i >= 0 {
		data = p[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	var msg rpcHead
	if json.Unmarshal(data, &msg) != nil {
		return false
	}
	return msg.Method == "" && requestIDKey(msg.ID) == c.id
}
