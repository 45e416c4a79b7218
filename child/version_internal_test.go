package child

import (
	"testing"

	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

func TestDeriveVersion(t *testing.T) {
	a := wire.Tool{ID: "t", ArgumentsSchema: map[string]any{"type": "object", "b": 1, "a": 2}}
	b := wire.Tool{ID: "t", ArgumentsSchema: map[string]any{"a": 2, "type": "object", "b": 1}}
	require.Equal(t, deriveVersion(a), deriveVersion(b), "map order must not matter")
	a.Version = "ignored"
	require.Equal(t, deriveVersion(a), deriveVersion(b), "the version field is not hashed")
	c := b
	c.Description = "changed"
	require.NotEqual(t, deriveVersion(b), deriveVersion(c))
	require.Len(t, deriveVersion(b), 24)

	nested := func(keys ...string) wire.Tool {
		props := map[string]any{}
		for _, k := range keys {
			props[k] = map[string]any{"type": "string", "title": k}
		}
		return wire.Tool{ID: "t", InputSchema: map[string]any{"properties": props}}
	}
	require.Equal(t, deriveVersion(nested("x", "y", "z")), deriveVersion(nested("z", "x", "y")), "nested map order must not matter")
	require.NotEqual(t, deriveVersion(nested("x", "y")), deriveVersion(nested("x", "y", "z")))
}
