package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/skulkrt/skulk/frame"
)

// spanNamed waits until exp holds a span named name and returns it.
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found tracetest.SpanStub
	waitFor(t, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		m[a.Key] = a.Value
	}
	return m
}

// A recycle of a child with a stuck handler (a real child, its handler
// ignoring the cancel) is a skulk.recycle span from the decision to the
// new child.
func TestRecycleIsASpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	cfg := fastHealth(realConfig())
	cfg.CancelGrace, cfg.endGrace, cfg.DrainGrace = 200*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	cfg.TracerProvider = tp
	h, _ := testHost(t, cfg, time.Minute)
	old := h.Children()[0]
	pid := readyPID(t, h, 0)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 4000, "ignore_cancel": true}))
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("Recv: %v %v", f.Kind, err))
	}
	waitFor(t, func() bool { return h.Children()[0].Streams == 1 })
	c.Cancel()
	recvUntilTerminal(t, c, 10*time.Second)
	newPID := readyPID(t, h, pid)

	s := spanNamed(t, exp, "skulk.recycle")
	a := spanAttrs(s)
	for k, want := range map[attribute.Key]attribute.Value{
		"skulk.restart.reason": attribute.StringValue("stuck_handlers"),
		"skulk.slot":           attribute.IntValue(0),
		"skulk.child.id":       attribute.StringValue(old.ID),
		"skulk.child.pid":      attribute.Int64Value(int64(pid)),
		"skulk.child.new_pid":  attribute.Int64Value(int64(newPID)),
	} {
		if a[k] != want {
			assert.Fail(t, fmt.Sprintf("recycle span %s = %v, want %v", k, a[k].Emit(), want.Emit()))
		}
	}
	assert.Falsef(t, s.Status.Code == codes.Error || s.Parent.IsValid(), "recycle span: status %v, parent %v; want a root span without error", s.Status, s.Parent)
	for _, other := range exp.GetSpans() {
		assert.NotEqualValuesf(t, "skulk.restart", other.Name, "a recycle also gave a restart span")
	}
}
