// Package mcpbench is the MCP side of the benchmarks: a server with the bench
// tools, run by cmd/mcpchild over stdio, which the driver reaches through the
// go-sdk's CommandTransport.
//
// MCP has no streaming result: a stream is a tool call whose handler sends
// progress notifications (the only server→client stream the SDK offers) and
// then returns. Binary data travels as an embedded resource's blob, which
// MCP encodes as base64 in the JSON text.
package mcpbench

import (
	"context"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names.
const (
	// ToolStream sends N progress notifications whose message is Size
	// characters, then returns.
	ToolStream = "stream"
	// ToolBlob returns one embedded resource of Bytes bytes.
	ToolBlob = "blob"
	// ToolEcho returns its text.
	ToolEcho = "echo"
	// ToolSleep sends one progress notification, then waits MS
	// milliseconds or until cancelled.
	ToolSleep = "sleep"
)

// MaxBlob bounds ToolBlob's Bytes: 8 MiB, so that the base64 line (4/3 as
// long) stays under the stdio transport's default 16 MiB line limit.
const MaxBlob = 8 << 20

// StreamArgs are ToolStream's arguments.
type StreamArgs struct {
	N    int `json:"n"`
	Size int `json:"size"`
}

// BlobArgs are ToolBlob's arguments.
type BlobArgs struct {
	Bytes int `json:"bytes"`
}

// EchoArgs are ToolEcho's arguments.
type EchoArgs struct {
	Text string `json:"text"`
}

// SleepArgs are ToolSleep's arguments.
type SleepArgs struct {
	MS int `json:"ms"`
}

func errResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// NewServer returns the bench MCP server.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "skulk-bench", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: ToolStream, Description: "n progress notifications of size characters"},
		func(ctx context.Context, req *mcp.CallToolRequest, a StreamArgs) (*mcp.CallToolResult, any, error) {
			token := req.Params.GetProgressToken()
			if token == nil || a.N < 0 || a.Size < 0 || a.Size > 1<<20 {
				return errResult("stream needs a progress token, n >= 0 and 0 <= size <= 1 MiB"), nil, nil
			}
			msg := strings.Repeat("x", a.Size)
			for i := range a.N {
				err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: token, Progress: float64(i), Total: float64(a.N), Message: msg,
				})
				if err != nil {
					return nil, nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolBlob, Description: "one binary blob of the given size"},
		func(ctx context.Context, req *mcp.CallToolRequest, a BlobArgs) (*mcp.CallToolResult, any, error) {
			if a.Bytes < 0 || a.Bytes > MaxBlob {
				return errResult("bytes out of range"), nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "bench://blob", MIMEType: "application/octet-stream", Blob: make([]byte, a.Bytes),
			}}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolEcho, Description: "returns its text"},
		func(ctx context.Context, req *mcp.CallToolRequest, a EchoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: ToolSleep, Description: "waits, after one progress notification"},
		func(ctx context.Context, req *mcp.CallToolRequest, a SleepArgs) (*mcp.CallToolResult, any, error) {
			if token := req.Params.GetProgressToken(); token != nil {
				err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Message: "sleeping"})
				if err != nil {
					return nil, nil, err
				}
			}
			t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, nil, nil
		})
	return s
}
