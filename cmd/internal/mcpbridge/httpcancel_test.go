package mcpbridge

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoAnswerHTTP: noAnswerHTTP drops the response event of a call
// cancelled in the same session, and only that: not a notification of the
// call, not the response of a call cancelled in another session or of
// another id; its table is empty once the POSTs ended; a body it cannot
// read as one message goes on untouched.
func TestNoAnswerHTTP(t *testing.T) {
	var h *noAnswerHTTP
	// next plays the go-sdk: a call's POST sends a progress event, lets
	// the test cancel it, then sends its response event.
	var during func()
	h = newNoAnswerHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("X-Test"), "call") {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		_, _ = w.Write([]byte("event: message\nid: s_1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"))
		during()
		_, _ = w.Write([]byte("event: message\nid: s_2\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n"))
	}))
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

	for name, c := range map[string]func(){"other session": cancelIn("B", "7"), "other id": cancelIn("A", "8"), "string id": cancelIn("A", `"7"`), "none": func() {}} {
		during = c
		w = post("A", call, "call")
		assert.Contains(t, w.Body.String(), `"id":7`, name)
	}
	during = cancelIn("A", "7")
	w = post("A", `[`+call+`]`, "call") // not one message: untouched
	assert.Contains(t, w.Body.String(), `"id":7`)
	h.mu.Lock()
	require.Empty(t, h.calls, "an entry outlived its POST")
	h.mu.Unlock()
}
