package child_test

import (
	"context"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestExplicitVersionAndInvokeFields(t *testing.T) {
	tool := child.Tool{ID: "meta", Version: "v7", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		dl, _ := ctx.Deadline()
		return frame.PayloadOf(map[string]any{
			"call": s.CallID(), "tool": s.ToolID(), "tree": s.Tree(),
			"trace_id":    trace.SpanContextFromContext(ctx).TraceID().String(),
			"deadline_ms": time.Until(dl).Milliseconds(),
		})
	}}
	h, hello := startServe(t, config{extra: []child.Tool{tool}})
	for _, d := range hello.Tools {
		if d.ID == "meta" {
			require.Equal(t, "v7", d.Version)
		}
	}
	s := dial(t, h)
	require.NoError(t, s.Write(&wire.Invoke{CallID: "m1", ToolID: "meta", Arguments: payload(map[string]any{}),
		TimeoutMS: 60_000, Trace: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, Tree: "root", Parent: "p"}))
	require.NoError(t, s.Started("m1"))
	require.NoError(t, s.Complete("m1", 1, nil))
	res := readCall(t, s, "m1")
	requireTerminal(t, res, frame.KindCompleted, 0)
	m := decode(t, res.Terminal.Payload)
	require.Equal(t, "m1", m["call"])
	require.Equal(t, "meta", m["tool"])
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", m["trace_id"])
	require.Equal(t, "root", m["tree"])
	require.InDelta(t, 60_000, num(t, m["deadline_ms"]), 30_000, "the deadline comes from timeout_ms")
}

// TestDerivedVersionChangesWithTheBuild: the same tool descriptors served
// by two builds (this test binary in-process, and cmd/skulk-child, neither
// carrying a clean VCS stamp) get different derived versions.
func TestDerivedVersionChangesWithTheBuild(t *testing.T) {
	_, inProcess := startServe(t, config{})
	_, binary := startBinary(t, config{})
	versions := map[string]string{}
	for _, d := range inProcess.Tools {
		versions[d.ID] = d.Version
	}
	compared := 0
	for _, d := range binary.Tools {
		if v, ok := versions[d.ID]; ok {
			require.NotEqual(t, v, d.Version, "tool %s", d.ID)
			require.Len(t, d.Version, 24)
			compared++
		}
	}
	require.NotZero(t, compared, "no tool served by both")
}
