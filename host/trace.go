package host

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host/internal/otelcall"
	"github.com/skulkrt/skulk/internal/spanctx"
	"github.com/skulkrt/skulk/internal/toolschema"
)

// startSpan starts the client span of call id and puts its trace context
// in the invoke's trace map, over what WithTrace gave (which, when ctx
// carries no span, is the span's parent). It returns the span's ids for
// the call's events, "" when the span is not sampled (no trace holds it).
func (h *Host) startSpan(ctx context.Context, tr trace.Tracer, id string, t *toolschema.Tool, o *callOptions) (traceID, spanID string) {
	if o.trace != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = otelcall.Extract(ctx, o.trace)
	}
	ctx, span := tr.Start(ctx, t.Desc.ID, clientKind, trace.WithAttributes(
		spanctx.RPCSystem.String(spanctx.SystemSkulk),
		spanctx.RPCMethod.String(t.Desc.ID),
		spanctx.CallID.String(id),
		spanctx.TreeID.String(h.rec.TreeOf(ctx, id)),
	))
	o.span = span
	o.trace = otelcall.Inject(ctx, o.trace)
	if sc := span.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String(), sc.SpanID().String()
	}
	return "", ""
}

// clientKind is the option every call's span starts with: made once, it
// costs a call no allocation.
var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// endSpanRefused ends o's span, if it has one, as endSpanRefused does.
func (o *callOptions) endSpanRefused(err error) {
	if o.span != nil {
		endSpanRefused(o.span, err)
	}
}

// endSpanRefused ends the span of a call that got no terminal: refused
// (its arguments, its start in a required journal, a child being chosen),
// cancelled before its invoke, or failed before its invoke was written.
// A call whose invoke write failed has a terminal too, which ends the span
// first.
func endSpanRefused(span trace.Span, err error) {
	kind := "refused"
	var ce *callError
	var se *SchemaError
	switch {
	case errors.As(err, &ce):
		kind = ce.err.Code.String()
	case errors.As(err, &se):
		kind = "schema"
	case errors.Is(err, calllog.ErrJournalStart):
		kind = "journal_start"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		kind = frame.CodeCancelled.String()
	case errors.Is(err, ErrPoolDown), errors.Is(err, ErrClosed):
		kind = frame.CodeUnreachable.String()
	}
	spanctx.Refused(span, kind)
	span.End()
}

// endSpan ends the call's span with its terminal and the pid of the
// child it went to (set here, with the terminal's attributes, rather than
// when the child was chosen: one SetAttributes is one growth of the span's
// attribute slice).
func (c *Call) endSpan(f *frame.Frame) {
	spanctx.Terminal(c.span, f, spanctx.ChildPID.Int(c.ch.proc.pid))
	c.span.End()
}

// The spans of a pool slot's child stopping, each a root span of its own:
// a restart (the child died, hung or left), a recycle (stuck handlers) and
// the drain of Close.
const (
	spanRestart = "skulk.restart"
	spanRecycle = "skulk.recycle"
	spanDrain   = "skulk.drain"
)

// The attributes of those spans, besides spanctx.ChildPID (the stopped
// child's).
const (
	attrSlot       = attribute.Key("skulk.slot")
	attrChildID    = attribute.Key("skulk.child.id")
	attrReason     = attribute.Key("skulk.restart.reason")
	attrExitStatus = attribute.Key("skulk.child.exit_status")
	attrNewPID     = attribute.Key("skulk.child.new_pid")
	attrNewChildID = attribute.Key("skulk.child.new_id")
)

// stopSpan is the span of one child's stop and what follows it: a new
// child in its slot, the slot given up, or the end of Close. Its methods
// do nothing on a nil *stopSpan (tracing off).
type stopSpan struct{ span trace.Span }

// startStopSpan starts the span of ch's stop for cause and mode, as watch
// returned them; nil when tracing is off.
func (h *Host) startStopSpan(ch *child, cause error, mode stopMode) *stopSpan {
	tr := h.tracing.Tracer()
	if tr == nil {
		return nil
	}
	name, reason := spanRestart, "exited"
	switch {
	case errors.Is(cause, ErrClosed):
		name, reason = spanDrain, "closed"
	case mode == stopGraceful:
		name, reason = spanRecycle, "stuck_handlers"
	case mode == stopLeaving:
		reason = "left"
	case errors.Is(cause, ErrUnhealthy):
		reason = "unhealthy"
	}
	_, span := tr.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attrSlot.Int(ch.slot.index), attrChildID.String(ch.id), spanctx.ChildPID.Int(ch.proc.pid), attrReason.String(reason)))
	return &stopSpan{span}
}

// stopped records that the child is gone, with its exit status.
func (s *stopSpan) stopped(ch *child) {
	if s != nil {
		status := ch.proc.exitStatus()
		s.span.AddEvent("child stopped", trace.WithAttributes(attrExitStatus.String(status)))
		s.span.SetAttributes(attrExitStatus.String(status))
	}
}

// startFailed records a failed start of the slot's next child.
func (s *stopSpan) startFailed(err error) {
	if s != nil {
		s.span.AddEvent("child start failed", trace.WithAttributes(spanctx.ErrorType.String(startErrorType(err))))
	}
}

// started ends the span with the child that took the slot.
func (s *stopSpan) started(next *child) {
	if s != nil {
		s.span.SetAttributes(attrNewChildID.String(next.id), attrNewPID.Int(next.proc.pid))
		s.span.End()
	}
}

// ended ends the span with no child after it: the host is closing, or, when
// down is set, the slot gave up restarting (an error status).
func (s *stopSpan) ended(down bool) {
	if s == nil {
		return
	}
	if down {
		s.span.SetAttributes(spanctx.ErrorType.String("slot_down"))
		s.span.SetStatus(codes.Error, "slot_down")
	}
	s.span.End()
}

// startErrorType classifies a child start's error for error.type.
func startErrorType(err error) string {
	switch {
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, ErrChildDied):
		return "child_died"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "start_failed"
}
