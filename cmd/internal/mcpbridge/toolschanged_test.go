package mcpbridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// TestLiveToolListChanged: a go-sdk server under skulk-mcp adds a tool
// while it runs (addtool). skulk-mcp lists its tools again and sends its
// host the new list; mcp serve tells its go-sdk client (tools/list_changed),
// which lists the new tool and calls it, all without a restart.
func TestLiveToolListChanged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	changed := make(chan struct{}, 1) // one value says a change came; the client never blocks
	s := startServeNotified(t, ctx, changed, []string{"--env", envServer + "=1", "--env", envGORACE}, wrapperBin, "--", selfBin)

	names := func() map[string]bool {
		out := map[string]bool{}
		for tool, err := range s.sess.Tools(ctx, nil) {
			require.NoError(t, err)
			out[tool.Name] = true
		}
		return out
	}
	require.False(t, names()["added"])
	pidBefore := serverPID(t, ctx, s.sess)

	res := callTool(t, ctx, s.sess, "addtool", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))

	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for !names()["added"] {
		select {
		case <-changed:
		case <-timer.C:
			require.FailNow(t, fmt.Sprintf("no tools/list_changed that lists the added tool within 30 s; tools: %v", names()))
		}
	}
	res = callTool(t, ctx, s.sess, "added", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))
	require.Equal(t, pidBefore, serverPID(t, ctx, s.sess), "the MCP server was not restarted")
	s.close(t)
}

// serverPID returns the pid of the test MCP server behind sess (its pid
// tool).
func serverPID(t *testing.T, ctx context.Context, sess *mcp.ClientSession) int {
	t.Helper()
	res := callTool(t, ctx, sess, "pid", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))
	var pids pidResult
	b, err := jsonOf(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, decodeJSON(b, &pids))
	require.NotZero(t, pids.PID)
	return pids.PID
}
