package mcpbridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawSession speaks MCP's streamable HTTP by hand, as a client of another
// SDK would, to see what goes over the wire: event ids, a stream dropped
// and resumed, a response that must not come.
type rawSession struct {
	url     string
	session string // Mcp-Session-Id
}

// rawProtocol is the protocol version of the raw sessions: one with
// sessions, event ids and resumption.
const rawProtocol = "2025-11-25"

// resume resumes the session's dropped stream after the event lastID
// (GET with Last-Event-ID) and returns the response. Until the server has
// seen the dropped connection go (its HTTP server notices a peer's close
// on its own time), the stream is still held and a resumption gets 409
// Conflict: resume tries again, as the go-sdk's client does, for up to
// 10 s, and returns the last answer.
func (r *rawSession) resume(t *testing.T, ctx context.Context, lastID string) *http.Response {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := r.request(t, ctx, http.MethodGet, "", map[string]string{"Last-Event-ID": lastID, "Accept": "text/event-stream"})
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			return resp
		}
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond) // the server gives no signal of the close to wait on
	}
}

func (r *rawSession) request(t *testing.T, ctx context.Context, method, body string, header map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url, rd)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
		req.Header.Set("MCP-Protocol-Version", rawProtocol)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id   string
	data string
}

// message decodes the event's JSON-RPC message; nil for an event with no
// data (a priming event).
func (e sseEvent) message(t *testing.T) map[string]any {
	t.Helper()
	if e.data == "" {
		return nil
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.data), &m), "event data %q", e.data)
	return m
}

// sseEvents reads the events of an SSE body, one per call of next; next
// returns ok false at the end of the body.
type sseEvents struct{ r *bufio.Reader }

func newSSE(t *testing.T, resp *http.Response) *sseEvents {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	return &sseEvents{r: bufio.NewReader(resp.Body)}
}

func (s *sseEvents) next(t *testing.T) (sseEvent, bool) {
	t.Helper()
	var e sseEvent
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return e, false
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if seen {
				return e, true
			}
			continue
		}
		seen = true
		switch k, v, _ := strings.Cut(line, ":"); k {
		case "id":
			e.id = strings.TrimSpace(v)
		case "data":
			e.data += strings.TrimPrefix(v, " ")
		}
	}
}

// untilMessage reads events until one carries a message ok accepts, and
// returns it with its event.
func (s *sseEvents) untilMessage(t *testing.T, ok func(map[string]any) bool) (sseEvent, map[string]any) {
	t.Helper()
	for {
		e, more := s.next(t)
		require.True(t, more, "the stream ended before the message looked for")
		if m := e.message(t); m != nil && ok(m) {
			return e, m
		}
	}
}

func isResponse(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool {
		_, hasMethod := m["method"]
		return !hasMethod && m["id"] == id
	}
}

func isMethod(method string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["method"] == method }
}

// startRaw runs skulk-host mcp serve --http in front of the test MCP
// server under skulk-mcp and initializes a raw session with it.
func startRaw(t *testing.T, ctx context.Context, extraEnv ...string) (*serveSession, *rawSession) {
	t.Helper()
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	args := []string{"mcp", "serve", "--http", "127.0.0.1:0", "--env", envServer + "=1", "--env", envGORACE}
	for _, e := range extraEnv {
		args = append(args, "--env", e)
	}
	r := &rawSession{url: s.listen(t, append(args, "--", wrapperBin, "--", selfBin), 60*time.Second)}
	resp := r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+rawProtocol+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	r.session = resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, r.session)
	_, m := newSSE(t, resp).untilMessage(t, isResponse(1))
	resp.Body.Close()
	require.Contains(t, m, "result")
	resp = r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	return s, r
}

// closeRaw ends the raw session (DELETE) and stops the server as
// serveSession.close does.
func closeRaw(t *testing.T, ctx context.Context, s *serveSession, r *rawSession) {
	t.Helper()
	resp := r.request(t, ctx, http.MethodDelete, "", nil)
	resp.Body.Close()
	assert.Less(t, resp.StatusCode, 300, "DELETE of the session")
	s.sess = nil
	s.close(t)
}

// TestHTTPStreamResumed: a client whose stream of a tools/call drops in
// the middle of the call (after a progress notification) reconnects with
// GET and Last-Event-ID, and gets the rest of the call's stream: the
// result. The call was not cancelled by the drop.
func TestHTTPStreamResumed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, r := startRaw(t, ctx)

	callCtx, dropStream := context.WithCancel(ctx)
	resp := r.request(t, callCtx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":2000},"_meta":{"progressToken":"p"}}}`, nil)
	events := newSSE(t, resp)
	prime, more := events.next(t)
	require.True(t, more)
	assert.NotEmpty(t, prime.id, "the priming event has an id")
	e, m := events.untilMessage(t, isMethod("notifications/progress"))
	require.NotEmpty(t, e.id, "every event has an id")
	assert.Equal(t, "sleeping", m["params"].(map[string]any)["message"])
	// The stream drops in the middle of the call.
	dropStream()
	resp.Body.Close()

	resp = r.resume(t, ctx, e.id)
	defer resp.Body.Close()
	_, m = newSSE(t, resp).untilMessage(t, func(m map[string]any) bool {
		require.NotEqual(t, "notifications/progress", m["method"], "an event before Last-Event-ID was sent again")
		return isResponse(2)(m)
	})
	res, ok := m["result"].(map[string]any)
	require.True(t, ok, "the resumed stream carries the call's result: %v", m)
	assert.NotEqual(t, true, res["isError"], "the call went on through the drop: %v", res)
	raw, err := json.Marshal(res["content"])
	require.NoError(t, err)
	assert.Contains(t, string(raw), "slept")
	closeRaw(t, ctx, s, r)
}

// TestHTTPCancelledGetsNoAnswer: over streamable HTTP, a tools/call the
// client cancels (notifications/cancelled on another POST) is cancelled
// in the MCP server behind skulk-mcp, and its stream ends without a
// response to it; the session goes on (a ping after it is answered).
func TestHTTPCancelledGetsNoAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mark := filepath.Join(t.TempDir(), "mark")
	s, r := startRaw(t, ctx, envMark+"="+mark)

	resp := r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000},"_meta":{"progressToken":"p"}}}`, nil)
	defer resp.Body.Close()
	events := newSSE(t, resp)
	events.untilMessage(t, isMethod("notifications/progress")) // the call runs in the server
	c := r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`, nil)
	c.Body.Close()
	require.Equal(t, http.StatusAccepted, c.StatusCode)
	waitFile(t, mark, "cancelled sleep", 20*time.Second)

	// The call's stream ends, and nothing on it answers request 2.
	requireEndsUnanswered(t, events, 2, "the cancelled call's stream")

	resp = r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil)
	defer resp.Body.Close()
	_, m := newSSE(t, resp).untilMessage(t, isResponse(3))
	assert.Contains(t, m, "result")
	closeRaw(t, ctx, s, r)
}

// TestHTTPCancelledNotReplayed: a call whose stream dropped and that the
// client then cancelled is cancelled in the MCP server behind skulk-mcp,
// and a stream resumed with Last-Event-ID does not bring its response:
// neither replayed from the event store nor written live to the resumed
// stream, whichever comes first. The resumed stream ends, and the session
// goes on.
func TestHTTPCancelledNotReplayed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mark := filepath.Join(t.TempDir(), "mark")
	s, r := startRaw(t, ctx, envMark+"="+mark)

	callCtx, dropStream := context.WithCancel(ctx)
	resp := r.request(t, callCtx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000},"_meta":{"progressToken":"p"}}}`, nil)
	e, _ := newSSE(t, resp).untilMessage(t, isMethod("notifications/progress")) // the call runs in the server
	require.NotEmpty(t, e.id)
	dropStream()
	resp.Body.Close()
	c := r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`, nil)
	c.Body.Close()
	require.Equal(t, http.StatusAccepted, c.StatusCode)
	waitFile(t, mark, "cancelled sleep", 20*time.Second)

	resp = r.resume(t, ctx, e.id)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the resumption of the dropped stream")
	requireEndsUnanswered(t, newSSE(t, resp), 2, "the resumed stream of a cancelled call")
	resp.Body.Close()

	resp = r.request(t, ctx, http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil)
	defer resp.Body.Close()
	_, m := newSSE(t, resp).untilMessage(t, isResponse(3))
	assert.Contains(t, m, "result")
	closeRaw(t, ctx, s, r)
}

// requireEndsUnanswered reads events until their stream ends, within 20 s,
// and fails if one of them is the response to request id: what names the
// stream in the failure.
func requireEndsUnanswered(t *testing.T, events *sseEvents, id float64, what string) {
	t.Helper()
	ended := make(chan []map[string]any, 1) // one value, from the goroutine below
	go func() {                             // ends with the stream
		var got []map[string]any
		for {
			e, more := events.next(t)
			if !more {
				ended <- got
				return
			}
			if m := e.message(t); m != nil {
				got = append(got, m)
			}
		}
	}()
	select {
	case got := <-ended:
		for _, m := range got {
			assert.False(t, isResponse(id)(m), "%s: request %d was answered: %v", what, id, m)
		}
	case <-time.After(20 * time.Second):
		require.FailNow(t, what+" did not end within 20 s")
	}
}
