package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gateway is a go-sdk client of skulk-host mcp serve --http in front of
// several children, told of every tools/list_changed.
type gateway struct {
	*serveSession
	addr    string
	changed chan struct{} // one value per tools/list_changed, never blocking the client
}

// startGateway runs skulk-host mcp serve --http 127.0.0.1:0 FLAGS (the
// children come from --child or --config among them) and connects a
// go-sdk client over streamable HTTP.
func startGateway(t *testing.T, ctx context.Context, flags ...string) *gateway {
	t.Helper()
	g := &gateway{serveSession: &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}, changed: make(chan struct{}, 64)}
	s := g.serveSession
	g.addr = s.listen(t, append([]string{"mcp", "serve", "--http", "127.0.0.1:0"}, flags...), 60*time.Second)
	var err error
	s.sess, err = notifiedClient(s.progress, g.changed).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.addr}, nil)
	require.NoError(t, err)
	return g
}

// tools returns the names of the tools the gateway lists now.
func (g *gateway) tools(t *testing.T, ctx context.Context) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for tool, err := range g.sess.Tools(ctx, nil) {
		require.NoError(t, err)
		names[tool.Name] = true
	}
	return names
}

// waitTools waits, up to d, for a tools/list_changed after which the
// listing satisfies ok, and returns that listing.
func (g *gateway) waitTools(t *testing.T, ctx context.Context, d time.Duration, what string, ok func(map[string]bool) bool) map[string]bool {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-g.changed:
		case <-timer.C:
			require.FailNow(t, fmt.Sprintf("no tools/list_changed after which %s within %v; tools now: %v\nstderr:\n%s", what, d, g.tools(t, ctx), g.stderr))
		}
		if names := g.tools(t, ctx); ok(names) {
			return names
		}
	}
}

// healthReport is the JSON of /healthz.
type healthReport struct {
	Status   string `json:"status"`
	Children []struct {
		Name       string `json:"name"`
		Status     string `json:"status"`
		CrashLoops int    `json:"crash_loops"`
		PID        int    `json:"pid"`
		State      string `json:"state"`
	} `json:"children"`
}

func (g *gateway) health(t *testing.T) (int, healthReport) {
	t.Helper()
	resp, err := http.Get(g.addr + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var h healthReport
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
	return resp.StatusCode, h
}

// pidOf returns the pid the health report gives the child named name.
func (h healthReport) pidOf(name string) int {
	for _, c := range h.Children {
		if c.Name == name {
			return c.PID
		}
	}
	return 0
}

func hasPrefixed(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// TestGatewayNamesApart: mcp serve in front of an MCP server under
// skulk-mcp and a Skulk provider, both with a tool named echo: each
// child's tools are listed as NAME/TOOL and each call reaches its own
// child; the MCP server's resources are listed under its name and read
// back; the health report names both children, ready.
func TestGatewayNamesApart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := startGateway(t, ctx, "--env", envServer+"=1", "--env", envGORACE,
		"--child", "srv="+wrapperBin+" -- "+selfBin, "--child", "tools="+childBin)

	names := g.tools(t, ctx)
	for _, n := range []string{"srv/echo", "srv/sleep", "srv/pid", "tools/echo", "tools/upper", "tools/sleep"} {
		assert.True(t, names[n], "tool %s listed", n)
	}
	for n := range names {
		assert.True(t, strings.HasPrefix(n, "srv/") || strings.HasPrefix(n, "tools/"), "tool %s has its child's name", n)
		assert.NotContains(t, n, "mcp/", "the wrapper's own tools are not offered")
	}

	res := callTool(t, ctx, g.sess, "srv/echo", map[string]any{"text": "from srv"}, nil)
	require.False(t, res.IsError, textOf(res))
	assert.Equal(t, "from srv|", textOf(res), "srv/echo reached the MCP server")
	res = callTool(t, ctx, g.sess, "tools/echo", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))
	assert.Equal(t, map[string]any{"chunks": float64(0)}, res.StructuredContent, "tools/echo reached the Skulk provider")
	_, err := g.sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{}})
	assert.Error(t, err, "a bare tool name is no tool of a gateway of several children")

	list, err := g.sess.ListResources(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list.Resources, 1)
	assert.Equal(t, bigResource, list.Resources[0].URI, "the URI is the server's")
	assert.Equal(t, "srv/big", list.Resources[0].Name)
	read, err := g.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: bigResource})
	require.NoError(t, err)
	require.Len(t, read.Contents, 1)
	assert.Equal(t, mediaBytes(1<<20, imageStep), read.Contents[0].Blob)

	code, h := g.health(t)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok", h.Status)
	require.Len(t, h.Children, 2)
	for i, name := range []string{"srv", "tools"} {
		assert.Equal(t, name, h.Children[i].Name)
		assert.Equal(t, "ready", h.Children[i].State)
		assert.Equal(t, "up", h.Children[i].Status)
		assert.NotZero(t, h.Children[i].PID)
	}
	g.close(t)
}

// TestGatewayChildKilledMidCall: in a gateway of two children, the MCP
// server of one is killed with SIGKILL in the middle of a call: the call's
// error names the signal, the client gets tools/list_changed once the
// child is back, and a call on the restarted child works; the other child
// is untouched (same process) and served throughout.
func TestGatewayChildKilledMidCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := startGateway(t, ctx, "--env", envServer+"=1", "--env", envGORACE,
		"--child", "srv="+wrapperBin+" -- "+selfBin, "--child", "tools="+childBin)
	_, before := g.health(t)
	toolsPID := before.pidOf("tools")
	require.NotZero(t, toolsPID)

	killed := killMidCall(t, ctx, g.serveSession, "srv/", func() {
		for len(g.changed) > 0 { // only list changes after the kill count
			<-g.changed
		}
	})
	assert.Contains(t, textOf(killed), "signal: killed", "the error names the signal")

	g.waitTools(t, ctx, 30*time.Second, "srv/echo is listed", func(n map[string]bool) bool { return n["srv/echo"] })
	res := callTool(t, ctx, g.sess, "srv/echo", map[string]any{"text": "after the restart"}, nil)
	assert.False(t, res.IsError, textOf(res))
	assert.Equal(t, "after the restart|", textOf(res))
	res = callTool(t, ctx, g.sess, "tools/upper", map[string]any{}, nil)
	assert.False(t, res.IsError, textOf(res))
	_, after := g.health(t)
	assert.Equal(t, toolsPID, after.pidOf("tools"), "the other child was not restarted")
	g.close(t)
}

// TestGatewayCrashLoop: a child (from --config) whose MCP server dies and
// then fails at every start is given up by its host's restart policy: its
// tools are withdrawn with tools/list_changed, a call of one is refused,
// the health report says crash-loop (status degraded, 200) while the
// other child serves on; once the server starts again, a new host brings
// the tools back with tools/list_changed and a call works.
func TestGatewayCrashLoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	crash := filepath.Join(dir, "crash")
	cfg := map[string]any{"children": []any{
		map[string]any{"name": "srv", "command": wrapperBin, "args": []string{"--", selfBin},
			"env":     []string{envServer + "=1", envCrash + "=" + crash},
			"restart": map[string]any{"max_restarts": 1, "backoff_min": "10ms", "backoff_max": "20ms", "retry_min": "300ms", "retry_max": "600ms"}},
		map[string]any{"name": "tools", "command": childBin},
	}}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	cfgFile := filepath.Join(dir, "gateway.json")
	require.NoError(t, os.WriteFile(cfgFile, b, 0o600))
	g := startGateway(t, ctx, "--env", envGORACE, "--config", cfgFile)
	require.True(t, g.tools(t, ctx)["srv/echo"])

	res := callTool(t, ctx, g.sess, "srv/pid", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))
	var pids pidResult
	raw, err := jsonOf(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, decodeJSON(raw, &pids))

	// The server dies and cannot start again: one restart fails, and the
	// policy (one restart a minute) gives up.
	require.NoError(t, os.WriteFile(crash, nil, 0o600))
	require.NoError(t, syscall.Kill(pids.PID, syscall.SIGKILL))
	names := g.waitTools(t, ctx, 30*time.Second, "srv's tools are withdrawn", func(n map[string]bool) bool { return !hasPrefixed(n, "srv/") })
	assert.True(t, names["tools/echo"], "the other child's tools stay")
	code, h := g.health(t)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "degraded", h.Status)
	require.Equal(t, "srv", h.Children[0].Name)
	assert.Equal(t, "crash-loop", h.Children[0].Status)
	assert.Equal(t, 1, h.Children[0].CrashLoops)
	if r, err := g.sess.CallTool(ctx, &mcp.CallToolParams{Name: "srv/echo", Arguments: map[string]any{"text": "x"}}); err == nil {
		assert.True(t, r.IsError, "a withdrawn tool is not called: %s", textOf(r))
	}
	res = callTool(t, ctx, g.sess, "tools/upper", map[string]any{}, nil)
	assert.False(t, res.IsError, textOf(res))

	// The server can start again: a new host brings its tools back.
	require.NoError(t, os.Remove(crash))
	g.waitTools(t, ctx, 30*time.Second, "srv/echo is back", func(n map[string]bool) bool { return n["srv/echo"] && n["tools/echo"] })
	res = callTool(t, ctx, g.sess, "srv/echo", map[string]any{"text": "back"}, nil)
	assert.False(t, res.IsError, textOf(res))
	assert.Equal(t, "back|", textOf(res))
	code, h = g.health(t)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok", h.Status)
	assert.Equal(t, "up", h.Children[0].Status)
	assert.Equal(t, 1, h.Children[0].CrashLoops)
	g.close(t)
}

// TestGatewayListChangedAndLogs: over streamable HTTP, two client
// sessions A and B of one mcp serve in front of an MCP server under
// skulk-mcp. A sets a log level, B does not. A log of the server during
// A's call reaches A only; the server's resources/list_changed and
// prompts/list_changed, sent outside any call, reach both, and the new
// resource and prompt are listed and served; its log outside any call
// reaches A, the session that set a level, and not B.
func TestGatewayListChangedAndLogs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	addr := s.listen(t, []string{"mcp", "serve", "--http", "127.0.0.1:0", "--env", envServer + "=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin}, 60*time.Second)

	type observed struct {
		logs      chan string   // the data of each log notification
		resources chan struct{} // one value per resources/list_changed
		prompts   chan struct{} // one value per prompts/list_changed
	}
	connect := func() (*mcp.ClientSession, observed) {
		o := observed{logs: make(chan string, 16), resources: make(chan struct{}, 16), prompts: make(chan struct{}, 16)} // more than the test sends
		c := mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-test-client", Version: "1"}, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
				o.logs <- req.Params.Data.(string)
			},
			ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { o.resources <- struct{}{} },
			PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { o.prompts <- struct{}{} },
		})
		sess, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		require.NoError(t, err)
		return sess, o
	}
	a, ao := connect()
	b, bo := connect()
	s.sess = a
	defer b.Close()
	require.NoError(t, a.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"})) //nolint:staticcheck // still served
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			require.FailNow(t, fmt.Sprintf("no %s within 20 s", what))
		}
	}
	waitLog := func(want string) {
		t.Helper()
		select {
		case got := <-ao.logs:
			assert.Equal(t, want, got)
		case <-time.After(20 * time.Second):
			require.FailNow(t, fmt.Sprintf("the log %q did not reach the session that set a level", want))
		}
	}

	res := callTool(t, ctx, a, "log", map[string]any{"text": "during A's call"}, nil)
	require.False(t, res.IsError, textOf(res))
	waitLog("during A's call")

	res = callTool(t, ctx, a, "grow", map[string]any{"text": "x"}, nil)
	require.False(t, res.IsError, textOf(res))
	wait("resources/list_changed at A", ao.resources)
	wait("prompts/list_changed at A", ao.prompts)
	wait("resources/list_changed at B", bo.resources)
	wait("prompts/list_changed at B", bo.prompts)
	waitLog("outside: x")

	list, err := b.ListResources(ctx, nil)
	require.NoError(t, err)
	var uris []string
	for _, r := range list.Resources {
		uris = append(uris, r.URI)
	}
	assert.ElementsMatch(t, []string{bigResource, "test://grown"}, uris, "the placeholder is never listed")
	read, err := b.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://grown"})
	require.NoError(t, err)
	assert.Equal(t, "grown", read.Contents[0].Text)
	prompts, err := b.ListPrompts(ctx, nil)
	require.NoError(t, err)
	require.Len(t, prompts.Prompts, 1)
	assert.Equal(t, "grown", prompts.Prompts[0].Name)
	got, err := b.GetPrompt(ctx, &mcp.GetPromptParams{Name: "grown"})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)

	// Both logs reached A by now; B, which set no level, got neither.
	time.Sleep(500 * time.Millisecond) // a log sent to B would have come by now
	assert.Empty(t, bo.logs, "a session that set no level got the server's logs")
	require.NoError(t, b.Close())
	s.close(t)
}
