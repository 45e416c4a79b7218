package pyprovider_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/skulkrt/skulk/host"
)

// traceProvider is a Python provider whose tool answers with what its
// handler sees of the invoke's trace context.
const traceProvider = `
import sys
sys.path.insert(0, sys.argv[1])
import skulk

async def trace(call, frames):
    tc = call.trace_context
    yield call.completed({
        "trace_id": tc.trace_id if tc else "",
        "span_id": tc.span_id if tc else "",
        "sampled": bool(tc and tc.sampled),
        "tracestate": dict(tc.tracestate) if tc else {},
        "tenant": call.baggage.get("tenant", ""),
    })

skulk.main([skulk.Tool("trace", trace)])
`

// startTraceProvider starts a host of the trace provider with cfg.
func startTraceProvider(t *testing.T, cfg host.Config) *host.Host {
	t.Helper()
	demo := provider(t) // skips (or fails) without Python
	script := filepath.Join(t.TempDir(), "trace.py")
	require.NoError(t, os.WriteFile(script, []byte(traceProvider), 0o600))
	cfg.Command, cfg.Args = "/usr/bin/python3", []string{script, filepath.Dir(demo)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, h.Close(ctx), "Close")
	})
	return h
}

func traceCall(t *testing.T, h *host.Host, opts ...host.CallOption) map[string]any {
	t.Helper()
	c, err := h.Call(callCtx(t), "trace", nil, append(opts, host.WithInput())...)
	require.NoError(t, err)
	res, err := c.Wait()
	require.NoError(t, err, "trace")
	m, _ := res.Map()
	return m
}

// The Python handler sees the host span's trace and span ids, its sampled
// flag and the caller's baggage, without OpenTelemetry installed.
func TestHandlerSeesTheHostSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	h := startTraceProvider(t, host.Config{TracerProvider: tp})

	got := traceCall(t, h, host.WithTrace(map[string]string{"baggage": "tenant=acme"}))
	spans := exp.GetSpans()
	require.EqualValuesf(t, 1, len(spans), "%d host spans, want 1", len(spans))
	sc := spans[0].SpanContext
	if got["trace_id"] != sc.TraceID().String() || got["span_id"] != sc.SpanID().String() || got["sampled"] != true || got["tenant"] != "acme" {
		assert.Fail(t, fmt.Sprintf("handler saw %v; want trace %s span %s, sampled, tenant acme", got, sc.TraceID(), sc.SpanID()))
	}
}

// Without a tracer the host passes WithTrace's map as it is: a valid
// traceparent reaches the handler with its tracestate, an invalid one is
// ignored and the call still completes.
func TestHandlerTraceContextFromWithTrace(t *testing.T) {
	h := startTraceProvider(t, host.Config{})
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	got := traceCall(t, h, host.WithTrace(map[string]string{"traceparent": "00-" + tid + "-" + sid + "-00", "tracestate": "rojo=1"}))
	assert.Falsef(t, got["trace_id"] != tid || got["span_id"] != sid || got["sampled"] != false, "handler saw %v; want trace %s span %s, not sampled", got, tid, sid)
	if ts, _ := got["tracestate"].(map[string]any); ts["rojo"] != "1" {
		assert.Fail(t, fmt.Sprintf("tracestate %v, want rojo=1", got["tracestate"]))
	}
	got = traceCall(t, h, host.WithTrace(map[string]string{"traceparent": "00-" + tid + "-0000000000000000-01", "baggage": "tenant=x"}))
	assert.Falsef(t, got["trace_id"] != "" || got["tenant"] != "x", "invalid traceparent: handler saw %v; want no trace context, the baggage", got)
}
