package mcpbridge

import (
	"bufio"
	"errors"
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
	const grace = 200 * time.Millisecond
	cases := []struct {
		name   string
		script string         // run by sh -c, its stdin the pipe Close closes
		signal syscall.Signal // what ends it, 0 for its own exit
		least  time.Duration  // the least Close can take
	}{
		{"exits at the input's end", "cat >/dev/null", 0, 0},
		{"ends at SIGTERM", "read x; exec sleep 60", syscall.SIGTERM, grace},
		// A signal ignored stays ignored across exec.
		{"ends at SIGKILL", `trap "" TERM; echo ready; read x; exec sleep 60`, syscall.SIGKILL, 2 * grace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tc.script)
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			if strings.Contains(tc.script, "echo ready") {
				// The trap is set before the SIGTERM can come.
				_, err := bufio.NewReader(stdout).ReadString('\n')
				require.NoError(t, err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // on failure; it is waited for by Close
			in := &serverInput{cmd: cmd, stdin: stdin, grace: grace}
			start := time.Now()
			err = in.Close()
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
