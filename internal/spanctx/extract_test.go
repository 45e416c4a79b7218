package spanctx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/internal/spanctx"
)

// Extract reads what the OpenTelemetry propagators read, and ignores what
// they ignore.
func TestExtractAgreesWithThePropagator(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	for _, tp := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has no more
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"",
		"garbage",
	} {
		m := map[string]string{"traceparent": tp, "tracestate": "vendor=x", "baggage": "tenant=acme"}
		got := trace.SpanContextFromContext(spanctx.Extract(context.Background(), m))
		want := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(m)))
		assert.Falsef(t, !got.Equal(want), "traceparent %q: got %v, want %v", tp, got, want)
	}
}
