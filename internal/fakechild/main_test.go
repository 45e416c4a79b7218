package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/internal/testnet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// documented returns the first words of the package doc's indented
// lines: the modes, the environment variables and the tools it lists.
func documented(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc)
	words := map[string]bool{}
	for _, c := range f.Doc.List {
		if rest, ok := strings.CutPrefix(c.Text, "//\t"); ok {
			if w := strings.Fields(rest); len(w) > 0 {
				words[w[0]] = true
			}
		}
	}
	return words
}

// Every mode and every tool the fake child offers is in its package doc,
// the one vocabulary its tests use.
func TestEveryModeAndToolDocumented(t *testing.T) {
	doc := documented(t)
	for _, m := range append(serveModes, "grandchild", "daemonize", "daemon") {
		assert.True(t, doc[m], "mode %s is not in the package doc", m)
	}
	for _, tool := range tools() {
		if tool.ID == evilID {
			continue // its id is terminal escapes: the doc names it evilID
		}
		assert.True(t, doc[tool.ID], "tool %s is not in the package doc", tool.ID)
	}
	for _, env := range []string{pidsEnv, invokesEnv, envOutEnv, poolDirEnv, poolSizeEnv} {
		assert.True(t, doc[env], "%s is not in the package doc", env)
	}
	assert.Equal(t, "ok", tools()[0].ID, "host's tests take the first tool for ok")
}

// Started by hand (no control connection on fd 3) or in a mode it does
// not have, the fake child says so on stderr and exits with status 2.
func TestStartedWrongly(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fakechild")
	_, err := testnet.BuildAs(bin, ".") // bounded, and in turn with the other packages' builds
	require.NoError(t, err)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "no control connection on fd 3"},
		{[]string{"nosuchmode"}, "unknown mode"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", tc.args, out)
		assert.Equal(t, 2, ee.ExitCode(), "%v", tc.args)
		assert.Contains(t, string(out), tc.says, "%v", tc.args)
	}
}
