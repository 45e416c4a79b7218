package host

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/otelcall"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/spanctx"
	"github.com/skulkrt/skulk/internal/toolschema"
)

// startSpan starts the client span of a call about to be sent and puts
// its trace context in the invoke's trace map, over what WithTrace gave
// (which, when ctx carries no span, is the span's parent).
func (h *Host) startSpan(ctx context.Context, tr trace.Tracer, rec *recorder.Record, t *toolschema.Tool, o *callOptions) {
	if o.trace != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = otelcall.Extract(ctx, o.trace)
	}
	ctx, span := tr.Start(ctx, t.Desc.ID, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		spanctx.RPCSystem.String(spanctx.SystemSkulk),
		spanctx.RPCMethod.String(t.Desc.ID),
		spanctx.CallID.String(rec.ID()),
		spanctx.TreeID.String(rec.Tree()),
	))
	o.span = span
	o.trace = otelcall.Inject(ctx, o.trace)
}

// endSpanRefused ends the span of a call that got no terminal: refused
// once a child was being chosen, or failed before its invoke was written.
// A call whose invoke write failed has a terminal too, which ends the span
// first.
func endSpanRefused(span trace.Span, err error) {
	kind := "refused"
	var ce *CallError
	switch {
	case errors.As(err, &ce):
		kind = ce.Code.String()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		kind = frame.CodeCancelled.String()
	case errors.Is(err, ErrPoolDown), errors.Is(err, ErrClosed):
		kind = frame.CodeUnreachable.String()
	}
	spanctx.Refused(span, kind)
	span.End()
}

// endSpan ends the call's span with its terminal.
func (c *Call) endSpan(f *frame.Frame) {
	spanctx.Terminal(c.span, f)
	c.span.End()
}
