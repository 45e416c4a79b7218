package spanctx_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
)

// seen is what the probe handler found in its context.
type seen struct {
	mu  sync.Mutex
	sc  trace.SpanContext
	bag string
}

func (s *seen) get() (trace.SpanContext, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sc, s.bag
}

// tools: probe notes its context's span and baggage; hang waits for its
// cancellation.
func tools(s *seen, started chan<- struct{}) []child.Tool {
	return []child.Tool{{
		ID: "probe",
		Handler: func(ctx context.Context, _ *child.Stream) (frame.Payload, error) {
			s.mu.Lock()
			s.sc = trace.SpanContextFromContext(ctx)
			s.bag = baggage.FromContext(ctx).Member("tenant").Value()
			s.mu.Unlock()
			return nil, nil
		},
	}, {
		ID: "hang",
		Handler: func(ctx context.Context, _ *child.Stream) (frame.Payload, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	}}
}

func attrs(kv []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kv))
	for _, a := range kv {
		m[a.Key] = a.Value
	}
	return m
}

// spansByKind waits until exp holds a span of each kind and returns them.
func spansByKind(t *testing.T, exp *tracetest.InMemoryExporter) (client, server tracetest.SpanStub) {
	t.Helper()
	deadline := time.Now().Add(skulktest.Timeout)
	for time.Now().Before(deadline) {
		var nc, ns int
		for _, s := range exp.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindClient:
				client, nc = s, nc+1
			case trace.SpanKindServer:
				server, ns = s, ns+1
			}
		}
		if nc == 1 && ns == 1 {
			return client, server
		}
		require.Falsef(t, nc > 1 || ns > 1, "spans: %d client, %d server; want one each (no span per frame)", nc, ns)
		time.Sleep(10 * time.Millisecond)
	}
	require.FailNow(t, fmt.Sprintf("no client and server span after %v: %d spans", skulktest.Timeout, len(exp.GetSpans())))
	return
}

func TestTraceCrossesTheProcessBoundary(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	var s seen
	h := skulktest.StartProvider(t, child.Options{Tools: tools(&s, nil), TracerProvider: tp}, host.Config{TracerProvider: tp})

	c, err := h.Call(context.Background(), "probe", nil, host.WithInput(),
		host.WithTrace(map[string]string{"baggage": "tenant=acme"}))
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	client, server := spansByKind(t, exp)
	if !client.SpanContext.TraceID().IsValid() || client.SpanContext.TraceID() != server.SpanContext.TraceID() {
		require.FailNow(t, fmt.Sprintf("trace ids: host %v, child %v; want one valid id", client.SpanContext.TraceID(), server.SpanContext.TraceID()))
	}
	if server.Parent.SpanID() != client.SpanContext.SpanID() || !server.Parent.IsRemote() {
		assert.Fail(t, fmt.Sprintf("child span's parent %v (remote %v), want the host's span %v", server.Parent.SpanID(), server.Parent.IsRemote(), client.SpanContext.SpanID()))
	}
	sc, bag := s.get()
	if sc.SpanID() != server.SpanContext.SpanID() || sc.TraceID() != client.SpanContext.TraceID() {
		assert.Fail(t, fmt.Sprintf("handler's context carries span %v of trace %v, want the server span %v", sc.SpanID(), sc.TraceID(), server.SpanContext.SpanID()))
	}
	assert.EqualValuesf(t, "acme", bag, "handler's baggage tenant = %q, want acme (WithTrace's baggage)", bag)
	assert.Falsef(t, client.Name != "probe" || server.Name != "probe", "span names %q, %q; want the tool id", client.Name, server.Name)
	ca := attrs(client.Attributes)
	pid := int64(h.Children()[0].PID)
	for k, want := range map[attribute.Key]attribute.Value{
		"rpc.system":               attribute.StringValue("skulk"),
		"rpc.method":               attribute.StringValue("probe"),
		"rpc.response.status_code": attribute.StringValue("ok"),
		"skulk.call.id":            attribute.StringValue(c.ID()),
		"skulk.tree.id":            attribute.StringValue(c.Tree()),
		"skulk.child.pid":          attribute.Int64Value(pid),
		"skulk.synthetic":          attribute.BoolValue(false),
		"skulk.outcome":            attribute.StringValue("completed"),
	} {
		if got := ca[k]; got != want {
			assert.Fail(t, fmt.Sprintf("host span %s = %v, want %v", k, got.Emit(), want.Emit()))
		}
	}
	if _, ok := ca["error.type"]; ok || client.Status.Code == codes.Error {
		assert.Fail(t, fmt.Sprintf("completed call's span has error.type or an error status: %v", client.Status))
	}
	if got := attrs(server.Attributes)["skulk.call.id"]; got != attribute.StringValue(c.ID()) {
		assert.Fail(t, fmt.Sprintf("child span skulk.call.id = %v, want %s", got.Emit(), c.ID()))
	}
	// Every event of the call names the host span.
	n := 0
	for ev := range c.Events() {
		n++
		if ev.TraceID != client.SpanContext.TraceID().String() || ev.SpanID != client.SpanContext.SpanID().String() {
			assert.Fail(t, fmt.Sprintf("%s event: span %q %q, want the host span's %v %v", ev.Kind, ev.TraceID, ev.SpanID,
				client.SpanContext.TraceID(), client.SpanContext.SpanID()))
		}
	}
	assert.Falsef(t, n < 3, "%d events, want started, request, output and done at least", n)
}

func TestTraceKillNineFailsTheSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	started := make(chan struct{}, 1)
	var s seen
	h := skulktest.StartProvider(t, child.Options{Tools: tools(&s, started), TracerProvider: tp}, host.Config{TracerProvider: tp})

	c, err := h.Call(context.Background(), "hang", nil, host.WithInput())
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(skulktest.Timeout):
		require.FailNow(t, "handler did not start")
	}
	old := h.Children()[0]
	require.NoError(t, syscall.Kill(old.PID, syscall.SIGKILL))
	if _, err := c.Wait(); err == nil {
		require.FailNow(t, "a killed child's call completed")
	}
	next := skulktest.WaitRestart(t, h, 0, 1)
	client, _ := spansByKind(t, exp)
	a := attrs(client.Attributes)
	if a["skulk.synthetic"] != attribute.BoolValue(true) || a["error.type"] != attribute.StringValue("unreachable") ||
		a["rpc.response.status_code"] != attribute.StringValue("unreachable") || client.Status.Code != codes.Error {
		assert.Fail(t, fmt.Sprintf("killed call's span: synthetic %v, error.type %v, status %v; want true, unreachable, Error",
			a["skulk.synthetic"].Emit(), a["error.type"].Emit(), client.Status))
	}

	// The restart is a span of its own, from the death to the new child.
	restart := spanNamed(t, exp, "skulk.restart")
	assert.Falsef(t, restart.Parent.IsValid() || restart.SpanKind != trace.SpanKindInternal, "restart span: parent %v, kind %v; want a root internal span", restart.Parent, restart.SpanKind)
	ra := attrs(restart.Attributes)
	for k, want := range map[attribute.Key]attribute.Value{
		"skulk.slot":              attribute.IntValue(0),
		"skulk.restart.reason":    attribute.StringValue("exited"),
		"skulk.child.pid":         attribute.Int64Value(int64(old.PID)),
		"skulk.child.id":          attribute.StringValue(old.ID),
		"skulk.child.new_pid":     attribute.Int64Value(int64(next.PID)),
		"skulk.child.new_id":      attribute.StringValue(next.ID),
		"skulk.child.exit_status": attribute.StringValue("signal: killed"),
	} {
		if got := ra[k]; got != want {
			assert.Fail(t, fmt.Sprintf("restart span %s = %v, want %v", k, got.Emit(), want.Emit()))
		}
	}
	assert.Falsef(t, restart.Status.Code == codes.Error || len(restart.Events) == 0 || restart.Events[0].Name != "child stopped", "restart span: status %v, events %v; want no error and a child stopped event", restart.Status, restart.Events)
	assert.Falsef(t, !restart.StartTime.Before(restart.EndTime) || restart.EndTime.Before(client.EndTime), "restart span from %v to %v; the killed call's ended at %v, before the restart's end", restart.StartTime, restart.EndTime, client.EndTime)

	// Close drains the new child: a drain span.
	require.NoError(t, h.Close(context.Background()))
	drain := spanNamed(t, exp, "skulk.drain")
	da := attrs(drain.Attributes)
	if da["skulk.restart.reason"] != attribute.StringValue("closed") || da["skulk.child.pid"] != attribute.Int64Value(int64(next.PID)) {
		assert.Fail(t, fmt.Sprintf("drain span: reason %v, pid %v; want closed, %d", da["skulk.restart.reason"].Emit(), da["skulk.child.pid"].Emit(), next.PID))
	}
	if _, ok := da["skulk.child.new_pid"]; ok {
		assert.Fail(t, fmt.Sprintf("drain span names a new child"))
	}
}

// spanNamed waits until exp holds one span named name and returns it.
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	for deadline := time.Now().Add(skulktest.Timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var found []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				found = append(found, s)
			}
		}
		require.Falsef(t, len(found) > 1, "%d spans named %s, want one", len(found), name)
		if len(found) == 1 {
			return found[0]
		}
	}
	require.FailNow(t, fmt.Sprintf("no span named %s after %v", name, skulktest.Timeout))
	return tracetest.SpanStub{}
}

// Without a provider (and no global one), the host adds no trace context,
// and what WithTrace gave still reaches the handler.
func TestTraceOffPassesWithTrace(t *testing.T) {
	var s seen
	h := skulktest.StartProvider(t, child.Options{Tools: tools(&s, nil)}, host.Config{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c, err := h.Call(context.Background(), "probe", nil, host.WithInput(), host.WithTrace(map[string]string{"traceparent": tp}))
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	sc, _ := s.get()
	assert.Falsef(t, sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote(), "handler's span context %v, want WithTrace's traceparent, remote", sc)

	c, err = h.Call(context.Background(), "probe", nil, host.WithInput())
	require.NoError(t, err)
	if _, err := c.Wait(); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	if sc, _ := s.get(); sc.IsValid() {
		assert.Fail(t, fmt.Sprintf("tracing off: handler's context carries span context %v", sc))
	}
	for ev := range c.Events() {
		if ev.TraceID != "" || ev.SpanID != "" {
			assert.Fail(t, fmt.Sprintf("tracing off: %s event has span %q %q", ev.Kind, ev.TraceID, ev.SpanID))
		}
	}
}
