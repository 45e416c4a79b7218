package mcpbridge_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// lineLog keeps the lines of the children's output a host logs.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lineLog) WithGroup(string) slog.Handler            { return l }
func (l *lineLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "child output" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			l.mu.Lock()
			l.lines = append(l.lines, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// wait returns the first line holding all of parts, failing after d.
func (l *lineLog) wait(t *testing.T, d time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				l.mu.Unlock()
				return line
			}
		}
		all := strings.Join(l.lines, "\n")
		l.mu.Unlock()
		require.Falsef(t, time.Now().After(deadline), "no child output line with %q after %v; lines:\n%s", parts, d, all)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerLogReachesHost: the wrapper sets the MCP server's logging level
// at start, so a log notification the server sends reaches the wrapper's
// stderr, which the host logs as the child's output.
//
// It runs alone (not t.Parallel): it starts a Host in this process (see
// main_test.go).
func TestServerLogReachesHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, lines := startLoggedWrapper(t, ctx)
	_, err := call(t, ctx, h, "log", map[string]any{"text": "a line from the test server"}).Wait()
	require.NoError(t, err)
	lines.wait(t, 10*time.Second, "mcp server log", "test-server", "a line from the test server")
}

// TestStrayServerOutputSkipped: a line the MCP server writes on stdout
// that is not a JSON-RPC message and cannot be an answer (a print of its
// own) is logged and skipped: the call that printed it completes, and so
// do the calls after it, from the same server.
//
// It runs alone (not t.Parallel): it starts a Host in this process (see
// main_test.go).
func TestStrayServerOutputSkipped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, lines := startLoggedWrapper(t, ctx)
	before, _ := serverPids(t, ctx, h)
	for _, text := range []string{"debug: a print of the server's", "[1, 2]", `{"not": "JSON-RPC"}`} {
		payloads, _, last := outputOf(t, call(t, ctx, h, "stray", map[string]any{"text": text}))
		require.Equal(t, frame.KindCompleted, last.Kind, "the call that printed %q: %v", text, last.Error)
		require.Len(t, payloads, 1)
		lines.wait(t, 10*time.Second, "not a JSON-RPC message; skipped", strings.ReplaceAll(text, `"`, `\"`))
	}
	payloads, _, last := outputOf(t, call(t, ctx, h, "echo", map[string]any{"text": "after"}))
	require.Equal(t, frame.KindCompleted, last.Kind, "echo after the prints: %v", last.Error)
	require.Equal(t, []string{`{"text":"after"}`}, payloads)
	after, _ := serverPids(t, ctx, h)
	require.Equal(t, before, after, "the server was restarted")
}

// TestServerBrokenAnswerEndsTheConnection: a line on the MCP server's
// stdout that has an id and no method but is not a JSON-RPC message may be
// the answer a call waits for, so it ends the connection rather than
// leave the call waiting: the call fails as the child's death does, the
// child's stderr says why, and the restarted server serves.
//
// It runs alone (not t.Parallel): it starts a Host in this process (see
// main_test.go).
func TestServerBrokenAnswerEndsTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, lines := startLoggedWrapper(t, ctx)
	before, _ := serverPids(t, ctx, h)
	_, err := call(t, ctx, h, "stray", map[string]any{"text": `{"jsonrpc":"2.0","id":999999,"error":"secret"}`}).Wait()
	var ce *frame.Error
	require.True(t, errors.As(err, &ce), "the call: %v", err)
	require.Equal(t, frame.CodeUnreachable, ce.Code, "the call: %v", err)
	require.True(t, ce.Synthetic, "the call: %v", err)
	require.Contains(t, host.Stderr(err), "the MCP server wrote on stdout a line that is not a JSON-RPC message and may be an answer (not JSON-RPC 2.0)")
	line := lines.wait(t, 10*time.Second, "not a JSON-RPC message and may be an answer; the connection ends")
	require.NotContains(t, line, "secret", "the log shows the line")
	after, _ := serverPids(t, ctx, h) // waits for the restart
	require.NotEqual(t, before, after, "the same server serves")
}

// startLoggedWrapper starts skulk-mcp over the test server under a host
// whose log lines it keeps, and closes the host as the test ends.
func startLoggedWrapper(t *testing.T, ctx context.Context) (*host.Host, *lineLog) {
	t.Helper()
	lines := &lineLog{}
	h, err := host.Start(ctx, host.Config{
		Command:  wrapperBin,
		Args:     []string{"--", selfBin},
		ExtraEnv: append([]string{envServer + "=1"}, raceExitEnv()...),
		TempDir:  shortTempDir(t),
		Logger:   slog.New(lines),
	})
	require.NoError(t, err, "host.Start of skulk-mcp")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h.Close(ctx)
	})
	return h, lines
}
