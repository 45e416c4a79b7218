package demotools

import (
	"testing"

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
		if !prod[id] {
			t.Errorf("%s missing", id)
		}
	}
	if prod["crash"] {
		t.Error("crash offered without TestTools")
	}
	if !ids(Options{TestTools: true, Exit: func(int) {}})["crash"] {
		t.Error("crash missing with TestTools")
	}
	if ids(Options{TestTools: true})["crash"] {
		t.Error("crash offered without Exit")
	}
}

func TestSchemas(t *testing.T) {
	for _, tool := range Tools(Options{TestTools: true, Exit: func(int) {}}) {
		if tool.ArgumentsSchema == nil || tool.InputSchema == nil || tool.OutputSchema == nil || tool.ResultSchema == nil {
			t.Errorf("%s: a schema is missing", tool.ID)
		}
		if tool.Handler == nil || tool.Description == "" {
			t.Errorf("%s: no handler or description", tool.ID)
		}
	}
	defaults := map[string]map[string]int64{"count": {"size": 0}, "media": {"chunk": defaultMediaChunk}}
	checked := 0
	for _, tool := range Tools(Options{}) {
		for arg, want := range defaults[tool.ID] {
			props := tool.ArgumentsSchema["properties"].(map[string]any)
			got, ok := props[arg].(map[string]any)["default"]
			if !ok || got != want {
				t.Errorf("%s.%s: default %v, want %d", tool.ID, arg, got, want)
			}
			checked++
		}
	}
	if checked != len(defaults) {
		t.Errorf("checked %d defaults, want %d", checked, len(defaults))
	}
}
