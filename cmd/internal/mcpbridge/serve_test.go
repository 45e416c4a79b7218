package mcpbridge_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
)

// serveSession is a go-sdk client connected to `skulk-host mcp serve`:
// over the server's stdio (CommandTransport), or over streamable HTTP
// (--http).
type serveSession struct {
	cmd      *exec.Cmd
	sess     *mcp.ClientSession
	progress *progressLog
	tmp      string       // the host's TMPDIR: its socket directories
	stderr   *stderrLines // --http: the server's stderr; nil on stdio
}

// startServe runs skulk-host mcp serve FLAGS -- CHILD... and connects a
// go-sdk client over its stdio.
func startServe(t *testing.T, ctx context.Context, flags []string, child ...string) *serveSession {
	t.Helper()
	return startServeNotified(t, ctx, nil, flags, child...)
}

// startServeNotified is startServe whose client sends on changed at every
// tools/list_changed (notifiedClient).
func startServeNotified(t *testing.T, ctx context.Context, changed chan<- struct{}, flags []string, child ...string) *serveSession {
	t.Helper()
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	args := append(append([]string{"mcp", "serve"}, flags...), "--")
	s.connect(t, ctx, notifiedClient(s.progress, changed), nil, nil, append(args, child...)...)
	return s
}

// startServeHTTP runs skulk-host mcp serve --http 127.0.0.1:0 FLAGS --
// CHILD... and connects the go-sdk's streamable HTTP client to the address
// the server prints. A test that ends before close kills the server.
func startServeHTTP(t *testing.T, ctx context.Context, flags []string, child ...string) *serveSession {
	t.Helper()
	return startServeHTTPClient(t, ctx, nil, flags, child...)
}

// startServeHTTPClient is startServeHTTP with the go-sdk client's HTTP
// client hc (nil: http.DefaultClient).
func startServeHTTPClient(t *testing.T, ctx context.Context, hc *http.Client, flags []string, child ...string) *serveSession {
	t.Helper()
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	args := append(append([]string{"mcp", "serve", "--http", "127.0.0.1:0"}, flags...), "--")
	addr := s.listen(t, append(args, child...), 30*time.Second)
	var err error
	if s.sess, err = newClient(s.progress).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr, HTTPClient: hc}, nil); err != nil {
		require.FailNow(t, fmt.Sprintf("connect to %s: %v", addr, err))
	}
	return s
}

// listen starts skulk-host ARGS (an mcp serve --http) with its stderr
// collected and returns the address it listens on, waiting at most
// within. A test that ends before close (or closeRaw) kills the server.
func (s *serveSession) listen(t *testing.T, args []string, within time.Duration) string {
	t.Helper()
	s.cmd = exec.Command(hostBin, args...)
	s.cmd.Env = append(os.Environ(), "TMPDIR="+s.tmp)
	var err error
	s.stderr, err = collectStderr(s.cmd)
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil { // close did not run
			if s.sess != nil {
				s.sess.Close() // else the go-sdk's client goes on reconnecting to the killed server
			}
			s.cmd.Process.Kill()
			<-s.stderr.done
			s.cmd.Wait()
		}
	})
	return s.stderr.waitPrefix(t, "skulk-host mcp serve: listening on ", within)
}

// close ends the session and stops the server: on stdio by closing its
// stdin, over HTTP by SIGTERM. It checks that the server exited 0 and left
// nothing behind (no process, no socket directory).
func (s *serveSession) close(t *testing.T) {
	t.Helper()
	pid := s.cmd.Process.Pid
	kids := testnet.Children(pid)
	if s.stderr == nil {
		if err := s.sess.Close(); err != nil {
			assert.Fail(t, fmt.Sprintf("close: %v (skulk-host should exit 0 when its stdin closes)", err))
		}
	} else {
		if s.sess != nil {
			if err := s.sess.Close(); err != nil {
				t.Logf("close: %v", err)
			}
		}
		require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case <-s.stderr.done:
		case <-time.After(15 * time.Second):
			assert.Fail(t, fmt.Sprintf("skulk-host mcp serve --http kept its stderr open 15 s after SIGTERM"))
		}
		if err := s.cmd.Wait(); err != nil {
			assert.Fail(t, fmt.Sprintf("skulk-host mcp serve --http after SIGTERM: %v\n%s", err, s.stderr))
		}
	}
	processGone(t, pid, 10*time.Second)
	for _, k := range kids {
		processGone(t, k, 10*time.Second)
	}
	emptyDir(t, s.tmp)
}

func callTool(t *testing.T, ctx context.Context, sess *mcp.ClientSession, name string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if meta != nil {
		p.Meta = meta
	}
	res, err := sess.CallTool(ctx, p)
	require.NoErrorf(t, err, "call %s", name)
	return res
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
			b.WriteString("|")
		}
	}
	return b.String()
}

// TestServeStdio drives cmd/skulk-child through skulk-host mcp serve with
// the go-sdk's client over CommandTransport (testServe).
func TestServeStdio(t *testing.T) {
	t.Parallel()
	testServe(t, startServe)
}

// TestServeHTTP is TestServeStdio over streamable HTTP: skulk-host mcp
// serve --http and the go-sdk's StreamableClientTransport; SIGTERM stops
// the server and its child.
func TestServeHTTP(t *testing.T) {
	t.Parallel()
	testServe(t, startServeHTTP)
}

// servedTrees are the call trees (result _meta skulk/tree) of testServe's
// calls that the journal is checked for.
type servedTrees struct {
	count, deadline, killed, afterKill string
}

// testServe drives cmd/skulk-child through skulk-host mcp serve --journal,
// started and connected by start: listing, a streamed count with progress,
// media inline and as links, a failure and a refusal, a _meta deadline, a
// cancel and a client deadline, a kill -9 of the child in the middle of a
// call. Once the server stopped, the journal holds those calls as the
// client saw them, and asif export works on one.
func testServe(t *testing.T, start func(t *testing.T, ctx context.Context, flags []string, child ...string) *serveSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	journal := filepath.Join(t.TempDir(), "calls.db")
	s := start(t, ctx, []string{"--inline-max", "1500", "--journal", journal}, childBin, "--test-tools")
	var trees servedTrees

	tools, err := s.sess.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"echo", "upper", "count", "media", "sleep", "fail", "crash"} {
		require.Falsef(t, byName[name] == nil, "tools/list has no %s: %v", name, tools.Tools)
	}
	count := byName["count"]
	if in, _ := count.InputSchema.(map[string]any); in["type"] != "object" || in["required"] == nil {
		assert.Fail(t, fmt.Sprintf("count's input schema is not its arguments schema: %v", count.InputSchema))
	}
	if out, _ := count.OutputSchema.(map[string]any); out["required"] == nil {
		assert.Fail(t, fmt.Sprintf("count's output schema is not its result schema: %v", count.OutputSchema))
	}
	// count reads no input (no_input): no note; upper reads it.
	assert.Falsef(t, count.Meta[mcpbridge.MetaVersion] == nil || strings.Contains(count.Description, "(Through MCP"), "count's version missing, or an input note on a tool that reads none: %v %q", count.Meta, count.Description)
	if upper := byName["upper"]; upper == nil || !strings.Contains(upper.Description, "(Through MCP this tool gets no caller input") {
		assert.Fail(t, fmt.Sprintf("upper reads input and has no note saying MCP gives it none: %v", upper))
	}

	t.Run("count with progress", func(t *testing.T) {
		p := &mcp.CallToolParams{Name: "count", Arguments: map[string]any{"n": 5}}
		p.SetProgressToken("count-1")
		res, err := s.sess.CallTool(ctx, p)
		require.NoError(t, err)
		if res.IsError {
			require.FailNow(t, fmt.Sprintf("count failed: %s", textOf(res)))
		}
		got := s.progress.wait(t, "count-1", 5, 10*time.Second)
		var seq float64 // the chunks' sequences only grow
		for i, n := range got {
			assert.Falsef(t, n.Progress != float64(i+1) || n.Message != `{"i":`+string(rune('0'+i))+`}`, "notification %d: progress %v message %q", i, n.Progress, n.Message)
			if next, _ := n.Meta[mcpbridge.MetaSequence].(float64); next <= seq {
				assert.Fail(t, fmt.Sprintf("notification %d: %s %v after %v", i, mcpbridge.MetaSequence, n.Meta[mcpbridge.MetaSequence], seq))
			} else {
				seq = next
			}
		}
		if want := "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n{\"i\":4}\n|{\"n\":5}|"; textOf(res) != want {
			assert.Fail(t, fmt.Sprintf("content %q, want %q", textOf(res), want))
		}
		var sc map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		if json.Unmarshal(b, &sc); sc["n"] != float64(5) {
			assert.Fail(t, fmt.Sprintf("structured content %s, want {\"n\":5}", b))
		}
		assert.Falsef(t, res.Meta[mcpbridge.MetaKind] != "completed" || res.Meta[mcpbridge.MetaTree] == nil, "meta %v", res.Meta)
		trees.count = treeOf(res)
	})

	t.Run("media inline and as links", func(t *testing.T) {
		res := callTool(t, ctx, s.sess, "media", map[string]any{"bytes": 3000, "chunk": 1000}, nil)
		if res.IsError {
			require.FailNow(t, fmt.Sprintf("media failed: %s", textOf(res)))
		}
		h := sha256.New()
		var embedded, links int
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.EmbeddedResource:
				embedded++
				assert.Falsef(t, c.Resource.MIMEType != demotools.MediaType, "embedded resource of type %q, want the chunk's %q", c.Resource.MIMEType, demotools.MediaType)
				h.Write(c.Resource.Blob)
			case *mcp.ResourceLink:
				links++
				rr, err := s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: c.URI})
				require.NoErrorf(t, err, "read %s", c.URI)
				require.Falsef(t, c.Size == nil || *c.Size != 1000 || len(rr.Contents) != 1 || len(rr.Contents[0].Blob) != 1000, "link %s: size %v, contents %v", c.URI, c.Size, rr.Contents)
				h.Write(rr.Contents[0].Blob)
			}
		}
		assert.Falsef(t, embedded != 1 || links != 2, "got %d embedded and %d links, want 1 (within --inline-max 1500) and 2", embedded, links)
		b, _ := json.Marshal(res.StructuredContent)
		if want := hex.EncodeToString(h.Sum(nil)); !strings.Contains(string(b), want) {
			assert.Fail(t, fmt.Sprintf("the media's digest %s is not the child's %s", want, b))
		}
		if _, err := s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "skulk://media/AAAAAAAAAAAAAAAAAAAAAAAAAA"}); err == nil {
			assert.Fail(t, "reading an unknown link succeeded")
		}
	})

	t.Run("failure", func(t *testing.T) {
		res := callTool(t, ctx, s.sess, "fail", map[string]any{"message": "boom"}, nil)
		if !res.IsError || !strings.Contains(textOf(res), "provider_error: boom") || res.Meta[mcpbridge.MetaSynthetic] != false {
			assert.Fail(t, fmt.Sprintf("fail: %v %q %v", res.IsError, textOf(res), res.Meta))
		}
		res = callTool(t, ctx, s.sess, "count", map[string]any{"n": "three"}, nil)
		if !res.IsError || res.Meta[mcpbridge.MetaKind] != "refused" || strings.Contains(textOf(res), "three") {
			assert.Fail(t, fmt.Sprintf("bad arguments: %v %q %v", res.IsError, textOf(res), res.Meta))
		}
	})

	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		res := callTool(t, ctx, s.sess, "sleep", map[string]any{"ms": 30000}, mcp.Meta{mcpbridge.MetaTimeoutMS: 300})
		if !res.IsError || res.Meta[mcpbridge.MetaKind] != "failed" || res.Meta[mcpbridge.MetaCode] != "timeout" {
			assert.Fail(t, fmt.Sprintf("sleep past its deadline: %v %q %v", res.IsError, textOf(res), res.Meta))
		}
		if d := time.Since(start); d > 10*time.Second {
			assert.Fail(t, fmt.Sprintf("the deadline took %v", d))
		}
		trees.deadline = treeOf(res)
		res = callTool(t, ctx, s.sess, "sleep", map[string]any{"ms": 1}, mcp.Meta{mcpbridge.MetaTimeoutMS: "soon"})
		if !res.IsError || res.Meta[mcpbridge.MetaKind] != "refused" {
			assert.Fail(t, fmt.Sprintf("a bad timeout: %v %q", res.IsError, textOf(res)))
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		defer ccancel()
		done := make(chan error, 1)
		go func() { // ends with the call, which ccancel ends
			_, err := s.sess.CallTool(cctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
			done <- err
		}()
		waitInChild(t, journal, "sleep", 10*time.Second)
		ccancel()
		select {
		case err := <-done:
			require.Error(t, err, "a cancelled call returned no error")
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the cancelled call did not return")
		}
		if res := callTool(t, ctx, s.sess, "count", map[string]any{"n": 1}, nil); res.IsError {
			require.FailNow(t, fmt.Sprintf("count after a cancel: %s", textOf(res)))
		}
	})

	t.Run("client deadline", func(t *testing.T) {
		// The deadline reaches the server as a cancellation only: the
		// journal keeps the call as cancelled.
		dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := s.sess.CallTool(dctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
		dcancel()
		require.Error(t, err, "a call past the client's deadline returned no error")
		if res := callTool(t, ctx, s.sess, "echo", nil, nil); res.IsError {
			require.FailNow(t, fmt.Sprintf("echo after the client's deadline: %s", textOf(res)))
		}
	})

	t.Run("kill -9 mid-call", func(t *testing.T) {
		pid := waitChild(t, s.cmd.Process.Pid, 0, 5*time.Second)
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan answer, 1)
		cctx, ccancel := context.WithCancel(ctx)
		go func() { // ends with the call: the kill, or ccancel if the subtest fails first
			res, err := s.sess.CallTool(cctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
			done <- answer{res, err}
		}()
		defer func() { ccancel(); <-done }() // the goroutine has ended when the subtest does
		waitInChild(t, journal, "sleep", 10*time.Second)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		var res *mcp.CallToolResult
		select {
		case a := <-done:
			done <- a // for the deferred receive
			require.False(t, a.err != nil, a.err)
			res = a.res
		case <-time.After(15 * time.Second):
			require.FailNow(t, "no result after the kill")
		}
		require.Falsef(t, res == nil || !res.IsError || res.Meta[mcpbridge.MetaSynthetic] != true || res.Meta[mcpbridge.MetaCode] != "unreachable" || !strings.Contains(textOf(res), "synthetic"), "after kill -9: %+v", res)
		trees.killed = treeOf(res)
		processGone(t, pid, 10*time.Second)
		res = callTool(t, ctx, s.sess, "count", map[string]any{"n": 2}, nil)
		if res.IsError {
			require.FailNow(t, fmt.Sprintf("the next call: %s", textOf(res)))
		}
		trees.afterKill = treeOf(res)
	})

	s.close(t)
	checkJournal(t, journal, trees)
}

// treeOf is the call tree a result's _meta names.
func treeOf(r *mcp.CallToolResult) string {
	tree, _ := r.Meta[mcpbridge.MetaTree].(string)
	return tree
}

// checkJournal checks that the journal kept testServe's MCP-originated
// calls as their clients saw them, and that asif export works on the
// count's tree.
func checkJournal(t *testing.T, path string, trees servedTrees) {
	t.Helper()
	events := journalEvents(t, path)
	end := func(tree string) calllog.Event {
		for _, e := range events[tree] {
			if e.Kind.IsEnd() && e.Parent == "" {
				return e
			}
		}
		assert.Fail(t, fmt.Sprintf("the journal has no end of tree %q", tree))
		return calllog.Event{}
	}
	if e := end(trees.count); e.Kind != calllog.KindCompleted || e.Tool != "count" {
		assert.Fail(t, fmt.Sprintf("count's tree ends %v of %q, want done of count", e.Kind, e.Tool))
	}
	if e := end(trees.deadline); e.Kind != calllog.KindFailed || e.Error == nil || e.Error.Code != frame.CodeTimeout {
		assert.Fail(t, fmt.Sprintf("the _meta deadline's tree ends %v %+v, want failed timeout", e.Kind, e.Error))
	}
	if e := end(trees.killed); e.Kind != calllog.KindFailed || e.Error == nil || e.Error.Code != frame.CodeUnreachable || !e.Error.Synthetic {
		assert.Fail(t, fmt.Sprintf("the killed call's tree ends %v %+v, want a synthetic failed unreachable", e.Kind, e.Error))
	}
	if k, a := childOf(events[trees.killed]), childOf(events[trees.afterKill]); k == "" || a == "" || k == a {
		assert.Fail(t, fmt.Sprintf("the killed call ran on child %q, the next on %q: want the restarted child", k, a))
	}
	var cancelled int // the cancel and the client's deadline
	for _, tree := range events {
		for _, e := range tree {
			if e.Tool == "sleep" && e.Kind == calllog.KindCancelled {
				cancelled++
			}
		}
	}
	assert.EqualValuesf(t, 2, cancelled, "the journal has %d cancelled sleep calls, want 2 (a cancel and a client deadline)", cancelled)

	out := filepath.Join(t.TempDir(), "session.json")
	if b, err := exec.Command(hostBin, "asif", "export", path, trees.count, "-o", out).CombinedOutput(); err != nil {
		assert.Fail(t, fmt.Sprintf("asif export of an MCP call's tree: %v\n%s", err, b))
	}
	if b, err := exec.Command(hostBin, "asif", "check", out).CombinedOutput(); err != nil {
		assert.Fail(t, fmt.Sprintf("asif check of the export: %v\n%s", err, b))
	}
}

// childOf is the child the call of events was last written to (its last
// request event); "" when it never was.
func childOf(events []calllog.Event) string {
	var c string
	for _, e := range events {
		if e.Kind == calllog.KindRequest {
			c = e.Child
		}
	}
	return c
}

// journalEvents reads every event of the journal at path, by tree. The
// journal may be in use: it is opened read-only (SQLite in WAL mode).
func journalEvents(t *testing.T, path string) map[string][]calllog.Event {
	t.Helper()
	st, err := sqlitestore.Open(path, sqlitestore.Options{ReadOnly: true})
	require.NoError(t, err)
	defer st.Close()
	ctx := context.Background()
	trees, err := st.Trees(ctx)
	require.NoError(t, err)
	out := make(map[string][]calllog.Event, len(trees))
	for _, tree := range trees {
		for after := uint64(0); ; {
			events, err := st.EventsAfter(ctx, tree, after, 1000)
			require.NoError(t, err)
			if len(events) == 0 {
				break
			}
			out[tree] = append(out[tree], events...)
			after = events[len(events)-1].Seq
		}
	}
	return out
}

// waitInChild waits up to d for a call of tool that the journal at path
// shows written to a child (a request event) and not ended: the call is
// in the child.
func waitInChild(t *testing.T, path, tool string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, events := range journalEvents(t, path) {
			var requested, ended bool
			for _, e := range events {
				requested = requested || e.Kind == calllog.KindRequest && e.Tool == tool
				ended = ended || e.Kind.IsEnd()
			}
			if requested && !ended {
				return
			}
		}
		require.Falsef(t, time.Now().After(deadline), "no call of %s in a child after %v", tool, d)
		time.Sleep(20 * time.Millisecond)
	}
}
