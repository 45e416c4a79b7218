package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/natstest"
	"github.com/skulkrt/skulk/skulktest"
)

// lockedBuffer is a bytes.Buffer safe for a command's goroutine and the
// test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeAndCallVia: skulk-host serve serves cmd/skulk-child on a NATS
// server; call --via reaches it, streams its output and exits with the
// terminal's status, naming the serving host's tree of the call, which
// serve --journal kept and replay shows; an interrupted serve stops
// cleanly.
func TestServeAndCallVia(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/skulk-child")
	}
	child, err := skulktest.BuildIn(t.TempDir(), "github.com/skulkrt/skulk/cmd/skulk-child")
	require.NoError(t, err)
	srv := natstest.Run(t)
	url := srv.URL() + "/clitools"
	journal := srv.URL() + "/CALLS"

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var serr lockedBuffer
	done := make(chan int, 1)
	go func() { // ends when ctx is cancelled (stop)
		done <- Run(ctx, []string{"serve", "--nats", url, "--id", "cli1", "--journal", journal, "--", child, "--test-tools"}, Env{Stdout: &bytes.Buffer{}, Stderr: &serr, Stdin: strings.NewReader("")})
	}()
	require.Eventually(t, func() bool { return strings.Contains(serr.String(), "serving") }, 60*time.Second, 20*time.Millisecond, "serve: %s", serr.String())
	assert.Contains(t, serr.String(), "as clitools (host cli1)")

	code, stdout, stderr := runCLI(t, "call", "count", "--args", `{"n": 3}`, "--json", "--via", url)
	require.Equal(t, ExitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 5, stdout) // started, 3 chunks, completed
	assert.Contains(t, lines[4], `"kind":"completed"`)
	_, tail, ok := strings.Cut(stderr, "skulk-host call: remote tree ")
	require.True(t, ok, stderr)
	tree, host, _ := strings.Cut(strings.TrimSpace(tail), " ")
	assert.Equal(t, "(host cli1)", host)
	code, stdout, stderr = runCLI(t, "replay", journal, tree)
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stdout, "call "+tree+" count")
	assert.Contains(t, stdout, "done:")

	code, _, stderr = runCLI(t, "call", "fail", "--args", `{"message": "m"}`, "--via", url)
	assert.Equal(t, ExitProviderError, code, stderr)
	code, _, stderr = runCLI(t, "call", "sleep", "--args", `{"ms": 60000}`, "--timeout", "300ms", "--via", url)
	assert.Equal(t, ExitTimeout, code, stderr)
	code, _, stderr = runCLI(t, "call", "nope", "--via", url)
	assert.Equal(t, ExitRefused, code, stderr)

	stop()
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code, serr.String())
	case <-time.After(30 * time.Second):
		require.FailNow(t, "serve did not stop")
	}
	assert.Contains(t, serr.String(), "stopped")

	// Nobody serves it any more: the call cannot start.
	code, _, stderr = runCLI(t, "call", "count", "--via", url)
	assert.Equal(t, ExitUnreachable, code, stderr)
}

func TestServeAndViaUsage(t *testing.T) {
	cases := map[string][]string{
		"no --nats":           {"serve", "--", "x"},
		"no child":            {"serve", "--nats", "nats://127.0.0.1:1/x"},
		"a password":          {"serve", "--nats", "nats://user:sekret@127.0.0.1:1/x", "--", "x"},
		"no name":             {"serve", "--nats", "nats://127.0.0.1:1", "--", "x"},
		"bad scheme":          {"serve", "--nats", "http://127.0.0.1:1/x", "--", "x"},
		"unknown parameter":   {"serve", "--nats", "nats://127.0.0.1:1/x?password=sekret", "--", "x"},
		"heartbeat":           {"serve", "--nats", "nats://127.0.0.1:1/x", "--heartbeat", "5s", "--dead-after", "1s", "--", "x"},
		"via and a child":     {"call", "count", "--via", "nats://127.0.0.1:1/x", "--", "x"},
		"via and journal":     {"call", "count", "--via", "nats://127.0.0.1:1/x", "--journal", "j.db"},
		"via with a password": {"call", "count", "--via", "nats://u:sekret@127.0.0.1:1/x"},
	}
	for name, args := range cases {
		code, stdout, stderr := runCLI(t, args...)
		assert.Equal(t, ExitUsage, code, "%s: %s", name, stderr)
		assert.Empty(t, stdout, name)
		assert.NotContains(t, stderr, "sekret", name)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: one line: %q", name, stderr)
	}
}
