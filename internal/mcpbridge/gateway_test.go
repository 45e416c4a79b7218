package mcpbridge_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeHTTPOpenBindRefused: --http on an address other than loopback
// is refused (usage, exit 2, before any child starts) unless a token is
// configured; with one, a client without the token gets 401 and a client
// with it is served.
func TestServeHTTPOpenBindRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmp := shortTempDir(t)
	cmd := exec.CommandContext(ctx, hostBin, "mcp", "serve", "--http", "0.0.0.0:0", "--", childBin)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "SKULK_MCP_TOKEN=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "output: %s", out)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), "needs --token-file")
	assert.NotContains(t, string(out), "listening")
	emptyDir(t, tmp)

	// The token on the command line is not a flag there is.
	cmd = exec.CommandContext(ctx, hostBin, "mcp", "serve", "--http", "0.0.0.0:0", "--token", "x", "--", childBin)
	out, err = cmd.CombinedOutput()
	require.ErrorAs(t, err, &ee, "output: %s", out)
	assert.Equal(t, 2, ee.ExitCode())

	// With a token file: served, to a client that has the token only.
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600))
	s := &serveSession{progress: newProgressLog(), tmp: tmp}
	s.cmd = exec.Command(hostBin, "mcp", "serve", "--http", "0.0.0.0:0", "--token-file", tokenFile, "--", childBin)
	s.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	s.stderr, err = collectStderr(s.cmd)
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	addr := s.stderr.waitPrefix(t, "skulk-host mcp serve: listening on ", 30*time.Second)
	// Listening on every address; reached through loopback.
	addr = "http://127.0.0.1:" + addr[strings.LastIndex(addr, ":")+1:]

	resp, err := http.Post(addr, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, err = newClient(newProgressLog()).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr}, nil)
	assert.Error(t, err, "a client without the token")

	hc := &http.Client{Transport: bearer{"s3cret-token"}}
	s.sess, err = newClient(s.progress).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr, HTTPClient: hc}, nil)
	require.NoError(t, err)
	res := callTool(t, ctx, s.sess, "echo", map[string]any{}, nil)
	assert.False(t, res.IsError, textOf(res))
	s.close(t)
}

// bearer adds a bearer token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
