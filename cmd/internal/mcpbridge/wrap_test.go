package mcpbridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// startWrapped runs the test MCP server through skulk-mcp under host.Start.
func startWrapped(t *testing.T, ctx context.Context, mark string) (*host.Host, string) {
	t.Helper()
	tmp := shortTempDir(t)
	h, err := host.Start(ctx, host.Config{
		Command:  wrapperBin,
		Args:     []string{"--", selfBin},
		ExtraEnv: append([]string{envServer + "=1", envMark + "=" + mark}, raceExitEnv()...),
		TempDir:  tmp,
		Restart:  host.RestartPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
	})
	require.NoError(t, err, "host.Start of skulk-mcp")
	return h, tmp
}

// outputOf reads a call to its end: the chunks' payloads as JSON, the
// media, and the terminal.
func outputOf(t *testing.T, c *host.Call) (payloads []string, media []*frame.InlineMedia, last frame.Frame) {
	t.Helper()
	for f, err := range c.Frames() {
		if err != nil {
			require.FailNow(t, fmt.Sprintf("%s: %v", c.Tool(), err))
		}
		if f.Kind == frame.KindChunk {
			if f.Payload != nil {
				payloads = append(payloads, f.Payload.String())
			}
			if m, ok := f.Media.(*frame.InlineMedia); ok {
				media = append(media, m)
			}
		}
		if f.Kind.IsTerminal() {
			last = f
		}
	}
	return payloads, media, last
}

func call(t *testing.T, ctx context.Context, h *host.Host, tool string, args map[string]any, opts ...host.CallOption) *host.Call {
	t.Helper()
	c, err := h.Call(ctx, tool, frame.MustPayload(args), append([]host.CallOption{host.WithInput()}, opts...)...)
	require.NoErrorf(t, err, "call %s", tool)
	return c
}

// serverPids asks the test server for its pid and its parent's (the
// wrapper's).
func serverPids(t *testing.T, ctx context.Context, h *host.Host) (server, wrapper int) {
	t.Helper()
	res, err := call(t, ctx, h, "pid", map[string]any{}).Wait()
	require.NoError(t, err)
	var p pidResult
	require.NoError(t, res.Decode(&p))
	return p.PID, p.PPID
}

// TestWrapperUnderHost runs an MCP server written with the go-sdk through
// skulk-mcp under host.Start: its tools are the host's, progress becomes
// chunks, images inline media, cancel an MCP cancellation; a crash of the
// server and a kill -9 of the wrapper both end the call with a synthetic
// unreachable, take the whole group, and the host restarts it.
//
// It runs alone (not t.Parallel): it starts a Host in this process (see
// main_test.go).
func TestWrapperUnderHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mark := filepath.Join(t.TempDir(), "mark")
	h, tmp := startWrapped(t, ctx, mark)
	closed := false
	defer func() {
		if !closed {
			h.Close(ctx)
		}
	}()

	ids := map[string]bool{}
	for _, tool := range h.Tools() {
		ids[tool.ID] = true
	}
	for _, id := range []string{"echo", "progress", "image", "audio", "texts", "resources", "sleep", "fail", "crash", "pid"} {
		if !ids[id] {
			require.FailNow(t, fmt.Sprintf("the host has no tool %s: %v", id, h.Tools()))
		}
	}

	payloads, _, last := outputOf(t, call(t, ctx, h, "echo", map[string]any{"text": "hi"}))
	assert.Falsef(t, last.Kind != frame.KindCompleted || len(payloads) != 1 || payloads[0] != `{"text":"hi"}`, "echo: %v %v", payloads, last)

	payloads, _, last = outputOf(t, call(t, ctx, h, "progress", map[string]any{"n": 3}))
	want := []string{`{"message":"step 1","progress":1,"total":3}`, `{"message":"step 2","progress":2,"total":3}`, `{"message":"step 3","progress":3,"total":3}`, `{"text":"done"}`}
	assert.Falsef(t, strings.Join(payloads, " ") != strings.Join(want, " ") || last.Kind != frame.KindCompleted || last.Payload.String() != `{"n":3}`, "progress: %v then %v %s; want %v then completed {\"n\":3}", payloads, last.Kind, last.Payload, want)

	_, media, last := outputOf(t, call(t, ctx, h, "image", map[string]any{"bytes": 100000}))
	assert.Falsef(t, last.Kind != frame.KindCompleted || len(media) != 1 || media[0].MediaType != "image/png" || !bytes.Equal(media[0].Data, mediaBytes(100000, imageStep)), "image: %d media, %v", len(media), last)

	_, media, last = outputOf(t, call(t, ctx, h, "audio", map[string]any{"bytes": 50000}))
	assert.Falsef(t, last.Kind != frame.KindCompleted || len(media) != 1 || media[0].MediaType != "audio/wav" || !bytes.Equal(media[0].Data, mediaBytes(50000, audioStep)), "audio: %d media, %v", len(media), last)

	// Each text content is a chunk of its own: joining them is mcp serve's
	// business (TestChain).
	payloads, media, last = outputOf(t, call(t, ctx, h, "texts", map[string]any{}))
	var texts []string
	for _, s := range append(append([]string(nil), textsBefore...), textsAfter...) {
		texts = append(texts, `{"text":"`+s+`"}`)
	}
	assert.Falsef(t, last.Kind != frame.KindCompleted || strings.Join(payloads, " ") != strings.Join(texts, " ") || len(media) != 1, "texts: %v and %d media, want %v and the image", payloads, len(media), texts)

	// Embedded resources and links: not fetched, their names kept.
	payloads, media, last = outputOf(t, call(t, ctx, h, "resources", map[string]any{}))
	want = []string{`{"mcp":{"resource":{"mimeType":"application/pdf","uri":"test://blob"},"type":"resource"},"uri":"test://blob"}`,
		`{"mcp":{"resource":{"mimeType":"text/plain","uri":"test://text"},"type":"resource"},"mime_type":"text/plain","text":"hello","uri":"test://text"}`,
		`{"mcp":{"mimeType":"text/csv","name":"linked","size":42,"type":"resource_link","uri":"test://link"},"resource_link":{"mime_type":"text/csv","name":"linked","size":42,"uri":"test://link"}}`}
	assert.Equal(t, frame.KindCompleted, last.Kind, "resources")
	assert.Equal(t, want, payloads, "resources")
	if assert.Len(t, media, 1, "resources: want the blob") {
		assert.Equal(t, "application/pdf", media[0].MediaType, "resources: the blob")
		assert.True(t, bytes.Equal(media[0].Data, mediaBytes(8, imageStep)), "resources: the blob's bytes")
	}

	_, err := call(t, ctx, h, "fail", map[string]any{"text": "x"}).Wait()
	var ce *frame.Error
	assert.Falsef(t, !errors.As(err, &ce) || ce.Code != frame.CodeProviderError || ce.Message != "nope: x" || ce.Synthetic, "fail: %v", err)

	// Caller input has nowhere to go in MCP: refused, not dropped.
	c, err := h.Call(ctx, "echo", frame.MustPayload(map[string]any{"text": "hi"}), host.WithInput(frame.MustPayload(map[string]any{"text": "input"})))
	require.NoError(t, err)
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeInvalidFrame {
		assert.Fail(t, fmt.Sprintf("a call with input: %v", err))
	}

	t.Run("cancel", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		c := call(t, cctx, h, "sleep", map[string]any{"ms": 30000})
		f, err := c.Recv(ctx) // started
		require.False(t, err != nil || f.Kind != frame.KindStarted, f, err)
		f, err = c.Recv(ctx) // the "sleeping" progress: the server is in the call
		require.False(t, err != nil || f.Kind != frame.KindChunk, f, err)
		ccancel()
		_, err = c.Wait()
		require.ErrorAs(t, err, &ce, "cancelled sleep")
		require.Equalf(t, frame.CodeCancelled, ce.Code, "cancelled sleep: %v", err)
		waitFile(t, mark, "cancelled sleep", 10*time.Second) // the MCP server saw the cancellation
	})

	t.Run("deadline", func(t *testing.T) {
		dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer dcancel()
		_, err := call(t, dctx, h, "sleep", map[string]any{"ms": 30000}).Wait()
		require.ErrorAs(t, err, &ce, "sleep past its deadline")
		require.Equalf(t, frame.CodeTimeout, ce.Code, "sleep past its deadline: %v", err)
	})

	t.Run("server crash", func(t *testing.T) {
		server, wrapper := serverPids(t, ctx, h)
		_, err := call(t, ctx, h, "crash", map[string]any{}).Wait()
		if !errors.As(err, &ce) || ce.Code != frame.CodeUnreachable || !ce.Synthetic || !strings.Contains(host.Stderr(err), "crashing on purpose") {
			require.FailNow(t, fmt.Sprintf("crash: %v (stderr tail %q)", err, errStderr(err)))
		}
		processGone(t, server, 10*time.Second)
		processGone(t, wrapper, 10*time.Second)
		server2, wrapper2 := serverPids(t, ctx, h) // waits for the restart
		assert.Falsef(t, server2 == server || wrapper2 == wrapper, "no restart: %d/%d then %d/%d", server, wrapper, server2, wrapper2)
	})

	t.Run("kill -9 of the wrapper", func(t *testing.T) {
		server, wrapper := serverPids(t, ctx, h)
		c := call(t, ctx, h, "sleep", map[string]any{"ms": 30000})
		for range 2 { // started, then the "sleeping" progress
			_, err := c.Recv(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, syscall.Kill(wrapper, syscall.SIGKILL))
		_, err := c.Wait()
		require.ErrorAs(t, err, &ce, "after kill -9")
		require.Equalf(t, frame.CodeUnreachable, ce.Code, "after kill -9: %v", err)
		require.Truef(t, ce.Synthetic, "after kill -9: %v, want a terminal the host made up", err)
		processGone(t, server, 10*time.Second) // the server was in the wrapper's group
		if s2, _ := serverPids(t, ctx, h); s2 == server {
			assert.Fail(t, "no restart")
		}
	})

	server, wrapper := serverPids(t, ctx, h)
	closed = true
	assert.NoError(t, h.Close(ctx), "close")
	processGone(t, server, 10*time.Second)
	processGone(t, wrapper, 10*time.Second)
	emptyDir(t, tmp)
}

func errStderr(err error) string { return host.Stderr(err) }

// waitFile waits for path to contain s.
func waitFile(t *testing.T, path, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), s) {
			return
		}
		require.Falsef(t, time.Now().After(deadline), "%s does not say %q after %v: %q", path, s, d, b)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChain: an MCP client → skulk-host mcp serve → skulk-mcp → the test
// MCP server, and back; nothing is left after the client closes.
func TestChain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startServe(t, ctx, []string{"--env", envServer + "=1", "--env", envGORACE}, wrapperBin, "--", selfBin)

	tools, err := s.sess.ListTools(ctx, nil)
	require.Falsef(t, err != nil || len(tools.Tools) != 18, "tools/list: %v %v", tools, err)
	if res := callTool(t, ctx, s.sess, "echo", map[string]any{"text": "round trip"}, nil); res.IsError || textOf(res) != "round trip|" {
		assert.Fail(t, fmt.Sprintf("echo: %q", textOf(res)))
	}

	p := &mcp.CallToolParams{Name: "progress", Arguments: map[string]any{"n": 4}}
	p.SetProgressToken("chain")
	res, err := s.sess.CallTool(ctx, p)
	require.Falsef(t, err != nil || res.IsError, "progress: %v %v", res, err)
	// The server's own progress notifications, as it sent them; its
	// content and structured content, as it returned them.
	got := s.progress.wait(t, "chain", 4, 10*time.Second)
	if got[0].Message != "step 1" || got[0].Progress != 1 || got[0].Total != 4 || got[3].Progress != 4 {
		assert.Fail(t, fmt.Sprintf("notifications: %+v … %+v", got[0], got[3]))
	}
	if sc, _ := jsonOf(res.StructuredContent); textOf(res) != "done|" || string(sc) != `{"n":4}` {
		assert.Fail(t, fmt.Sprintf("progress result %q %s, want \"done|\" and {\"n\":4}", textOf(res), sc))
	}

	// Embedded resources and links arrive as the server sent them, URIs
	// and all.
	res = callTool(t, ctx, s.sess, "resources", map[string]any{}, nil)
	require.EqualValuesf(t, 3, len(res.Content), "resources: %v", res.Content)
	if r, ok := res.Content[0].(*mcp.EmbeddedResource); !ok || r.Resource.URI != "test://blob" || r.Resource.MIMEType != "application/pdf" || !bytes.Equal(r.Resource.Blob, mediaBytes(8, imageStep)) {
		assert.Fail(t, fmt.Sprintf("embedded blob: %#v", res.Content[0]))
	}
	if r, ok := res.Content[1].(*mcp.EmbeddedResource); !ok || r.Resource.URI != "test://text" || r.Resource.Text != "hello" || r.Resource.MIMEType != "text/plain" {
		assert.Fail(t, fmt.Sprintf("embedded text: %#v", res.Content[1]))
	}
	if l, ok := res.Content[2].(*mcp.ResourceLink); !ok || l.URI != "test://link" || l.Name != "linked" || l.MIMEType != "text/csv" || l.Size == nil || *l.Size != 42 {
		assert.Fail(t, fmt.Sprintf("resource link: %#v", res.Content[2]))
	}

	res = callTool(t, ctx, s.sess, "image", map[string]any{"bytes": 5000}, nil)
	require.EqualValuesf(t, 1, len(res.Content), "image: %v", res.Content)
	if img, ok := res.Content[0].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, mediaBytes(5000, imageStep)) {
		assert.Fail(t, fmt.Sprintf("image: %#v", res.Content[0]))
	}

	res = callTool(t, ctx, s.sess, "audio", map[string]any{"bytes": 5000}, nil)
	require.EqualValuesf(t, 1, len(res.Content), "audio: %v", res.Content)
	if a, ok := res.Content[0].(*mcp.AudioContent); !ok || a.MIMEType != "audio/wav" || !bytes.Equal(a.Data, mediaBytes(5000, audioStep)) || a.Meta[mcpbridge.MetaSequence] == nil {
		assert.Fail(t, fmt.Sprintf("audio: %#v", res.Content[0]))
	}

	// An MCP server's contents stay apart (docs/mcp.md).
	res = callTool(t, ctx, s.sess, "texts", map[string]any{}, nil)
	want := append(append(slices.Clone(textsBefore), "image"), textsAfter...)
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, "image")
		default:
			parts = append(parts, fmt.Sprintf("%T", c))
		}
	}
	assert.Falsef(t, res.IsError || strings.Join(parts, "|") != strings.Join(want, "|"), "texts: content %q, want %q", parts, want)

	res = callTool(t, ctx, s.sess, "crash", map[string]any{}, nil)
	if !res.IsError || res.Meta["skulk/synthetic"] != true {
		assert.Fail(t, fmt.Sprintf("crash through the chain: %q %v", textOf(res), res.Meta))
	}
	res = callTool(t, ctx, s.sess, "pid", map[string]any{}, nil)
	if res.IsError {
		require.FailNow(t, fmt.Sprintf("pid after the crash: %s", textOf(res)))
	}
	var pids pidResult
	if b, err := jsonOf(res.StructuredContent); err != nil || decodeJSON(b, &pids) != nil || pids.PID == 0 {
		require.FailNow(t, fmt.Sprintf("pid: %v", res.StructuredContent))
	}
	s.close(t)
	processGone(t, pids.PID, 10*time.Second)
	processGone(t, pids.PPID, 10*time.Second)
}

// TestWrapperByHand: skulk-mcp started outside a host says so and exits 2.
func TestWrapperByHand(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(wrapperBin, "--", selfBin).CombinedOutput()
	var ee *exec.ExitError
	assert.Falsef(t, !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.HasPrefix(string(out), "skulk-mcp: not started by a Skulk host"), "by hand: %v %q", err, out)
}

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }
