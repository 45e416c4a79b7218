package mcpbridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// lossSecret is in every field of the test server that Skulk cannot carry;
// no log line may show it (messages name fields, never their values).
const lossSecret = "secret-value-7c1e"

// The wrapper's log lines that say what Skulk could not carry, as
// docs/mcp.md ("What cannot be mapped, and how it shows") gives them.
const (
	msgToolLoss     = `msg="MCP tool fields not carried by Skulk"`
	msgResultLoss   = `msg="MCP result fields not carried by Skulk"`
	msgToolsChanged = `msg="the MCP server's tool list changed; its tools are offered anew"`
)

// addLossTools gives the test server the tools of TestWrapperLosses:
// annotated (a tool and a result with every field Skulk has no place for),
// annotatedfail (an error result with structured content) and addtool
// (which adds a tool, so the server notifies that its list changed).
func addLossTools(s *mcp.Server) {
	object := map[string]any{"type": "object"}
	note := mcp.Meta{"example.com/note": lossSecret}
	s.AddTool(&mcp.Tool{
		Name: "annotated", Title: "Annotated " + lossSecret, Description: "a tool and a result with annotations, icons and _meta",
		InputSchema: object, OutputSchema: map[string]any{"type": "array"},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, Title: lossSecret},
		Icons:       []mcp.Icon{{Source: "https://example.com/" + lossSecret + ".png"}},
		Meta:        note,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Meta: note}); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{
			Content: []mcp.Content{
				&mcp.TextContent{Text: "annotated", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, LastModified: lossSecret}, Meta: note},
				&mcp.ImageContent{Data: mediaBytes(16, imageStep), MIMEType: "image/png", Meta: note},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://text", MIMEType: "text/plain", Text: "hello", Meta: note}},
				&mcp.ResourceLink{URI: "test://link", Name: "linked", Title: "Linked", Description: "a link", Icons: []mcp.Icon{{Source: "https://example.com/" + lossSecret + ".png"}}},
			},
			StructuredContent: []any{1, 2},
			Meta:              note,
		}, nil
	})
	s.AddTool(&mcp.Tool{Name: "annotatedfail", Description: "an error result with structured content", InputSchema: object},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}},
				StructuredContent: map[string]any{"detail": lossSecret}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "addtool", Description: "adds the tool added, so the tool list changes", InputSchema: object},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(&mcp.Tool{Name: "added", InputSchema: object}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
			})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added"}}}, nil
		})
}

// attrOf returns the value of key in a slog text line, "" when absent.
func attrOf(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// TestWrapperLosses: what an MCP server's tools and results have that
// Skulk cannot carry is said at run time, never dropped silently: a
// warning per tool at start naming the fields, a warning per call naming
// the call and the fields, a warning when the server's tool list changes;
// protocol _meta (the SDK's serverInfo on every result) is no loss, and no
// line shows a value.
//
// It runs alone (not t.Parallel): it starts a Host in this process (see
// main_test.go).
func TestWrapperLosses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, lines := startLoggedWrapper(t, ctx)

	line := lines.wait(t, 10*time.Second, msgToolLoss, " tool=annotated ")
	if got, want := attrOf(line, "fields"), "title,outputSchema,annotations,icons,_meta"; got != want || !strings.Contains(line, "level=WARN") {
		assert.Fail(t, fmt.Sprintf("tool line %q: fields %q, want %q at level WARN", line, got, want))
	}

	// Calls with nothing lost (a result whose _meta is only the SDK's
	// serverInfo, progress without _meta) say nothing.
	plain := []*host.Call{call(t, ctx, h, "echo", map[string]any{"text": "hi"}), call(t, ctx, h, "progress", map[string]any{"n": 2})}
	for _, c := range plain {
		if _, _, last := outputOf(t, c); last.Kind != frame.KindCompleted {
			require.FailNow(t, fmt.Sprintf("%s: %v", c.Tool(), last))
		}
	}

	c := call(t, ctx, h, "annotated", map[string]any{})
	payloads, media, last := outputOf(t, c)
	// Content fields beside the plain shape ride in its "mcp" key.
	want := []string{`{"progress":1}`, `{"mcp":{"_meta":`, `{"mcp":{"_meta":`, `{"mcp":{"resource":{"_meta":`, `{"mcp":{"description":"a link","icons":`}
	ok := len(payloads) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(payloads[i], want[i])
	}
	assert.Falsef(t, !ok || len(media) != 1 || last.Kind != frame.KindCompleted || last.Payload.String() != `{"value":[1,2]}`, "annotated: %v, %d media, %v %s; want %v…, the image, completed {\"value\":[1,2]}", payloads, len(media), last.Kind, last.Payload, want)
	line = lines.wait(t, 10*time.Second, msgResultLoss, " call_id="+c.ID()+" ")
	if got, want := attrOf(line, "fields"), "progress._meta,_meta"; got != want || attrOf(line, "tool") != "annotated" || !strings.Contains(line, "level=WARN") {
		assert.Fail(t, fmt.Sprintf("result line %q: fields %q, want %q, tool annotated, level WARN", line, got, want))
	}

	c = call(t, ctx, h, "annotatedfail", map[string]any{})
	if _, _, last := outputOf(t, c); last.Kind != frame.KindFailed || last.Error == nil || last.Error.Code != frame.CodeProviderError || last.Error.Message != "no" {
		assert.Fail(t, fmt.Sprintf("annotatedfail: %v", last))
	}
	line = lines.wait(t, 10*time.Second, msgResultLoss, " call_id="+c.ID()+" ")
	if got := attrOf(line, "fields"); got != "structuredContent" {
		assert.Fail(t, fmt.Sprintf("result line %q: fields %q, want structuredContent", line, got))
	}

	if _, _, last := outputOf(t, call(t, ctx, h, "addtool", map[string]any{})); last.Kind != frame.KindCompleted {
		require.FailNow(t, fmt.Sprintf("addtool: %v", last))
	}
	lines.wait(t, 10*time.Second, msgToolsChanged, "level=INFO")
	// The new list reached the host (a tools packet): the added tool is
	// offered and called without a restart.
	deadline := time.Now().Add(10 * time.Second)
	for !offers(h, "added") {
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("the host does not offer the added tool: %v", h.Tools()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, last := outputOf(t, call(t, ctx, h, "added", map[string]any{})); last.Kind != frame.KindCompleted {
		require.FailNow(t, fmt.Sprintf("added: %v", last))
	}
	if info := h.Children()[0]; info.Restarts != 0 {
		require.FailNow(t, fmt.Sprintf("the child restarted %d times", info.Restarts))
	}

	// The lines above came in the order they were written: by now every
	// line of the start and of the plain calls is in.
	lines.mu.Lock()
	defer lines.mu.Unlock()
	toolLines := 0
	for _, l := range lines.lines {
		if strings.Contains(l, msgToolLoss) {
			toolLines++
		}
		for _, c := range plain {
			if strings.Contains(l, msgResultLoss) && strings.Contains(l, " call_id="+c.ID()+" ") {
				assert.Fail(t, fmt.Sprintf("the %s call, which lost nothing, has a line: %q", c.Tool(), l))
			}
		}
		assert.Falsef(t, strings.Contains(l, lossSecret), "a line shows a value: %q", l)
	}
	assert.EqualValuesf(t, 1, toolLines, "%d tool lines, want 1 (annotated's)", toolLines)
}

// offers reports whether h offers the tool id.
func offers(h *host.Host, id string) bool {
	for _, t := range h.Tools() {
		if t.ID == id {
			return true
		}
	}
	return false
}
