package child_test

import (
	"context"
	"testing"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

func TestDeriveVersion(t *testing.T) {
	a := wire.Tool{ID: "t", ArgumentsSchema: wire.Schema{"type": "object", "b": 1, "a": 2}}
	b := wire.Tool{ID: "t", ArgumentsSchema: wire.Schema{"a": 2, "type": "object", "b": 1}}
	require.Equal(t, child.DeriveVersion(a), child.DeriveVersion(b), "map order must not matter")
	a.Version = "ignored"
	require.Equal(t, child.DeriveVersion(a), child.DeriveVersion(b), "the version field is not hashed")
	c := b
	c.Description = "changed"
	require.NotEqual(t, child.DeriveVersion(b), child.DeriveVersion(c))
	require.Len(t, child.DeriveVersion(b), 24)

	nested := func(keys ...string) wire.Tool {
		props := map[string]any{}
		for _, k := range keys {
			props[k] = map[string]any{"type": "string", "title": k}
		}
		return wire.Tool{ID: "t", InputSchema: wire.Schema{"properties": props}}
	}
	require.Equal(t, child.DeriveVersion(nested("x", "y", "z")), child.DeriveVersion(nested("z", "x", "y")), "nested map order must not matter")
	require.NotEqual(t, child.DeriveVersion(nested("x", "y")), child.DeriveVersion(nested("x", "y", "z")))
}

func TestExplicitVersionAndInvokeFields(t *testing.T) {
	tool := child.Tool{ID: "meta", Version: "v7", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		inv := s.Invoke()
		return frame.PayloadOf(map[string]any{
			"call": s.CallID(), "tool": s.ToolID(), "traceparent": inv.Trace["traceparent"],
			"tree": inv.Tree, "parent": inv.Parent, "timeout_ms": inv.TimeoutMS,
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
		TimeoutMS: 60_000, Trace: map[string]string{"traceparent": "00-abc-def-01"}, Tree: "root", Parent: "p"}))
	require.NoError(t, s.Started("m1"))
	require.NoError(t, s.Complete("m1", 1, nil))
	res := readCall(t, s, "m1")
	requireTerminal(t, res, frame.KindCompleted, 0)
	m := decode(t, res.Terminal.Payload)
	require.Equal(t, "m1", m["call"])
	require.Equal(t, "meta", m["tool"])
	require.Equal(t, "00-abc-def-01", m["traceparent"])
	require.Equal(t, "root", m["tree"])
	require.Equal(t, "p", m["parent"])
	require.Equal(t, int64(60_000), num(t, m["timeout_ms"]))
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
