package mcpbridge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"

	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
	"github.com/stretchr/testify/require"
)

// TestServeHTTPOpenBindRefused: --http on an address other than loopback
// is refused (usage, exit 2, before any child starts) unless a token is
// configured; with one, a client without the token gets 401 and a client
// with it is served.
func TestServeHTTPOpenBindRefused(t *testing.T) {
	t.Parallel()
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
	addr := s.listen(t, []string{"mcp", "serve", "--http", "0.0.0.0:0", "--token-file", tokenFile, "--", childBin}, 30*time.Second)
	// Listening on every address; reached through loopback.
	addr = "http://127.0.0.1:" + addr[strings.LastIndex(addr, ":")+1:]

	resp, err := http.Post(addr, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, err = newClient(newProgressLog()).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr}, nil)
	assert.Error(t, err, "a client without the token")

	hc := &http.Client{Transport: bearer{"s3cret-token"}}
	// The health report, behind the same guard.
	resp, err = http.Get(addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, err = hc.Get(addr + "/healthz")
	require.NoError(t, err)
	var health struct {
		Children []struct {
			State string `json:"state"`
			PID   int    `json:"pid"`
		} `json:"children"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, health.Children, 1)
	assert.Equal(t, "ready", health.Children[0].State)
	assert.NotZero(t, health.Children[0].PID)
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

// connect starts skulk-host ARGS (an mcp serve on stdio), its temporary
// directory s.tmp and env added to this process's environment, its stderr
// this process's, and connects client to it over the server's stdio with
// opts (nil: the defaults). A test that ends before close, or whose
// Connect fails, has its server ended as close ends it (its stdin closed,
// then SIGTERM, then SIGKILL) and waited for.
func (s *serveSession) connect(t *testing.T, ctx context.Context, client *mcp.Client, opts *mcp.ClientSessionOptions, env []string, args ...string) {
	t.Helper()
	s.cmd = exec.Command(hostBin, args...)
	s.cmd.Env = append(append(os.Environ(), "TMPDIR="+s.tmp), env...)
	s.cmd.Stderr = os.Stderr
	tr := &keptTransport{CommandTransport: mcp.CommandTransport{Command: s.cmd, TerminateDuration: 5 * time.Second}}
	t.Cleanup(func() {
		// Both return at once when close ran. The connection goes first:
		// the session's Close waits for the calls still in flight, which
		// the server's end ends; and a failed Connect leaves no session.
		if tr.conn != nil {
			_ = tr.conn.Close()
		}
		if s.sess != nil {
			_ = s.sess.Close()
		}
	})
	var err error
	s.sess, err = client.Connect(ctx, tr, opts)
	require.NoError(t, err, "connect to skulk-host mcp serve")
}

// keptTransport is a CommandTransport that keeps the connection it made,
// for connect's cleanup. The go-sdk closes that connection once: a later
// Close waits for the first and returns its result.
type keptTransport struct {
	mcp.CommandTransport
	conn mcp.Connection // set by Connect; nil before, or when the command did not start
}

func (k *keptTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := k.CommandTransport.Connect(ctx)
	k.conn = c
	return c, err
}

// TestChildKilledMidCall: the MCP server under skulk-mcp is killed while
// a call runs: the call's error names the signal and shows the stderr
// tail, the client is told the tool list changed once the child is back,
// and a call on the restarted child works.
func TestChildKilledMidCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	changed := make(chan struct{}, 16) // more than the test's restarts
	s := startServeNotified(t, ctx, changed, []string{"--env", envServer + "=1", "--env", envGORACE}, wrapperBin, "--", selfBin)

	killed := killMidCall(t, ctx, s, "", nil)
	assert.Equal(t, true, killed.Meta["skulk/synthetic"])
	text := textOf(killed)
	assert.Contains(t, text, "signal: killed", "the error names the signal")
	assert.Contains(t, text, "stderr before it died", "the error shows the stderr tail")

	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no tools/list_changed within 30 s of the restart")
	}
	res := callTool(t, ctx, s.sess, "echo", map[string]any{"text": "after the restart"}, nil)
	assert.False(t, res.IsError, textOf(res))
	assert.Equal(t, "after the restart|", textOf(res))
	s.close(t)
}

// killMidCall learns the pid of the MCP server behind s from its tool
// PREFIX"pid", starts a call of PREFIX"sleep" that would outlast the
// test, and once that call runs in the server, runs beforeKill (unless
// nil) and kills the server with SIGKILL. It returns the call's result,
// checked to be an error result.
func killMidCall(t *testing.T, ctx context.Context, s *serveSession, prefix string, beforeKill func()) *mcp.CallToolResult {
	t.Helper()
	res := callTool(t, ctx, s.sess, prefix+"pid", map[string]any{}, nil)
	require.False(t, res.IsError, textOf(res))
	var pids pidResult
	b, err := jsonOf(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, decodeJSON(b, &pids))

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1) // one value, from the goroutine below
	go func() {                   // ends with the call, which the kill ends
		p := &mcp.CallToolParams{Name: prefix + "sleep", Arguments: map[string]any{"ms": 60000}}
		p.SetProgressToken("killed")
		r, err := s.sess.CallTool(ctx, p)
		done <- outcome{r, err}
	}()
	s.progress.wait(t, "killed", 1, 20*time.Second) // the call is running in the server
	if beforeKill != nil {
		beforeKill()
	}
	require.NoError(t, syscall.Kill(pids.PID, syscall.SIGKILL))

	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the call of a killed server got no result in 30 s")
	}
	require.NoError(t, o.err)
	assert.True(t, o.res.IsError)
	return o.res
}

// TestCancelledGetsNoAnswer: over stdio, a tools/call the client cancels
// is cancelled in the MCP server behind skulk-mcp and gets no response;
// the session goes on (a ping after it is answered).
func TestCancelledGetsNoAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mark := filepath.Join(t.TempDir(), "mark")
	tmp := shortTempDir(t)
	cmd, stdin, lines := rawServe(t, ctx, tmp, "--env", envServer+"=1", "--env", envMark+"="+mark, "--env", envGORACE, "--", wrapperBin, "--", selfBin)
	send := func(s string) {
		_, err := io.WriteString(stdin, s+"\n")
		require.NoError(t, err)
	}
	next := func() map[string]any {
		select {
		case m, ok := <-lines:
			require.True(t, ok, "the server's stdout closed")
			return m
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no message from the server in 30 s")
		}
		return nil
	}
	send(rawInitialize)
	require.EqualValues(t, 1, next()["id"])
	send(rawInitialized)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000},"_meta":{"progressToken":"p"}}}`)
	m := next() // the server's "sleeping" progress: the call runs
	require.Equal(t, "notifications/progress", m["method"])
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	waitFile(t, mark, "cancelled sleep", 20*time.Second)
	// The cancelled call's result, were it sent, is written before a
	// second has passed; the ping's answer comes after that.
	time.Sleep(time.Second)
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for {
		m := next()
		require.NotEqualValues(t, 2, m["id"], "the cancelled request was answered: %v", m)
		if id, ok := m["id"]; ok && id == float64(3) {
			break
		}
	}
	require.NoError(t, stdin.Close())
	for range lines {
	}
	require.NoError(t, cmd.Wait())
	emptyDir(t, tmp)
}

// TestGatewayForwards: through mcp serve → skulk-mcp, the server's
// capabilities, resources (a 1 MiB blob read back byte for byte) and its
// log notifications during a call reach the client, with the level the
// client set forwarded to the server.
func TestGatewayForwards(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := make(chan *mcp.LoggingMessageParams, 16) // more than the test's log lines
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-test-client", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			select {
			case logs <- req.Params:
			default:
			}
		},
	})
	s.connect(t, ctx, client, nil, nil, "mcp", "serve", "--env", envServer+"=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin)

	caps := s.sess.InitializeResult().Capabilities
	require.NotNil(t, caps.Resources, "the server's resources capability")
	require.NotNil(t, caps.Logging)

	list, err := s.sess.ListResources(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list.Resources, 1)
	assert.Equal(t, bigResource, list.Resources[0].URI)
	read, err := s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: bigResource})
	require.NoError(t, err)
	require.Len(t, read.Contents, 1)
	assert.Equal(t, bigResource, read.Contents[0].URI)
	assert.Equal(t, mediaBytes(1<<20, imageStep), read.Contents[0].Blob)
	_, err = s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://nowhere"})
	assert.Error(t, err, "a resource the server does not have")

	require.NoError(t, s.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"})) //nolint:staticcheck // still served
	// From protocol version 2026-07-28 on (which the go-sdk speaks) the
	// level rides on each request.
	res := callTool(t, ctx, s.sess, "log", map[string]any{"text": "from the server"}, mcp.Meta{mcp.MetaKeyLogLevel: "info"})
	require.False(t, res.IsError, textOf(res))
	select {
	case lm := <-logs:
		assert.Equal(t, "from the server", lm.Data)
		assert.Equal(t, "test-server", lm.Logger)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the server's log notification did not reach the client")
	}
	s.close(t)
}

// TestGatewayClientRequests: through mcp serve → skulk-mcp, the MCP
// server's sampling and elicitation requests in the middle of a call reach
// the client of mcp serve with their params, and its answers go back to
// the server, over stdio and over streamable HTTP; a request made while
// two calls run is refused without asking anyone; a client that declares
// neither gets the server's call failed with a tool error, not a hang.
func TestGatewayClientRequests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prompts := make(chan string, 4)  // more than the test's requests
	messages := make(chan string, 4) // likewise
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-test-client", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			if len(req.Params.Messages) == 1 {
				if tc, ok := req.Params.Messages[0].Content.(*mcp.TextContent); ok {
					prompts <- tc.Text
				}
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled reply"}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			messages <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
	})
	// Both sessions speak 2025-11-25: from 2026-07-28 on a server asks its
	// client through its result (multi round-trip requests), which the
	// bridge does not carry.
	old := &mcp.ClientSessionOptions{ProtocolVersion: mcpbridge.ClientRequestsProtocol}
	check := func(t *testing.T, sess *mcp.ClientSession) {
		res := callTool(t, ctx, sess, "sample", map[string]any{"text": "say hi"}, nil)
		require.False(t, res.IsError, textOf(res))
		assert.Equal(t, "sampled reply (test-model)|", textOf(res))
		assert.Equal(t, "say hi", <-prompts, "the sampling request's message reached the client")
		res = callTool(t, ctx, sess, "ask", map[string]any{"text": "your name?"}, nil)
		require.False(t, res.IsError, textOf(res))
		assert.Equal(t, "accept Ada|", textOf(res))
		assert.Equal(t, "your name?", <-messages)
	}

	t.Run("stdio", func(t *testing.T) {
		s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
		s.connect(t, ctx, client, old, nil, "mcp", "serve", "--env", envServer+"=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin)
		check(t, s.sess)
		s.close(t)
	})
	t.Run("http", func(t *testing.T) {
		s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
		addr := s.listen(t, []string{"mcp", "serve", "--http", "127.0.0.1:0", "--env", envServer + "=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin}, 30*time.Second)
		var err error
		s.sess, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr}, old)
		require.NoError(t, err)
		check(t, s.sess)
		s.close(t)
	})
	t.Run("ambiguous", func(t *testing.T) {
		// With two calls running in the server, its request could be
		// either's: it is refused, and no client is asked.
		s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
		sc := mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-test-client", Version: "1"}, &mcp.ClientOptions{
			ProgressNotificationHandler: s.progress.handler,
			CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				prompts <- "asked"
				return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "sampled reply"}}, nil
			},
		})
		s.connect(t, ctx, sc, old, nil, "mcp", "serve", "--env", envServer+"=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin)
		sleepCtx, stopSleep := context.WithCancel(ctx)
		slept := make(chan struct{}) // closed when the sleep call returned
		go func() {
			defer close(slept)
			p := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 60000}}
			p.SetProgressToken("other")
			_, _ = s.sess.CallTool(sleepCtx, p)
		}()
		s.progress.wait(t, "other", 1, 20*time.Second) // the other call runs in the server
		res := callTool(t, ctx, s.sess, "sample", map[string]any{"text": "say hi"}, nil)
		assert.True(t, res.IsError, textOf(res))
		assert.Contains(t, textOf(res), "matches no single running call")
		assert.Empty(t, prompts, "no client was asked")
		stopSleep()
		<-slept
		s.close(t)
	})
	t.Run("undeclared", func(t *testing.T) {
		s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
		s.connect(t, ctx, newClient(s.progress), old, nil, "mcp", "serve", "--env", envServer+"=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin)
		res := callTool(t, ctx, s.sess, "sample", map[string]any{"text": "say hi"}, nil)
		assert.True(t, res.IsError, "a client without sampling: %s", textOf(res))
		res = callTool(t, ctx, s.sess, "echo", map[string]any{"text": "still here"}, nil)
		assert.Equal(t, "still here|", textOf(res))
		s.close(t)
	})
}
