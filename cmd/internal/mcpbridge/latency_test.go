package mcpbridge_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// bigResource is the test server's 1 MiB resource.
const bigResource = "test://big"

// TestBridgeLatency measures what the bridge adds (docs/performance.md):
// a small tools/call and a 1 MiB resources/read, by a go-sdk client over
// stdio, against the test MCP server directly and through skulk-host mcp
// serve → skulk-mcp → the same server. It runs only with
// SKULK_MCP_LATENCY=1 (it is a measurement, not a check):
//
//	SKULK_MCP_LATENCY=1 go test -count=1 -run TestBridgeLatency -v ./internal/mcpbridge
//
// It runs alone (not t.Parallel): other tests' processes beside it would
// add to the times it measures.
func TestBridgeLatency(t *testing.T) {
	if os.Getenv("SKULK_MCP_LATENCY") != "1" {
		t.Skip("a measurement: set SKULK_MCP_LATENCY=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	direct := exec.Command(selfBin)
	direct.Env = append(os.Environ(), envServer+"=1")
	ds, err := newClient(newProgressLog()).Connect(ctx, &mcp.CommandTransport{Command: direct, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	defer ds.Close()
	bridged := startServe(t, ctx, []string{"--env", envServer + "=1", "--env", envGORACE}, wrapperBin, "--", selfBin)
	defer bridged.close(t)

	for _, m := range []struct {
		name string
		n    int
		op   func(*mcp.ClientSession) error
	}{
		{"small tools/call (echo)", 500, func(s *mcp.ClientSession) error {
			_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
			return err
		}},
		{"1 MiB resources/read", 50, func(s *mcp.ClientSession) error {
			r, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: bigResource})
			if err == nil && len(r.Contents[0].Blob) != 1<<20 {
				require.FailNow(t, fmt.Sprintf("read %d bytes", len(r.Contents[0].Blob)))
			}
			return err
		}},
	} {
		var med [2]time.Duration
		for i, s := range []*mcp.ClientSession{ds, bridged.sess} {
			times := make([]time.Duration, 0, m.n)
			for range m.n {
				start := time.Now()
				require.NoError(t, m.op(s))
				times = append(times, time.Since(start))
			}
			slices.Sort(times)
			med[i] = times[len(times)/2]
		}
		t.Logf("%s: median direct %v, through the gateway %v, added %v", m.name, med[0], med[1], med[1]-med[0])
	}
}
