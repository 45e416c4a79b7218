package otlptest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/internal/otlptest"
)

// The SDK's OTLP/HTTP exporter's spans come out as they went in.
func TestCollectorReceivesTheExportersSpans(t *testing.T) {
	c := otlptest.New(t)
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.URL()+"/v1/traces"), otlptracehttp.WithHeaders(map[string]string{"x-k": "v"}))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "svc"))))
	_, s := tp.Tracer("t").Start(ctx, "op", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.Int("n", 7)))
	s.End()
	require.NoError(t, tp.Shutdown(ctx))
	spans := c.Spans()
	require.EqualValuesf(t, 1, len(spans), "%d spans, want 1", len(spans))
	got := spans[0]
	if got.Service != "svc" || got.GetName() != "op" || otlptest.Attr(got.GetAttributes(), "n").GetIntValue() != 7 ||
		[16]byte(got.GetTraceId()) != s.SpanContext().TraceID() {
		assert.Fail(t, fmt.Sprintf("received %v of %q, want op of svc with n=7 and the span's trace id", got.Span, got.Service))
	}
	if c.Headers("svc").Get("X-K") != "v" || c.Headers("other") != nil {
		assert.Fail(t, fmt.Sprintf("headers of svc: %v", c.Headers("svc")))
	}
}
