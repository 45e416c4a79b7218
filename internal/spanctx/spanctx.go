// Package spanctx is the part of Skulk's OpenTelemetry tracing that the
// provider SDK links: the span attributes of a call, and reading the W3C
// trace context (traceparent, tracestate, baggage) of an invoke's trace
// map into a context. It uses only the trace, baggage, attribute and codes
// packages of the OpenTelemetry API, which link neither package net nor
// cgo (the propagation package does, through net/http), so a provider
// stays statically linked (docs/performance.md).
package spanctx

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
)

// ScopeName is the instrumentation scope of Skulk's spans.
const ScopeName = "github.com/skulkrt/skulk"

// The attributes of a call's spans: the RPC semantic conventions' and
// Skulk's own.
const (
	RPCSystem = attribute.Key("rpc.system")
	RPCMethod = attribute.Key("rpc.method")
	RPCStatus = attribute.Key("rpc.response.status_code")
	ErrorType = attribute.Key("error.type")
	CallID    = attribute.Key("skulk.call.id")
	TreeID    = attribute.Key("skulk.tree.id")
	ChildPID  = attribute.Key("skulk.child.pid")
	Synthetic = attribute.Key("skulk.synthetic")
	Outcome   = attribute.Key("skulk.outcome")

	// SystemSkulk is rpc.system's value.
	SystemSkulk = "skulk"
	// StatusOK is rpc.response.status_code of a completed call.
	StatusOK = "ok"
)

// The keys of an invoke's trace map that carry W3C trace context.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
	Baggage     = "baggage"
)

// Extract returns ctx carrying the remote span context and the baggage of
// an invoke's trace map; a value that does not parse is ignored, as the
// W3C specifications ask.
func Extract(ctx context.Context, m map[string]string) context.Context {
	if b, err := baggage.Parse(m[Baggage]); err == nil && b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	sc, ok := parseTraceParent(m[TraceParent])
	if !ok {
		return ctx
	}
	if ts, err := trace.ParseTraceState(m[TraceState]); err == nil {
		sc = sc.WithTraceState(ts)
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// parseTraceParent parses a W3C traceparent header
// (version-traceid-parentid-flags); a version above 00 may carry more
// after a dash, which is ignored.
func parseTraceParent(s string) (trace.SpanContext, bool) {
	const size = 55 // 2+1+32+1+16+1+2
	if len(s) < size || s[2] != '-' || s[35] != '-' || s[52] != '-' || (len(s) > size && s[size] != '-') {
		return trace.SpanContext{}, false
	}
	var ver, flags [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	if !lowerHex(s[:2], ver[:]) || ver[0] == 0xff || (ver[0] == 0 && len(s) != size) ||
		!lowerHex(s[3:35], tid[:]) || !lowerHex(s[36:52], sid[:]) || !lowerHex(s[53:55], flags[:]) {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// lowerHex decodes s, lower-case hex only, into dst.
func lowerHex(s string, dst []byte) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// Terminal sets the attributes and the status of a call's terminal on
// span, with extra attributes (at most one) in the same SetAttributes: its
// outcome, its code, error.type and an error status when it is not
// completed, and whether the host made it up. The message is not
// recorded: it may hold user data.
func Terminal(span trace.Span, f *frame.Frame, extra ...attribute.KeyValue) {
	code := StatusOK
	if f.Error != nil {
		code = f.Error.Code.String()
	}
	var buf [5]attribute.KeyValue
	kv := append(buf[:0], Outcome.String(f.Kind.String()), RPCStatus.String(code), Synthetic.Bool(f.Synthetic))
	if f.Kind != frame.KindCompleted {
		kv = append(kv, ErrorType.String(code))
	}
	span.SetAttributes(append(kv, extra...)...)
	if f.Kind != frame.KindCompleted {
		span.SetStatus(codes.Error, code)
	}
}

// Refused sets what a call that never got a terminal (refused once a child
// was being chosen, or ended before its invoke was written) has on span:
// kind as error.type and an error status.
func Refused(span trace.Span, kind string) {
	span.SetAttributes(ErrorType.String(kind), Synthetic.Bool(true))
	span.SetStatus(codes.Error, kind)
}
