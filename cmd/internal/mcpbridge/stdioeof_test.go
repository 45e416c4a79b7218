package mcpbridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/cmd/internal/mcpbridge"
)

// rawServe starts skulk-host mcp serve ARGS... with TMPDIR=tmp and pipes
// on its standard input and output, and returns its input and the JSON
// messages it writes, in order (closed with its output; the buffer holds
// more messages than a test exchanges).
//
// A cleanup kills the command, if the test left it running, and reads
// what is left of its messages, which ends the goroutine that decodes
// them.
func rawServe(t *testing.T, ctx context.Context, tmp string, args ...string) (*exec.Cmd, io.WriteCloser, <-chan map[string]any) {
	t.Helper()
	cmd := serveCmd(ctx, tmp, args)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan map[string]any, 64)
	go func() { // stopped by the server's stdout closing
		defer close(lines)
		dec := json.NewDecoder(stdout)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			lines <- m
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error: it was waited for already
		for range lines {
		}
		_ = cmd.Wait() // reaps it; an error when the test waited already
	})
	return cmd, stdin, lines
}

// serveCmd is skulk-host mcp serve ARGS... with TMPDIR=tmp, its standard
// error the test's.
func serveCmd(ctx context.Context, tmp string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, hostBin, append([]string{"mcp", "serve"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stderr = os.Stderr
	return cmd
}

// serveStdin runs skulk-host mcp serve SERVE... with input as its whole
// standard input (closed at its end) and returns the JSON-RPC messages it
// wrote to standard output in answer to the client, keyed by id, and how
// long it ran.
func serveStdin(t *testing.T, serve []string, input ...string) (map[float64]map[string]any, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmp := shortTempDir(t)
	cmd := serveCmd(ctx, tmp, serve)
	cmd.Stdin = strings.NewReader(strings.Join(input, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	require.NoError(t, cmd.Run())
	took := time.Since(start)
	byID := map[float64]map[string]any{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		if id, ok := m["id"].(float64); ok && m["method"] == nil { // a response, not the server's own request
			byID[id] = m
		}
	}
	emptyDir(t, tmp)
	return byID, took
}

const (
	rawInitialize  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	rawInitialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// TestStdinClosedAfterRequests: a client that writes its requests and
// closes standard input at once (a pipe) gets an answer to every request
// it wrote, a tool call still running as the input ended included.
func TestStdinClosedAfterRequests(t *testing.T) {
	t.Parallel()
	got, _ := serveStdin(t, []string{"--", childBin}, rawInitialize, rawInitialized,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","arguments":{"n":3}}}`)
	for _, id := range []float64{1, 2, 3, 4} {
		m, ok := got[id]
		require.True(t, ok, "request %v got no answer: %v", id, got)
		require.Nil(t, m["error"], "request %v", id)
	}
	require.NotEmpty(t, got[2]["result"].(map[string]any)["tools"], "tools/list")
	for _, id := range []float64{3, 4} {
		require.NotEqual(t, true, got[id]["result"].(map[string]any)["isError"], "tools/call %v: %v", id, got[id])
	}
}

// TestStdinClosedDuringALongCall: a call still running 10 s after the
// input ended (docs/mcp.md) does not keep the command: it is cancelled,
// and the command exits.
func TestStdinClosedDuringALongCall(t *testing.T) {
	t.Parallel()
	_, took := serveStdin(t, []string{"--", childBin}, rawInitialize, rawInitialized,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":600000}}}`)
	require.GreaterOrEqual(t, took, 10*time.Second, "serve gave up on the running call before 10 s")
	require.Less(t, took, 40*time.Second, "serve kept running after its input ended")
}

// TestStdinClosedBeforeTheClientAnswered: a tool that asks the client
// (elicitation) after the client's input ended gets an error at once, not
// a wait for an answer that cannot come, and its call is answered.
//
// It runs alone (not t.Parallel): its 8 s bound takes in the start and
// exit of skulk-host, skulk-mcp and the test server, which other tests'
// commands would slow.
func TestStdinClosedBeforeTheClientAnswered(t *testing.T) {
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + mcpbridge.ClientRequestsProtocol +
		`","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`
	got, took := serveStdin(t, []string{"--env", envServer + "=1", "--env", envGORACE, "--", wrapperBin, "--", selfBin},
		initialize, rawInitialized,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask","arguments":{"text":"your name?"}}}`)
	m, ok := got[2]
	require.True(t, ok, "the call that asked the client got no answer: %v", got)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(b), "the client's input ended before it answered")
	// The 10 s wait for answers is not what ended it.
	require.Less(t, took, 8*time.Second, "answered after %v: %s", took, b)
}

// TestSignalEndsServeOnStdio: SIGINT ends mcp serve on stdio at once
// while a call runs, with its input still open and once it ended (when
// it waits up to 10 s for the call's answer otherwise).
//
// It runs alone (not t.Parallel): its 6 s bound on the exit after SIGINT
// is for a loaded machine, not for one that also runs other tests'
// commands.
func TestSignalEndsServeOnStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, closeInput := range []bool{false, true} {
		tmp := shortTempDir(t)
		cmd, stdin, lines := rawServe(t, ctx, tmp, "--", childBin)
		pong := make(chan struct{})
		go func() { // ends with the server's stdout
			for m := range lines {
				if m["id"] == float64(3) && m["method"] == nil { // the answer, not a request of the server's
					close(pong)
				}
			}
		}()
		// The ping's answer comes once the server has read the call before
		// it: the call is in flight.
		_, err := io.WriteString(stdin, rawInitialize+"\n"+rawInitialized+"\n"+
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":600000}}}`+"\n"+
			`{"jsonrpc":"2.0","id":3,"method":"ping"}`+"\n")
		require.NoError(t, err)
		select {
		case <-pong:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no answer to the ping in 30 s")
		}
		if closeInput {
			require.NoError(t, stdin.Close())
			// Nothing outside shows the server's read of the input's end,
			// so a second lets it most likely come first (the wait it
			// starts lasts 10 s); TestSessionEndStopsTheWaitForAnswers
			// checks that order for certain, in process.
			time.Sleep(time.Second)
		}
		sent := time.Now()
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		err = cmd.Wait()
		took := time.Since(sent)
		stdin.Close()
		require.NoError(t, err, "input closed: %v", closeInput)
		require.Less(t, took, 6*time.Second, "input closed: %v: serve went on after SIGINT", closeInput)
		emptyDir(t, tmp)
	}
}

// TestBadLinesAnsweredOnStdio: lines of a client's input that are not one
// JSON-RPC message (not JSON, a batch, not JSON-RPC 2.0) each get an
// error answer, and the session goes on: the requests after them are
// answered, a tool call included, and the command exits 0 at the input's
// end.
func TestBadLinesAnsweredOnStdio(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmp := shortTempDir(t)
	cmd := serveCmd(ctx, tmp, []string{"--", childBin})
	cmd.Stdin = strings.NewReader(strings.Join([]string{rawInitialize, rawInitialized,
		`not json`,
		`[{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/progress","params":{}}]`,
		`{"jsonrpc":"1.0","id":3,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","arguments":{"n":2}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping"}`,
	}, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Run(), "serve ended with an error")
	var refused []string
	answered := map[float64]map[string]any{}
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		if m["method"] != nil {
			continue // the server's own request or notification
		}
		if e, ok := m["error"].(map[string]any); ok {
			refused = append(refused, fmt.Sprintf("%v %v", m["id"], e["code"]))
			continue
		}
		answered[m["id"].(float64)] = m
	}
	require.Equal(t, []string{"<nil> -32700", "<nil> -32600", "3 -32600"}, refused, "error answers (id, code)")
	for _, id := range []float64{1, 4, 5} {
		require.Contains(t, answered, id, "request %v got no answer", id)
	}
	require.NotEqual(t, true, answered[4]["result"].(map[string]any)["isError"], "tools/call: %v", answered[4])
	require.NotContains(t, answered, float64(2), "a request in the refused batch was run")
	emptyDir(t, tmp)
}
