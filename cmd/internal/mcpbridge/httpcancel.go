package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
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
// (StdioTransport). What can be wrapped is the http.ResponseWriter
// the go-sdk writes each SSE event to, one Write per event (mcp/event.go,
// writeEvent): the POST that carries a call registers its writer under
// (session, request id); the POST of a notifications/cancelled for that
// id marks it; a marked writer drops the event that is the request's
// response. The stream then ends as it would have, without it. Progress
// and other notifications of the call still pass.
//
// A stream resumed with Last-Event-ID (GET) replays the events the
// go-sdk's event store kept, the response among them: the store is
// wrapped too (store), and keeps an empty event in place of the response
// to a call cancelled before it (the go-sdk skips empty events when it
// replays, as it does its priming events); a resumed stream that holds
// the call's stream when its response comes gets the response live, and
// drops it as a POST's writer does (resumeWriter). A call is tracked from
// its POST until its response reaches the store, so a cancel that comes
// after the call's POST ended (a stream the client dropped, or one SSE
// polling closed) still counts.
type noAnswerHTTP struct {
	next http.Handler
	mu   sync.Mutex
	// calls: the open POSTs of calls, by session and request id; an entry
	// lives as long as its POST, so the map holds at most one per open
	// HTTP request.
	calls map[callKey]*cancelWriter
	// inflight: the calls the go-sdk accepted and has not answered yet,
	// true once cancelled. An entry leaves when the call's response
	// reaches the event store, when the go-sdk refused the call's POST,
	// or when its session ends, so the map holds at most one per call the
	// go-sdk has in flight.
	inflight map[callKey]bool
	// dropped: the cancelled calls whose response the store just dropped,
	// for a resumed stream (GET) that the go-sdk writes the response to
	// right after storing it; at most maxDropped, the oldest forgotten
	// first (the go-sdk writes a response in the same critical section it
	// stores it in, so only a writer that was never there leaves one
	// behind). droppedOrder holds the same keys, oldest first: a key
	// leaves both at once (forget).
	dropped      map[callKey]bool
	droppedOrder []callKey
}

// maxDropped bounds noAnswerHTTP.dropped.
const maxDropped = 1024

type callKey struct{ session, id string }

// newNoAnswerHTTP returns the filter; set its next, the go-sdk's handler
// built with the filter's store, before serving.
func newNoAnswerHTTP() *noAnswerHTTP {
	return &noAnswerHTTP{calls: map[callKey]*cancelWriter{}, inflight: map[callKey]bool{}, dropped: map[callKey]bool{}}
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
	if r.Method == http.MethodGet && session != "" && r.Header.Get("Last-Event-ID") != "" {
		// A resumed stream: the go-sdk goes on writing the stream's live
		// events to it.
		h.next.ServeHTTP(&resumeWriter{ResponseWriter: w, h: h, session: session}, r)
		return
	}
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
			key := callKey{session, k}
			h.mu.Lock()
			if cw := h.calls[key]; cw != nil {
				cw.cancel()
			}
			if _, ok := h.inflight[key]; ok {
				h.inflight[key] = true
			}
			h.mu.Unlock()
		}
	case msg.Method != "" && id != "":
		key := callKey{session, id}
		h.mu.Lock()
		_, taken := h.calls[key] // an id in use: the go-sdk refuses it
		cw := &cancelWriter{ResponseWriter: w, id: id, h: h, session: session}
		if !taken {
			h.calls[key] = cw
			h.inflight[key] = false
		}
		h.mu.Unlock()
		if !taken {
			defer func() {
				// The go-sdk answers an SSE stream of a call it accepted;
				// any other answer refused the call, which then never
				// reaches the store.
				accepted := strings.HasPrefix(cw.Header().Get("Content-Type"), "text/event-stream")
				h.mu.Lock()
				delete(h.calls, key)
				if !accepted {
					delete(h.inflight, key)
				}
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
	id      string
	h       *noAnswerHTTP
	session string

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
	if cancelled && responseID(p) == c.id {
		c.h.mu.Lock()
		c.h.forget(callKey{c.session, c.id})
		c.h.mu.Unlock()
		return len(p), nil
	}
	return c.ResponseWriter.Write(p)
}

// resumeWriter is the ResponseWriter of a resumed stream (GET with
// Last-Event-ID): it drops the live event of a response the store
// dropped (noAnswerHTTP.dropped).
type resumeWriter struct {
	http.ResponseWriter
	h       *noAnswerHTTP
	session string
}

// Unwrap gives http.ResponseController the writer beneath, for Flush.
func (rw *resumeWriter) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

func (rw *resumeWriter) Write(p []byte) (int, error) {
	// Most events are written with nothing dropped: they are passed on
	// unparsed (an event of a call's stream may be MiBs of JSON).
	rw.h.mu.Lock()
	none := len(rw.h.dropped) == 0
	rw.h.mu.Unlock()
	if none {
		return rw.ResponseWriter.Write(p)
	}
	if id := responseID(p); id != "" {
		key := callKey{rw.session, id}
		rw.h.mu.Lock()
		drop := rw.h.dropped[key]
		rw.h.forget(key)
		rw.h.mu.Unlock()
		if drop {
			return len(p), nil
		}
	}
	return rw.ResponseWriter.Write(p)
}

// responseID is the id (requestIDKey) of the response p is, one SSE event
// (or a JSON body); "" when p is no response.
func responseID(p []byte) string {
	data := p
	if i := bytes.Index(p, []byte("data: ")); i >= 0 {
		data = p[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	return messageResponseID(data)
}

// messageResponseID is the id (requestIDKey) of the response data is, one
// JSON-RPC message; "" when data is no response.
func messageResponseID(data []byte) string {
	var msg rpcHead
	if json.Unmarshal(data, &msg) != nil || msg.Method != "" {
		return ""
	}
	return requestIDKey(msg.ID)
}

// store wraps the go-sdk's event store so that a cancelled call's
// response is never replayed: it keeps an empty event in its place, which
// holds the response's index, and the go-sdk skips when it replays.
func (h *noAnswerHTTP) store(inner mcp.EventStore) mcp.EventStore {
	return &cancelStore{EventStore: inner, h: h}
}

// cancelStore is noAnswerHTTP's event store; see store.
type cancelStore struct {
	mcp.EventStore
	h *noAnswerHTTP
}

func (c *cancelStore) Append(ctx context.Context, session, stream string, data []byte) error {
	if id := messageResponseID(data); id != "" {
		key := callKey{session, id}
		c.h.mu.Lock()
		cancelled := c.h.inflight[key]
		delete(c.h.inflight, key)
		if cancelled {
			c.h.drop(key)
		}
		c.h.mu.Unlock()
		if cancelled {
			data = nil
		}
	}
	return c.EventStore.Append(ctx, session, stream, data)
}

func (c *cancelStore) SessionClosed(ctx context.Context, session string) error {
	c.h.mu.Lock()
	for key := range c.h.inflight {
		if key.session == session {
			delete(c.h.inflight, key)
		}
	}
	for key := range c.h.dropped {
		if key.session == session {
			c.h.forget(key)
		}
	}
	c.h.mu.Unlock()
	return c.EventStore.SessionClosed(ctx, session)
}

// drop notes key in dropped, forgetting the oldest past maxDropped. h.mu
// is held.
func (h *noAnswerHTTP) drop(key callKey) {
	h.forget(key) // an id the session used again: it is the newest now
	h.dropped[key] = true
	h.droppedOrder = append(h.droppedOrder, key)
	if len(h.droppedOrder) > maxDropped {
		delete(h.dropped, h.droppedOrder[0])
		h.droppedOrder = slices.Delete(h.droppedOrder, 0, 1) // in place: the array stays at maxDropped+1
	}
}

// forget removes key from dropped and droppedOrder; a key not there is
// left as it is. h.mu is held. Its cost is bounded by maxDropped, paid
// only while a cancelled call's response is waiting to be dropped.
func (h *noAnswerHTTP) forget(key callKey) {
	if !h.dropped[key] {
		return
	}
	delete(h.dropped, key)
	h.droppedOrder = slices.DeleteFunc(h.droppedOrder, func(k callKey) bool { return k == key })
}
