package mcpbridge_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/skulkrt/skulk/internal/otlptest"
)

// skulk-host mcp serve exports a span per tools/call to OTLP when
// OTEL_TRACES_EXPORTER asks, flushed when it exits; the W3C trace context
// of the request's _meta is the span's parent, and a traceparent that does
// not parse starts a trace of its own without failing the call.
func TestServeTracesOTLP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := otlptest.New(t)
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	s.connect(t, ctx, newClient(s.progress), nil, c.Env(), "mcp", "serve", "--", childBin)
	sess := s.sess

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res := callTool(t, ctx, sess, "count", map[string]any{"n": 1}, mcp.Meta{
		"traceparent": "00-" + traceID + "-" + parentID + "-01", "baggage": "tenant=acme", "tracestate": 7})
	if res.IsError {
		require.FailNow(t, fmt.Sprintf("count: %s", textOf(res)))
	}
	res = callTool(t, ctx, sess, "echo", map[string]any{}, mcp.Meta{"traceparent": "00-" + traceID + "-0000000000000000-01"})
	if res.IsError {
		require.FailNow(t, fmt.Sprintf("echo with an invalid traceparent: %s", textOf(res)))
	}
	s.close(t) // skulk-host exits: its spans are flushed by then

	byName := map[string]otlptest.Span{}
	for _, sp := range c.Spans() {
		if sp.GetName() == "skulk.drain" { // the child's, when the server exited
			continue
		}
		if sp.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || sp.Service != "skulk-host" {
			assert.Fail(t, fmt.Sprintf("span %q of kind %v from %q: want only the host's client spans", sp.GetName(), sp.GetKind(), sp.Service))
		}
		byName[sp.GetName()] = sp
	}
	count, echo := byName["count"], byName["echo"]
	require.Falsef(t, count.Span == nil || echo.Span == nil, "spans received: %v; want count and echo", byName)
	if hex.EncodeToString(count.GetTraceId()) != traceID || hex.EncodeToString(count.GetParentSpanId()) != parentID {
		assert.Fail(t, fmt.Sprintf("count's span: trace %x parent %x; want the _meta traceparent's %s, %s", count.GetTraceId(), count.GetParentSpanId(), traceID, parentID))
	}
	if hex.EncodeToString(echo.GetTraceId()) == traceID || len(echo.GetParentSpanId()) != 0 {
		assert.Fail(t, fmt.Sprintf("echo's span continues the invalid traceparent: trace %x parent %x", echo.GetTraceId(), echo.GetParentSpanId()))
	}
}
