// Package otelcall is the host's side of Skulk's OpenTelemetry tracing:
// the tracer Config.TracerProvider resolves to and the W3C propagation of
// an invoke's trace map (package spanctx has what the provider SDK shares
// with it). It uses the OpenTelemetry API only; a program that wants spans
// exported brings an SDK TracerProvider (or sets the global one).
package otelcall

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/internal/spanctx"
)

// unsetGlobal is the global TracerProvider before any program set one: a
// delegating no-op, whose spans nobody records.
var unsetGlobal = otel.GetTracerProvider()

// propagator writes W3C trace context and baggage: the keys of an invoke's
// trace map (docs/protocol.md).
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracing resolves a TracerProvider option: the given provider, or, for
// nil, the global one once a program has set it.
type Tracing struct {
	tp     trace.TracerProvider
	cached atomic.Pointer[cachedTracer]
}

type cachedTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

// New returns the Tracing of tp (nil: the global provider).
func New(tp trace.TracerProvider) *Tracing { return &Tracing{tp: tp} }

// Tracer returns the tracer to start spans with, or nil when tracing is
// off (no provider given and no global one set): the caller then does
// nothing at all, so tracing that is off costs nothing.
func (t *Tracing) Tracer() trace.Tracer {
	tp := t.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
		if tp == unsetGlobal {
			return nil
		}
	}
	if c := t.cached.Load(); c != nil && c.tp == tp {
		return c.t
	}
	c := &cachedTracer{tp: tp, t: tp.Tracer(spanctx.ScopeName)}
	t.cached.Store(c)
	return c.t
}

// Inject returns a copy of base (nil: none) with ctx's trace context and
// baggage written over it: the trace map of an invoke.
func Inject(ctx context.Context, base map[string]string) map[string]string {
	m := make(propagation.MapCarrier, len(base)+3)
	for k, v := range base {
		m[k] = v
	}
	propagator.Inject(ctx, m)
	return m
}

// Extract returns ctx carrying the remote span context and the baggage of
// a trace map.
func Extract(ctx context.Context, m map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(m))
}
