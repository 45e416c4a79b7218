package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A call whose handler calls another tool through the host (--offer):
// call streams the nested call's output, and replay, follow and asif
// export show the nested call in the tree as a step of the first.
func TestNestedCallInTree(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "calls.db")
	r := run(t, "", "call", "--journal", db, "--offer", "count", "relay", "--args", `{"tool":"count","args":{"n":2}}`, "--", childBin, "--call-tools")
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.Equal(t, "{\"i\":0}\n{\"i\":1}\n", r.Stdout)
	tree, ok := treeOfLine(r.Stderr)
	require.True(t, ok, r.Stderr)

	r = run(t, "", "replay", db, tree)
	require.Equal(t, 0, r.Status, r.Stderr)
	assert.Regexp(t, `call \S+ count \(version \S+\), step of `+tree, r.Stdout)

	r = run(t, "", "follow", db, tree)
	require.Equal(t, 0, r.Status, r.Stderr)
	steps := 0
	for line := range strings.Lines(r.Stdout) {
		var e struct {
			Tool   string  `json:"tool"`
			Parent *string `json:"parent"`
			Kind   string  `json:"kind"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &e))
		if e.Tool == "count" {
			require.NotNil(t, e.Parent)
			assert.Equal(t, tree, *e.Parent)
			steps++
		}
	}
	assert.Positive(t, steps)

	out := filepath.Join(t.TempDir(), "tree.json")
	r = run(t, "", "asif", "export", db, tree, "-o", out)
	require.Equal(t, 0, r.Status, r.Stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(b), `"tool_call"`), "both calls are in the export")

	// Without --offer the child's call is refused before anything is sent.
	r = run(t, "", "call", "relay", "--args", `{"tool":"count"}`, "--", childBin, "--call-tools")
	assert.NotEqual(t, 0, r.Status)
	assert.Contains(t, r.Stderr, "offers no calls")
}
