package mcpbridge_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
	"github.com/skulkrt/skulk/internal/mcpbridge"
)

// serveSession is a go-sdk client connected to `skulk-host mcp serve` over
// its stdio (CommandTransport).
type serveSession struct {
	cmd      *exec.Cmd
	sess     *mcp.ClientSession
	progress *progressLog
	tmp      string // the host's TMPDIR: its socket directories
}

func startServe(t *testing.T, ctx context.Context, flags []string, child ...string) *serveSession {
	t.Helper()
	s := &serveSession{progress: newProgressLog(), tmp: shortTempDir(t)}
	args := append(append([]string{"mcp", "serve"}, flags...), "--")
	s.cmd = exec.Command(hostBin, append(args, child...)...)
	s.cmd.Env = append(os.Environ(), "TMPDIR="+s.tmp)
	s.cmd.Stderr = os.Stderr
	sess, err := newClient(s.progress).Connect(ctx, &mcp.CommandTransport{Command: s.cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to skulk-host mcp serve: %v", err)
	}
	s.sess = sess
	return s
}

// close ends the session (stdin closed: the server stops its child and
// exits) and checks that it exited 0 and left nothing behind.
func (s *serveSession) close(t *testing.T) {
	t.Helper()
	pid := s.cmd.Process.Pid
	kids := childrenOf(pid)
	if err := s.sess.Close(); err != nil {
		t.Errorf("close: %v (skulk-host should exit 0 when its stdin closes)", err)
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
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
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
// the go-sdk's client over CommandTransport: listing, a streamed count with
// progress, media inline and as links, a deadline, a cancel, a kill -9 of
// the child in the middle of a call, and the journal.
func TestServeStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	journal := filepath.Join(t.TempDir(), "calls.db")
	s := startServe(t, ctx, []string{"--inline-max", "1500", "--journal", journal}, childBin, "--test-tools")

	tools, err := s.sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tool := range tools.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"echo", "upper", "count", "media", "sleep", "fail", "crash"} {
		if byName[name] == nil {
			t.Fatalf("tools/list has no %s: %v", name, tools.Tools)
		}
	}
	count := byName["count"]
	if in, _ := count.InputSchema.(map[string]any); in["type"] != "object" || in["required"] == nil {
		t.Errorf("count's input schema is not its arguments schema: %v", count.InputSchema)
	}
	if out, _ := count.OutputSchema.(map[string]any); out["required"] == nil {
		t.Errorf("count's output schema is not its result schema: %v", count.OutputSchema)
	}
	if count.Meta[mcpbridge.MetaVersion] == nil || !strings.Contains(count.Description, "no caller input") {
		t.Errorf("count's version or input note missing: %v %q", count.Meta, count.Description)
	}

	var countTree string // the tree the journal keeps the count call in
	t.Run("count with progress", func(t *testing.T) {
		p := &mcp.CallToolParams{Name: "count", Arguments: map[string]any{"n": 5}}
		p.SetProgressToken("count-1")
		res, err := s.sess.CallTool(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			t.Fatalf("count failed: %s", textOf(res))
		}
		got := s.progress.wait(t, "count-1", 5, 10*time.Second)
		for i, n := range got {
			if n.Progress != float64(i+1) || n.Message != `{"i":`+string(rune('0'+i))+`}` {
				t.Errorf("notification %d: progress %v message %q", i, n.Progress, n.Message)
			}
		}
		if want := "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n{\"i\":4}\n|{\"n\":5}|"; textOf(res) != want {
			t.Errorf("content %q, want %q", textOf(res), want)
		}
		var sc map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		if json.Unmarshal(b, &sc); sc["n"] != float64(5) {
			t.Errorf("structured content %s, want {\"n\":5}", b)
		}
		if res.Meta[mcpbridge.MetaKind] != "completed" || res.Meta[mcpbridge.MetaTree] == nil {
			t.Errorf("meta %v", res.Meta)
		}
		countTree, _ = res.Meta[mcpbridge.MetaTree].(string)
	})

	t.Run("media inline and as links", func(t *testing.T) {
		res := callTool(t, ctx, s.sess, "media", map[string]any{"bytes": 3000, "chunk": 1000}, nil)
		if res.IsError {
			t.Fatalf("media failed: %s", textOf(res))
		}
		h := sha256.New()
		var embedded, links int
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.EmbeddedResource:
				embedded++
				h.Write(c.Resource.Blob)
			case *mcp.ResourceLink:
				links++
				rr, err := s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: c.URI})
				if err != nil {
					t.Fatalf("read %s: %v", c.URI, err)
				}
				if c.Size == nil || *c.Size != 1000 || len(rr.Contents) != 1 || len(rr.Contents[0].Blob) != 1000 {
					t.Fatalf("link %s: size %v, contents %v", c.URI, c.Size, rr.Contents)
				}
				h.Write(rr.Contents[0].Blob)
			}
		}
		if embedded != 1 || links != 2 {
			t.Errorf("got %d embedded and %d links, want 1 (within --inline-max 1500) and 2", embedded, links)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if want := hex.EncodeToString(h.Sum(nil)); !strings.Contains(string(b), want) {
			t.Errorf("the media's digest %s is not the child's %s", want, b)
		}
		if _, err := s.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: "skulk://media/AAAAAAAAAAAAAAAAAAAAAAAAAA"}); err == nil {
			t.Error("reading an unknown link succeeded")
		}
	})

	t.Run("failure", func(t *testing.T) {
		res := callTool(t, ctx, s.sess, "fail", map[string]any{"message": "boom"}, nil)
		if !res.IsError || !strings.Contains(textOf(res), "provider_error: boom") || res.Meta[mcpbridge.MetaSynthetic] != false {
			t.Errorf("fail: %v %q %v", res.IsError, textOf(res), res.Meta)
		}
		res = callTool(t, ctx, s.sess, "count", map[string]any{"n": "three"}, nil)
		if !res.IsError || res.Meta[mcpbridge.MetaKind] != "refused" || strings.Contains(textOf(res), "three") {
			t.Errorf("bad arguments: %v %q %v", res.IsError, textOf(res), res.Meta)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		res := callTool(t, ctx, s.sess, "sleep", map[string]any{"ms": 30000}, mcp.Meta{mcpbridge.MetaTimeoutMS: 300})
		if !res.IsError || res.Meta[mcpbridge.MetaCode] != "timeout" {
			t.Errorf("sleep past its deadline: %v %q %v", res.IsError, textOf(res), res.Meta)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the deadline took %v", d)
		}
		res = callTool(t, ctx, s.sess, "sleep", map[string]any{"ms": 1}, mcp.Meta{mcpbridge.MetaTimeoutMS: "soon"})
		if !res.IsError || res.Meta[mcpbridge.MetaKind] != "refused" {
			t.Errorf("a bad timeout: %v %q", res.IsError, textOf(res))
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := s.sess.CallTool(cctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		ccancel()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a cancelled call returned no error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call did not return")
		}
		// The Skulk call was cancelled (the journal shows it) and the
		// child takes the next call.
		if res := callTool(t, ctx, s.sess, "count", map[string]any{"n": 1}, nil); res.IsError {
			t.Fatalf("count after a cancel: %s", textOf(res))
		}
	})

	t.Run("kill -9 mid-call", func(t *testing.T) {
		pid := waitChild(t, s.cmd.Process.Pid, 0, 5*time.Second)
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := s.sess.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		time.Sleep(300 * time.Millisecond)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var res *mcp.CallToolResult
		select {
		case res = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("no result after the kill")
		}
		if res == nil || !res.IsError || res.Meta[mcpbridge.MetaSynthetic] != true || res.Meta[mcpbridge.MetaCode] != "unreachable" || !strings.Contains(textOf(res), "synthetic") {
			t.Fatalf("after kill -9: %+v", res)
		}
		res = callTool(t, ctx, s.sess, "count", map[string]any{"n": 2}, nil)
		if res.IsError {
			t.Fatalf("the next call: %s", textOf(res))
		}
		if again := waitChild(t, s.cmd.Process.Pid, pid, 5*time.Second); again == pid {
			t.Errorf("the call ran on the killed child %d", pid)
		}
	})

	s.close(t)

	// The journal kept the MCP-originated calls like any other: the
	// cancelled one shows as cancelled, and asif export works on them.
	journalHas(t, journal, "sleep", calllog.KindCancelled)
	out := filepath.Join(t.TempDir(), "session.json")
	if b, err := exec.Command(hostBin, "asif", "export", journal, countTree, "-o", out).CombinedOutput(); err != nil {
		t.Errorf("asif export of an MCP call's tree: %v\n%s", err, b)
	}
}

// journalHas checks that the journal holds an event of kind for a call of
// tool.
func journalHas(t *testing.T, path, tool string, kind calllog.Kind) {
	t.Helper()
	st, err := sqlitestore.Open(path, sqlitestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	trees, err := st.Trees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tree := range trees {
		events, err := st.EventsAfter(ctx, tree, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Tool == tool && e.Kind == kind {
				return
			}
		}
	}
	t.Errorf("the journal has no %s event of a %s call", kind, tool)
}

// TestServeHTTP drives skulk-host mcp serve --http with the go-sdk's
// streamable HTTP client: list, a count with progress, a cancel, then
// SIGTERM stops the server and its child.
func TestServeHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmp := shortTempDir(t)
	cmd := exec.Command(hostBin, "mcp", "serve", "--http", "127.0.0.1:0", "--", childBin)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr, err := collectStderr(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr := stderr.waitPrefix(t, "skulk-host mcp serve: listening on ", 30*time.Second)
	child := waitChild(t, cmd.Process.Pid, 0, 5*time.Second)

	progress := newProgressLog()
	sess, err := newClient(progress).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := sess.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) < 6 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	p := &mcp.CallToolParams{Name: "count", Arguments: map[string]any{"n": 3}}
	p.SetProgressToken("http-count")
	res, err := sess.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("count: %v %v", res, err)
	}
	progress.wait(t, "http-count", 3, 10*time.Second)

	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = sess.CallTool(cctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 30000}})
	ccancel()
	if err == nil {
		t.Fatal("a call past the client's deadline returned no error")
	}
	if res := callTool(t, ctx, sess, "echo", nil, nil); res.IsError {
		t.Fatalf("echo after the cancel: %s", textOf(res))
	}
	if err := sess.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("skulk-host mcp serve --http after SIGTERM: %v\n%s", err, stderr)
	}
	processGone(t, child, 10*time.Second)
	emptyDir(t, tmp)
}
