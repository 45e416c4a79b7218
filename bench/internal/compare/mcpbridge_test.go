package compare

// The MCP bridge's cost, as ratios in one run: the same go-sdk client
// calls an equivalent go-sdk stdio server directly (cmd/mcpchild), and
// cmd/skulk-child through `skulk-host mcp serve` (docs/mcp.md):
//
//	small: mcpchild echo {"text": "x"}  vs  skulk-child count {"n": 0}
//	       (each a result of one small text content)
//	media: mcpchild blob {"bytes": 1 MiB}  vs  skulk-child media {"bytes": 1 MiB, "chunk": 1 MiB}
//	       (each one embedded resource of 1 MiB, base64 in the JSON; the
//	       bridged one also carries the child's SHA-256 of the bytes)

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/bench/internal/mcpbench"
)

var (
	hostOnce sync.Once
	hostBin  string // skulk-host, built once for the bridge benchmarks
	hostErr  error
)

// skulkHost builds cmd/skulk-host of the main module (the bench module's
// parent, which it replaces) with the main module's own go.mod, into the
// directory TestMain removes at exit.
func skulkHost(b *testing.B) string {
	hostOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		mod, err := ModuleDir(ctx)
		if err != nil {
			hostErr = err
			return
		}
		hostBin = filepath.Join(filepath.Dir(bins.MCP), "skulk-host")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", hostBin, "./cmd/skulk-host")
		cmd.Dir = filepath.Dir(mod)
		if out, err := cmd.CombinedOutput(); err != nil {
			hostErr = errors.New("go build skulk-host: " + err.Error() + "\n" + string(out))
		}
	})
	require.NoError(b, hostErr)
	return hostBin
}

// benchMCPClient connects the go-sdk client to cmd and runs op b.N times.
func benchMCPClient(b *testing.B, cmd *exec.Cmd, op func(context.Context, *mcp.ClientSession) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "skulk-bench-driver", Version: "v1"}, nil)
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(b, err)
	defer sess.Close()
	for range 20 { // warm up
		require.NoError(b, op(ctx, sess))
	}
	b.ResetTimer()
	for range b.N {
		require.NoError(b, op(ctx, sess))
	}
	b.StopTimer()
}

func mcpOp(name string, args any, check func(*mcp.CallToolResult) bool) func(context.Context, *mcp.ClientSession) error {
	return func(ctx context.Context, sess *mcp.ClientSession) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return err
		}
		if res.IsError || !check(res) {
			return errors.New("mcp: " + name + ": unexpected result")
		}
		return nil
	}
}

func oneText(r *mcp.CallToolResult) bool {
	if len(r.Content) == 0 {
		return false
	}
	_, ok := r.Content[0].(*mcp.TextContent)
	return ok
}

func blobOf(n int) func(*mcp.CallToolResult) bool {
	return func(r *mcp.CallToolResult) bool {
		if len(r.Content) == 0 {
			return false
		}
		er, ok := r.Content[0].(*mcp.EmbeddedResource)
		return ok && er.Resource != nil && len(er.Resource.Blob) == n
	}
}

// BenchmarkMCPDirectSmall: one op is one small tools/call to a go-sdk
// stdio server.
func BenchmarkMCPDirectSmall(b *testing.B) {
	benchMCPClient(b, exec.Command(bins.MCP), mcpOp(mcpbench.ToolEcho, mcpbench.EchoArgs{Text: "x"}, oneText))
}

// BenchmarkMCPBridgeSmall: one op is one small tools/call to skulk-child
// through skulk-host mcp serve.
func BenchmarkMCPBridgeSmall(b *testing.B) {
	benchMCPClient(b, exec.Command(skulkHost(b), "mcp", "serve", "--", bins.SkulkDemo), mcpOp("count", map[string]any{"n": 0}, oneText))
}

// BenchmarkMCPDirectMedia: one op is a tools/call returning 1 MiB as an
// embedded resource, from a go-sdk stdio server.
func BenchmarkMCPDirectMedia(b *testing.B) {
	b.SetBytes(mediaChunk)
	benchMCPClient(b, exec.Command(bins.MCP), mcpOp(mcpbench.ToolBlob, mcpbench.BlobArgs{Bytes: mediaChunk}, blobOf(mediaChunk)))
}

// BenchmarkMCPBridgeMedia: one op is a tools/call returning 1 MiB of
// inline media, from skulk-child through skulk-host mcp serve.
func BenchmarkMCPBridgeMedia(b *testing.B) {
	b.SetBytes(mediaChunk)
	benchMCPClient(b, exec.Command(skulkHost(b), "mcp", "serve", "--", bins.SkulkDemo),
		mcpOp("media", map[string]any{"bytes": mediaChunk, "chunk": mediaChunk}, blobOf(mediaChunk)))
}
