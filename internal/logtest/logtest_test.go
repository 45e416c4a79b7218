package logtest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/logtest"
)

const source = `package p

import "log/slog"

const keyCall = "call_id"
const msgGone = "gone"

type t struct{ log *slog.Logger }

func (x *t) a(id string) {
	x.log.Warn("literal", keyCall, id, "tool", "x")
	x.log.Info(msgGone, slog.String("tree_id", id))
	x.later(1, "passed", id)
	x.later(2, "", id)
}

func (x *t) later(n int, warn, id string) {
	if warn != "" {
		x.log.Warn(warn, keyCall, id)
	}
}

func f(logger *slog.Logger, m string) { logger.Debug(m) }
`

func write(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"p.go": src, "p_test.go": "package p\n\nfunc g(log *slog.Logger, s string) { log.Warn(s) }\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	return dir
}

// Every kind of message is found with its keys; test files are left out;
// a message that is a parameter nothing calls with a constant is an error.
func TestSites(t *testing.T) {
	sites, err := logtest.Sites(write(t, source))
	assert.Falsef(t, err == nil || !strings.Contains(err.Error(), "f logs a message it is given, and nothing calls it"), "error %v; want one for f, whose message nothing passes", err)
	got := map[string][]string{}
	for _, s := range sites {
		got[s.Message] = s.Keys
	}
	want := map[string][]string{
		"literal": {"call_id", "tool"},
		"gone":    {"tree_id"},
		"passed":  {"call_id"},
	}
	assert.Falsef(t, len(got) != len(want), "sites %v; want %v", got, want)
	for m, keys := range want {
		if !slices.Equal(got[m], keys) {
			assert.Fail(t, fmt.Sprintf("site %q has keys %q; want %q", m, got[m], keys))
		}
	}
	for _, s := range sites {
		assert.Falsef(t, s.Message == "passed" && !strings.HasPrefix(s.Pos, "p.go:13"), "a passed message is placed at %s; want the call that passes it (p.go:13)", s.Pos)
		assert.Falsef(t, s.Message == "literal" && !s.Has("call_id") || s.Has("tree_id", "call_id"), "Has of %+v", s)
	}
}

// A message that is neither a constant nor a parameter cannot be checked.
func TestSitesRefusesAComputedMessage(t *testing.T) {
	_, err := logtest.Sites(write(t, "package p\n\nimport \"log/slog\"\n\nfunc f(log *slog.Logger, n string) { log.Warn(\"x\" + n) }\n"))
	assert.Falsef(t, err == nil || !strings.Contains(err.Error(), "neither a constant nor a parameter"), "error %v; want a computed message refused", err)
}
