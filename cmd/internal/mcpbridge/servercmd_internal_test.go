package mcpbridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServerInputCloseEndsTheServer: closing an MCP server's stdin ends
// a server that exits at the end of its input at once; one that does not
// gets SIGTERM after the grace period, and one that ignores SIGTERM
// SIGKILL after another. Close returns the server's exit.
func TestServerInputCloseEndsTheServer(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	cases := []struct {
		name   string
		script string         // run by sh -c, its stdin the pipe Close closes
		grace  time.Duration  // serverInput's
		signal syscall.Signal // what ends it, 0 for its own exit
		least  time.Duration  // the least Close can take
	}{
		// A grace no loaded machine outlasts: its exit is what ends it.
		{"exits at the input's end", "cat >/dev/null", time.Minute, 0, 0},
		{"ends at SIGTERM", "read x; exec sleep 60", grace, syscall.SIGTERM, grace},
		// A signal ignored stays ignored across exec.
		{"ends at SIGKILL", `trap "" TERM; echo ready; read x; exec sleep 60`, grace, syscall.SIGKILL, 2 * grace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tc.script)
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() {
				if cmd.ProcessState == nil { // Close did not run: the test failed before it
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			if strings.Contains(tc.script, "echo ready") {
				// The trap is set before the SIGTERM can come.
				_, err := bufio.NewReader(stdout).ReadString('\n')
				require.NoError(t, err)
			}
			in := &serverInput{cmd: cmd, stdin: stdin, grace: tc.grace}
			start := time.Now()
			// Two at once, as the go-sdk's close and Wrapper.reap can: one
			// wait for the exit, and both get its result.
			errs := make(chan error, 2)
			for range 2 {
				go func() { errs <- in.Close() }()
			}
			err = <-errs
			require.Equal(t, err, <-errs, "the second Close's result")
			took := time.Since(start)
			if tc.signal == 0 {
				require.NoError(t, err)
			} else {
				var ee *exec.ExitError
				require.True(t, errors.As(err, &ee), "Close: %v", err)
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled(), "Close: %v", err)
				require.Equal(t, tc.signal, ws.Signal())
			}
			require.GreaterOrEqual(t, took, tc.least)
			require.NotNil(t, cmd.ProcessState, "the server was not waited for")
		})
	}
}

// TestServerLine: of the lines of an MCP server's stdout that are not a
// JSON-RPC message, those that cannot be an answer are skipped and logged
// with their first 256 bytes; those that may be one, and a line over
// 16 MiB, end the connection, logged without their content.
func TestServerLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line string // "" for a line over 16 MiB
		ends bool
	}{
		{"debug: a print", false},
		{strings.Repeat("x", 300), false},
		{"42", false},
		{`{"note": "not JSON-RPC"}`, false},
		{"[1, 2]", false},
		{`{"jsonrpc":"2.0","id":3,"result":{"x":NaN}}`, true}, // not JSON, and an object
		{"{", true},                                           // a message spread over lines
		{" [1, 2", false},                                     // not an array of objects
		{`{"jsonrpc":"2.0","id":3,"error":"e"}`, true},        // an id and no method
		{`[{"id":3,"result":{}}]`, true},                      // an array holding one
		{"[INFO] server started", false},                      // a log line
		{"[", true},
		{"[ {", true},
		{"", true},
	}
	for _, tc := range cases {
		var log bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&log, nil))
		var err error
		if tc.line == "" {
			err = serverLine(logger, badLine{kind: "too large"})
		} else {
			lr := newLineReader(io.NopCloser(strings.NewReader(tc.line+"\n")), true, func(b badLine) error { return serverLine(logger, b) })
			_, err = io.ReadAll(lr)
		}
		var rec struct{ Msg, Line string }
		require.NoError(t, json.Unmarshal(log.Bytes(), &rec), "one log record")
		if tc.ends {
			require.ErrorIs(t, err, errServerOutput, "line %q", tc.line)
			require.Contains(t, rec.Msg, "the connection ends", "line %q", tc.line)
			require.Empty(t, rec.Line, "the log shows the line")
			continue
		}
		require.NoError(t, err, "line %q", tc.line)
		require.Contains(t, rec.Msg, "skipped", "line %q", tc.line)
		want := tc.line
		if len(want) > strayLineLogged {
			want = want[:strayLineLogged]
		}
		require.Equal(t, want, rec.Line, "the line logged")
	}
}
