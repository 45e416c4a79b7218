package demotools

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ids(opts Options) map[string]bool {
	m := map[string]bool{}
	for _, tool := range Tools(opts) {
		m[tool.ID] = true
	}
	return m
}

func TestToolSets(t *testing.T) {
	prod := ids(Options{Exit: func(int) {}})
	for _, id := range []string{"echo", "upper", "count", "media", "sleep", "fail"} {
		assert.Truef(t, prod[id], "%s missing", id)
	}
	assert.False(t, prod["crash"], "crash offered without TestTools")
	assert.True(t, ids(Options{TestTools: true, Exit: func(int) {}})["crash"], "crash missing with TestTools")
	assert.False(t, ids(Options{TestTools: true})["crash"], "crash offered without Exit")
}

func TestSchemas(t *testing.T) {
	for _, tool := range Tools(Options{TestTools: true, Exit: func(int) {}}) {
		assert.Falsef(t, tool.ArgumentsSchema == nil || tool.InputSchema == nil || tool.OutputSchema == nil || tool.ResultSchema == nil, "%s: a schema is missing", tool.ID)
		assert.Falsef(t, tool.Handler == nil || tool.Description == "", "%s: no handler or description", tool.ID)
	}
	defaults := map[string]map[string]int64{"count": {"size": 0}, "media": {"chunk": defaultMediaChunk}}
	checked := 0
	for _, tool := range Tools(Options{}) {
		for arg, want := range defaults[tool.ID] {
			props := tool.ArgumentsSchema["properties"].(map[string]any)
			got, ok := props[arg].(map[string]any)["default"]
			assert.Falsef(t, !ok || got != want, "%s.%s: default %v, want %d", tool.ID, arg, got, want)
			checked++
		}
	}
	assert.Falsef(t, checked != len(defaults), "checked %d defaults, want %d", checked, len(defaults))
}
