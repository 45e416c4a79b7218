package mcpbridge_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldHeaderClient is the HTTP side of a go-sdk client that, as the
// conformance suite's raw requests do, names protocol version 2025-03-26
// in the Mcp-Protocol-Version header of every request of its session
// (after initialize, which negotiated 2025-11-25), and keeps the event
// streams it received, to see what went over the wire.
type oldHeaderClient struct {
	mu        sync.Mutex
	exchanges []*exchange
}

// exchange is one HTTP request of the session and the body of its event
// stream (read as the client reads it).
type exchange struct {
	method      string
	lastEventID string
	request     string
	mu          sync.Mutex
	stream      bytes.Buffer
}

func (e *exchange) body() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stream.String()
}

type teeBody struct {
	io.ReadCloser
	e *exchange
}

func (b teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.e.mu.Lock()
	b.e.stream.Write(p[:n])
	b.e.mu.Unlock()
	return n, err
}

func (c *oldHeaderClient) RoundTrip(req *http.Request) (*http.Response, error) {
	e := &exchange{method: req.Method, lastEventID: req.Header.Get("Last-Event-ID")}
	if req.Header.Get("Mcp-Session-Id") != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Mcp-Protocol-Version", "2025-03-26")
	}
	if req.Body != nil && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			raw, _ := io.ReadAll(b)
			e.request = string(raw)
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = teeBody{resp.Body, e}
	}
	c.mu.Lock()
	c.exchanges = append(c.exchanges, e)
	c.mu.Unlock()
	return resp, nil
}

// find returns the exchanges ok accepts.
func (c *oldHeaderClient) find(ok func(*exchange) bool) []*exchange {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*exchange
	for _, e := range c.exchanges {
		if ok(e) {
			out = append(out, e)
		}
	}
	return out
}

// TestHTTPSessionVersionAndSSEPoll: mcp serve --http --sse-poll serves a
// session's requests at the version the session negotiated (2025-11-25)
// although their header names 2025-03-26: a call's stream opens with a
// priming event. A call that outlasts --sse-poll has its POST stream
// closed with a retry hint of the same duration, without its result; the
// go-sdk client comes back with Last-Event-ID and gets the result there.
// A call shorter than --sse-poll is answered on its POST, which is not
// closed early.
//
// It runs alone (not t.Parallel): its quick call must be answered within
// --sse-poll's 300 ms, and other tests' commands would slow it.
func TestHTTPSessionVersionAndSSEPoll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wire := &oldHeaderClient{}
	s := startServeHTTPClient(t, ctx, &http.Client{Transport: wire}, []string{"--sse-poll", "300ms", "--env", envServer + "=1", "--env", envGORACE}, wrapperBin, "--", selfBin)
	require.Equal(t, "2025-11-25", s.sess.InitializeResult().ProtocolVersion)

	start := time.Now()
	res := callTool(t, ctx, s.sess, "sleep", map[string]any{"ms": 1500}, nil)
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond)
	require.False(t, res.IsError, "%s", textOf(res))
	assert.Equal(t, "slept|", textOf(res))

	posts := wire.find(func(e *exchange) bool { return e.method == http.MethodPost && strings.Contains(e.request, `"sleep"`) })
	require.Len(t, posts, 1)
	post := posts[0].body()
	assert.Regexp(t, `^event: prime\nid: \S+\ndata: \n\n`, post, "the call's stream opens with a priming event")
	assert.Contains(t, post, "retry: 300\n", "the stream is closed with a retry hint of --sse-poll")
	assert.NotContains(t, post, "slept", "the result came on the POST: its stream was not closed")
	gets := wire.find(func(e *exchange) bool { return e.method == http.MethodGet && e.lastEventID != "" })
	require.NotEmpty(t, gets, "the client did not resume with Last-Event-ID")
	var resumed string
	for _, g := range gets {
		resumed += g.body()
	}
	assert.Contains(t, resumed, "slept", "the resumed stream carries the result")

	res = callTool(t, ctx, s.sess, "echo", map[string]any{"text": "quick"}, nil)
	require.False(t, res.IsError, "%s", textOf(res))
	posts = wire.find(func(e *exchange) bool { return e.method == http.MethodPost && strings.Contains(e.request, `"echo"`) })
	require.Len(t, posts, 1)
	post = posts[0].body()
	assert.Regexp(t, `^event: prime\nid: \S+\ndata: \n\n`, post, "the call's stream opens with a priming event")
	assert.Contains(t, post, "quick", "a short call is answered on its POST")
	assert.NotContains(t, post, "retry:", "a short call's stream is not closed early")
	s.close(t)
}
