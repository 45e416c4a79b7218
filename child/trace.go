package child

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/spanctx"
)

// startSpan starts the server span of the call's handler, a child of the
// remote span context the invoke carried (if any).
func (cl *call) startSpan(tr trace.Tracer) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		spanctx.RPCSystem.String(spanctx.SystemSkulk),
		spanctx.RPCMethod.String(cl.inv.ToolID),
		spanctx.CallID.String(cl.inv.CallID),
	}
	if cl.inv.Tree != "" {
		attrs = append(attrs, spanctx.TreeID.String(cl.inv.Tree))
	}
	return tr.Start(cl.ctx, cl.inv.ToolID, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endSpan ends the handler's span with the terminal its result (or the
// call's cancellation cause) makes.
func (cl *call) endSpan(span trace.Span, res result) {
	var f frame.Frame
	if kind, code, _, ok := causeTerminal(cl.cause()); ok {
		f = frame.Frame{Kind: kind, Error: &frame.Error{Code: code}}
	} else if cl.cause() != nil {
		f = failedFrame(frame.CodeTransportError, "")
	} else {
		switch {
		case res.panicked:
			f = failedFrame(frame.CodeProviderError, "")
		case res.err != nil:
			f = errorFrame(res.err)
		default:
			f = frame.Frame{Kind: frame.KindCompleted}
		}
	}
	spanctx.Terminal(span, &f)
	span.End()
}

// handlerCtx is the context the handler is given: the call's, with its
// server span when there is one.
func (cl *call) handlerCtx() context.Context {
	if cl.spanCtx != nil {
		return cl.spanCtx
	}
	return cl.ctx
}
