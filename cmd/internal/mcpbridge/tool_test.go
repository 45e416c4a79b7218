package mcpbridge

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/wire"
)

// A Skulk tool as MCP lists it (docs/mcp.md, "What maps"): the arguments
// schema is the input schema, "type": "object" added when absent (on a
// copy); the result schema the output schema; version and chunk schemas in
// _meta; a tool that takes caller input says MCP gives it none. An
// arguments schema of another type cannot be an MCP input schema.
func TestMCPTool(t *testing.T) {
	t.Parallel()
	args := map[string]any{"properties": map[string]any{"n": map[string]any{"type": "integer"}}}
	out := map[string]any{"type": "object", "required": []any{"i"}}
	in := map[string]any{"type": "object"}
	result := map[string]any{"type": "object", "required": []any{"n"}}
	mt, err := mcpTool(wire.Tool{ID: "count", Version: "v2", Description: "Counts.", ArgumentsSchema: args,
		InputSchema: in, OutputSchema: out, ResultSchema: result})
	require.NoError(t, err)
	assert.Falsef(t, mt.Name != "count" || !strings.HasPrefix(mt.Description, "Counts. ") || !strings.Contains(mt.Description, "no caller input"), "name %q, description %q", mt.Name, mt.Description)
	// A tool that says it reads no input gets no note.
	quiet, err := mcpTool(wire.Tool{ID: "count", Description: "Counts.", NoInput: true})
	require.NoError(t, err)
	assert.EqualValuesf(t, "Counts.", quiet.Description, "a no_input tool's description %q", quiet.Description)
	if got, _ := mt.InputSchema.(map[string]any); got["type"] != "object" || got["properties"] == nil {
		assert.Fail(t, fmt.Sprintf("input schema %v, want the arguments schema with type object", mt.InputSchema))
	}
	if _, ok := args["type"]; ok {
		assert.Fail(t, "the tool's own arguments schema was changed")
	}
	assert.Falsef(t, !reflect.DeepEqual(mt.OutputSchema, result), "output schema %v, want the result schema", mt.OutputSchema)
	assert.Falsef(t, mt.Meta[MetaVersion] != "v2" || !reflect.DeepEqual(mt.Meta[MetaOutputSchema], out) || !reflect.DeepEqual(mt.Meta[MetaInputSchema], in), "_meta %v", mt.Meta)

	// A bare tool may read input (it does not say no_input): the note
	// is its whole description.
	mt, err = mcpTool(wire.Tool{ID: "plain"})
	assert.Falsef(t, err != nil || !strings.HasPrefix(mt.Description, "(Through MCP") || mt.Meta != nil || mt.OutputSchema != nil || !reflect.DeepEqual(mt.InputSchema, map[string]any{"type": "object"}), "a bare tool: %+v, %v", mt, err)
	if _, err := mcpTool(wire.Tool{ID: "list", ArgumentsSchema: map[string]any{"type": "array"}}); err == nil || strings.Contains(err.Error(), "array") {
		assert.Fail(t, fmt.Sprintf("an array arguments schema: %v, want an error naming the field, not quoting its value", err))
	}
}

// _meta keys under a prefix MCP reserves (a label "modelcontextprotocol"
// or "mcp") are the protocol's, not a server's data, and no loss.
func TestOwnMeta(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"io.modelcontextprotocol/serverInfo", "modelcontextprotocol.io/x", "mcp.dev/x", "tools.mcp.com/x"} {
		assert.Falsef(t, ownMeta(map[string]any{k: 1}), "%s counted as the server's own", k)
	}
	for _, k := range []string{"example.com/note", "note", "mcpx.dev/x"} {
		assert.Falsef(t, !ownMeta(map[string]any{"io.modelcontextprotocol/serverInfo": 1, k: 1}), "%s not counted as the server's own", k)
	}
	assert.False(t, ownMeta(nil), "a nil _meta counted")
}

// TestOwnMetaLeavesSkulkKeys: the _meta keys skulk-host mcp serve sets
// (prefix "skulk/") are not a server's own fields, so wrapping Skulk's own
// MCP server warns of no loss for them; other keys still count.
func TestOwnMetaLeavesSkulkKeys(t *testing.T) {
	t.Parallel()
	skulk := mcp.Meta{MetaVersion: "v1", MetaInputSchema: map[string]any{}, MetaOutputSchema: map[string]any{},
		MetaCallID: "c", MetaTree: "t", MetaKind: "completed", MetaSequence: 3}
	assert.Falsef(t, ownMeta(skulk), "Skulk's own _meta counted as the server's: %v", skulk)
	assert.False(t, !ownMeta(mcp.Meta{"example.com/trace": "x"}) || !ownMeta(mcp.Meta{"skulkish/x": 1}), "a server's own _meta key was not counted")
}
