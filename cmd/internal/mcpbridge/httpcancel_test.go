package mcpbridge

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoAnswerHTTP: noAnswerHTTP drops the response event of a call
// cancelled in the same session, and only that: not a notification of the
// call, not the response of a call cancelled in another session or of
// another id; its tables are empty once the POSTs ended and the responses
// were stored; a body it cannot read as one message goes on untouched.
// Its event store keeps the same responses as the stream shows, so a
// stream replayed after a cancel does not bring the response back.
func TestNoAnswerHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newNoAnswerHTTP()
	events := h.store(mcp.NewMemoryEventStore(nil))
	// next plays the go-sdk: a call's POST opens a stream, sends a
	// progress event, lets the test cancel it, then stores and sends its
	// response event.
	var during func()
	stream := 0
	h.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("X-Test"), "call") {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		session := r.Header.Get("Mcp-Session-Id")
		stream++
		id := fmt.Sprint(stream)
		require.NoError(t, events.Open(ctx, session, id))
		w.Header().Set("Content-Type", "text/event-stream")
		progress := `{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`
		require.NoError(t, events.Append(ctx, session, id, []byte(progress)))
		_, _ = w.Write([]byte("event: message\nid: s_1\ndata: " + progress + "\n\n"))
		during()
		response := `{"jsonrpc":"2.0","id":7,"result":{}}`
		require.NoError(t, events.Append(ctx, session, id, []byte(response)))
		_, _ = w.Write([]byte("event: message\nid: s_2\ndata: " + response + "\n\n"))
		w.Header().Set("X-Stream", id)
	})
	replay := func(session, stream string) string {
		var b strings.Builder
		for data, err := range events.After(ctx, session, stream, -1) {
			require.NoError(t, err)
			b.Write(data)
		}
		return b.String()
	}
	post := func(session, body, kind string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("X-Test", kind)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`
	cancelIn := func(session string, id string) func() {
		return func() {
			post(session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`}}`, "note")
		}
	}

	during = cancelIn("A", "7")
	w := post("A", call, "call")
	assert.Contains(t, w.Body.String(), "notifications/progress", "the call's notifications pass")
	assert.NotContains(t, w.Body.String(), `"id":7`, "the cancelled call's response is dropped")
	replayed := replay("A", w.Header().Get("X-Stream"))
	assert.Contains(t, replayed, "notifications/progress", "the call's notifications are replayed")
	assert.NotContains(t, replayed, `"id":7`, "the cancelled call's response is replayed")

	for name, c := range map[string]func(){"other session": cancelIn("B", "7"), "other id": cancelIn("A", "8"), "string id": cancelIn("A", `"7"`), "none": func() {}} {
		during = c
		w = post("A", call, "call")
		assert.Contains(t, w.Body.String(), `"id":7`, name)
		assert.Contains(t, replay("A", w.Header().Get("X-Stream")), `"id":7`, name)
	}
	during = cancelIn("A", "7")
	w = post("A", `[`+call+`]`, "call") // not one message: untouched
	assert.Contains(t, w.Body.String(), `"id":7`)
	h.mu.Lock()
	require.Empty(t, h.calls, "an entry outlived its POST")
	require.Empty(t, h.inflight, "an entry outlived its response")
	h.mu.Unlock()

	// A stream resumed (GET with Last-Event-ID) before the response of a
	// call cancelled after its POST ended gets the response live: it is
	// dropped there too, and only it.
	h.mu.Lock()
	h.inflight[callKey{"A", "float64:9"}] = true
	h.mu.Unlock()
	h.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, events.Open(ctx, "A", "g"))
		for _, response := range []string{`{"jsonrpc":"2.0","id":9,"result":{}}`, `{"jsonrpc":"2.0","id":10,"result":{}}`} {
			require.NoError(t, events.Append(ctx, "A", "g", []byte(response)))
			_, _ = w.Write([]byte("event: message\nid: g_1\ndata: " + response + "\n\n"))
		}
	})
	get := httptest.NewRequest(http.MethodGet, "/", nil)
	get.Header.Set("Mcp-Session-Id", "A")
	get.Header.Set("Last-Event-ID", "g_0")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, get)
	assert.NotContains(t, w.Body.String(), `"id":9`, "the cancelled call's response reached the resumed stream")
	assert.Contains(t, w.Body.String(), `"id":10`)
	assert.NotContains(t, replay("A", "g"), `"id":9`)
	h.mu.Lock()
	require.Empty(t, h.dropped, "a dropped response's entry outlived its write")
	require.Empty(t, h.droppedOrder, "a dropped response's entry outlived its write")
	h.mu.Unlock()

	// A call the go-sdk refuses (no event stream) never reaches the
	// store: its entry leaves with its POST. One whose session ends
	// leaves with the session.
	h.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused", http.StatusBadRequest)
	})
	post("A", call, "call")
	h.mu.Lock()
	require.Empty(t, h.inflight, "a refused call's entry outlived its POST")
	h.inflight[callKey{"A", "float64:9"}] = false
	h.mu.Unlock()
	require.NoError(t, events.SessionClosed(ctx, "A"))
	h.mu.Lock()
	require.Empty(t, h.inflight, "an entry outlived its session")
	h.mu.Unlock()
}

// TestNoAnswerHTTPDroppedBound: the responses waiting to be dropped are at
// most maxDropped, the oldest forgotten first; an entry that was written
// (or whose session ended) leaves the order as well, so it never counts
// against the bound nor forgets a newer entry of the same id.
func TestNoAnswerHTTPDroppedBound(t *testing.T) {
	t.Parallel()
	h := newNoAnswerHTTP()
	k := callKey{"A", "float64:1"}
	for range 3 * maxDropped { // dropped and written, one after another
		h.drop(k)
		h.forget(k)
	}
	require.Empty(t, h.dropped)
	require.Empty(t, h.droppedOrder, "written entries stay in the order")

	// An id dropped, written and dropped again, then maxDropped-1 others:
	// all fit, the id's newest entry among them.
	h.drop(k)
	h.forget(k)
	h.drop(k)
	for i := range maxDropped - 1 {
		h.drop(callKey{"A", fmt.Sprintf("float64:%d", 100+i)})
	}
	require.True(t, h.dropped[k], "an entry was forgotten for an older one of its id")
	require.Len(t, h.dropped, maxDropped)
	require.Len(t, h.droppedOrder, maxDropped)

	// One more: the oldest (k) is forgotten.
	h.drop(callKey{"A", "float64:99999"})
	require.False(t, h.dropped[k])
	require.Len(t, h.dropped, maxDropped)
	require.Len(t, h.droppedOrder, maxDropped)
	require.NotContains(t, h.droppedOrder, k)

	// A session's end takes its entries out of both.
	require.NoError(t, h.store(mcp.NewMemoryEventStore(nil)).SessionClosed(context.Background(), "A"))
	require.Empty(t, h.dropped)
	require.Empty(t, h.droppedOrder)
}
