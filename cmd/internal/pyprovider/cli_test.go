package pyprovider_test

// These tests run the built skulk-host command against the Python
// provider as a user would (docs/cli.md): tools, a streamed call, a media
// call, and a call whose child is killed with SIGKILL.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/cmd/internal/cli"
	"github.com/skulkrt/skulk/cmd/internal/clitest"
	"github.com/skulkrt/skulk/internal/testnet"
)

// builds holds skulk-host, built by the first test that has Python (the
// others skip before building anything); TestMain removes it.
var builds clitest.Builds

// skulkHost returns the path of the built skulk-host, failing t when it
// could not be built.
func skulkHost(t *testing.T) string {
	t.Helper()
	return builds.Command(t, "github.com/skulkrt/skulk/cmd/skulk-host")
}

// runCLI runs the built skulk-host with args (clitest.Run).
func runCLI(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	return clitest.Run(t, skulkHost(t), "", args...)
}

// TestCLITools: skulk-host tools lists the Python child's tools, as JSON
// and for a person.
func TestCLITools(t *testing.T) {
	py := provider(t)
	r := runCLI(t, "tools", "--json", "--", py, "--test-tools")
	require.Falsef(t, r.Status != cli.ExitOK, "tools --json: status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckTools(t, r.Stdout)
	r = runCLI(t, "tools", "--", py)
	if r.Status != cli.ExitOK || !regexp.MustCompile(`(?m)^count .*— `).MatchString(r.Stdout) ||
		!regexp.MustCompile(`(?m)^    arguments +\{`).MatchString(r.Stdout) || strings.Contains(r.Stdout, "crash") {
		assert.Fail(t, fmt.Sprintf("tools: status %d, stderr %q\n%s", r.Status, r.Stderr, r.Stdout))
	}
}

// TestCLICallCount: call count streams n chunks and the result.
func TestCLICallCount(t *testing.T) {
	py := provider(t)
	r := runCLI(t, "call", "count", "--args", `{"n": 3}`, "--json", "--", py)
	require.Falsef(t, r.Status != cli.ExitOK || r.Stderr != "", "status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckCount(t, clitest.ParseLines(t, r.Stdout), 3)
}

// TestCLICallMedia: call media gives each inline chunk's bytes, saved to
// files, and the child's digest of the whole.
func TestCLICallMedia(t *testing.T) {
	py := provider(t)
	dir := filepath.Join(t.TempDir(), "media")
	const total, chunk = 2<<20 + 17, 1 << 20
	r := runCLI(t, "call", "media", "--args", fmt.Sprintf(`{"bytes": %d, "chunk": %d}`, total, chunk),
		"--json", "--save-media", dir, "--", py)
	require.Falsef(t, r.Status != cli.ExitOK || r.Stderr != "", "status %d, stderr %q", r.Status, r.Stderr)
	clitest.CheckMedia(t, clitest.ParseLines(t, r.Stdout), dir, total, chunk)
}

// childrenRunning returns the pids of pid's child processes whose command
// line holds arg (the host has a helper process of its own beside its
// children). It reads every thread's children: Go starts a process from
// whichever thread it runs on.
func childrenRunning(t *testing.T, pid int, arg string) []int {
	t.Helper()
	var pids []int
	for _, p := range testnet.Children(pid) {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			pids = append(pids, p)
		}
	}
	return pids
}

// TestCLIKill9: a SIGKILL of the Python child in the middle of a call
// ends it with a synthetic failed unreachable, and the command with exit
// status 12 (docs/cli.md, "Errors and exit statuses").
func TestCLIKill9(t *testing.T) {
	py := provider(t)
	p := clitest.Start(t, skulkHost(t), "call", "count", "--args", `{"n": 100000000}`, "--json", "--", py)
	c := clitest.NewChecker(t)
	sc := bufio.NewScanner(p.Stdout)
	for c.Count() < 10 && sc.Scan() {
		if l := c.Add(sc.Bytes()); clitest.Terminal(l.Kind) {
			require.FailNow(t, fmt.Sprintf("the call ended before the kill: %+v", l))
		}
	}
	if c.Count() < 10 {
		require.FailNow(t, fmt.Sprintf("%d lines before the call ended (%v)", c.Count(), sc.Err())) // stderr is read only after Wait
	}
	kids := childrenRunning(t, p.Cmd.Process.Pid, py)
	require.EqualValuesf(t, 1, len(kids), "skulk-host has children %v running %s, want one", kids, py)
	require.NoError(t, syscall.Kill(kids[0], syscall.SIGKILL))
	for sc.Scan() {
		c.Add(sc.Bytes())
	}
	require.NoError(t, sc.Err())
	if status, stderr := p.Wait(t); status != cli.ExitUnreachable || stderr != "" {
		assert.Fail(t, fmt.Sprintf("exit status %d, want %d; stderr %q", status, cli.ExitUnreachable, stderr))
	}
	last := c.Last()
	assert.Falsef(t, last.Kind != "failed" || !last.Synthetic || last.Error == nil || last.Error.Code != "unreachable", "terminal after the kill: %+v", last)
}
