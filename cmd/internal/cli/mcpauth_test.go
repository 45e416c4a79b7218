package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The token that guards mcp serve --http is read whole from its file (its
// first line) or from the environment; a blank token, an empty first line
// or one past maxTokenFile is a usage error, never a silently cut or
// missing guard.
func TestHTTPGuardToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	t.Setenv(envMCPToken, "")
	g, err := (&mcpOptions{http: "0.0.0.0:0", tokenFile: file("ok", "s3cret\nignored\n")}).httpGuard()
	require.NoError(t, err)
	require.Equal(t, "s3cret", g.token)

	long := strings.Repeat("x", maxTokenFile+1)
	for name, o := range map[string]*mcpOptions{
		"empty first line": {http: "127.0.0.1:0", tokenFile: file("empty", "\nlater\n")},
		"token too long":   {http: "127.0.0.1:0", tokenFile: file("long", long+"\n")},
		"no such file":     {http: "127.0.0.1:0", tokenFile: filepath.Join(dir, "missing")},
	} {
		_, err := o.httpGuard()
		require.Equal(t, ExitUsage, statusOf(err), name)
		require.NotContains(t, err.Error(), "xxxx", "%s: the message echoes the file", name)
	}

	t.Setenv(envMCPToken, "   ")
	_, err = (&mcpOptions{http: "127.0.0.1:0"}).httpGuard()
	require.Equal(t, ExitUsage, statusOf(err), "a blank token in the environment")
	t.Setenv(envMCPToken, " env-token ")
	g, err = (&mcpOptions{http: "0.0.0.0:0"}).httpGuard()
	require.NoError(t, err)
	require.Equal(t, "env-token", g.token)
}
