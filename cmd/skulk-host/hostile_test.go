package main

// Tests of skulk-host against internal/fakechild, the fake provider, in
// its hostile tools: its escape sequences reach the terminal as
// visible, inert text, and a skulk-host killed with SIGKILL leaves none of
// its child's tree behind.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeChild returns the path of internal/fakechild, the fake child, built
// the first time a test asks for it.
func fakeChild(t *testing.T) string {
	t.Helper()
	return builds.Path(t, "github.com/skulkrt/skulk/internal/fakechild")
}

// The strings the fake child's evil tool sends, as a person must see them
// (the status line folds the message's line break to a space first).
const (
	evilMessageShown   = `boom\x1b]0;pwned\x07 \x1b[1;31mFAKE: completed OK\x1b[0m`
	evilMediaTypeShown = `audio/x\x1b[2J\x1b[H/../../\u202eevil`
)

// TestEscapesShownInert runs a call whose child sends a media type and an
// error message full of terminal escapes (a window title, a clear screen,
// a carriage return and a red fake success line, a right-to-left
// override), with stdout and stderr on a real pseudo-terminal: what
// arrives there is the escapes as visible text, and no control character
// but the line endings.
func TestEscapesShownInert(t *testing.T) {
	t.Parallel()
	bin := fakeChild(t)
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "evil", "--", bin)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = slave, slave
	require.NoError(t, cmd.Start())
	slave.Close()
	read := readTerminal(master)
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAsf(t, err, &ee, "call evil: want exit status 10 (provider_error)")
	require.Equalf(t, 10, ee.ExitCode(), "call evil: %v, want exit status 10 (provider_error)", err)
	screen := awaitTerminal(ctx, t, read)
	// The terminal turns "\n" into "\r\n"; skulk-host's own progress
	// line, if it was drawn, is erased with "\r\x1b[K".
	shown := strings.ReplaceAll(strings.ReplaceAll(screen, "\r\n", "\n"), "\r\x1b[K", "")
	for i, r := range shown {
		require.Falsef(t, r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e, "control character %U at %d reached the terminal: %q", r, i, screen)
	}
	assert.Falsef(t, !strings.Contains(shown, "[media #1 "+evilMediaTypeShown+", 3 B, sha256 "), "the media type is not shown escaped: %q", shown)
	assert.Falsef(t, !strings.Contains(shown, "failed: provider_error: "+evilMessageShown+" — 3 frames"), "the error message is not shown escaped on the status line: %q", shown)
}

// TestEscapesInPipesAndJSON: through a pipe, tools and call show the
// child's strings escaped just the same; --json keeps them exact; the
// provider's text is raw unless --escape.
func TestEscapesInPipesAndJSON(t *testing.T) {
	t.Parallel()
	bin := fakeChild(t)
	r := run(t, "", "tools", "--", bin)
	if r.Status != 0 || strings.ContainsAny(r.Stdout, "\x1b\x07\u202e") ||
		!strings.Contains(r.Stdout, `evil\x1b[2J — lists\x1b]0;title\x07 a \x1b[31mred\x1b[0m tool\u202e`) {
		require.FailNow(t, fmt.Sprintf("tools: status %d, stdout %q", r.Status, r.Stdout))
	}
	r = run(t, "", "call", "evil", "--json", "--", bin)
	var last struct {
		Error struct{ Message string }
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Error.Message != "boom\x1b]0;pwned\x07\r\n\x1b[1;31mFAKE: completed OK\x1b[0m" {
		require.FailNow(t, fmt.Sprintf("--json does not keep the message exact: %v %q", err, r.Stdout))
	}
	require.Falsef(t, strings.Contains(r.Stderr, "\x1b"), "stderr of --json carries escapes: %q", r.Stderr)
	input := `{"text": "red \u001b[31mtext\u001b[0m\r\n"}` + "\n"
	r = run(t, input, "call", "ok", "--input", "-", "--", bin)
	require.Falsef(t, r.Status != 0 || r.Stdout != "red \x1b[31mtext\x1b[0m\r\n", "raw text: status %d, stdout %q", r.Status, r.Stdout)
	r = run(t, input, "call", "ok", "--input", "-", "--escape", "--", bin)
	require.Falsef(t, r.Status != 0 || r.Stdout != `red \x1b[31mtext\x1b[0m\r`+"\n", "--escape: status %d, stdout %q", r.Status, r.Stdout)
}

// TestKilledHostLeavesNoTree SIGKILLs a skulk-host whose child never reads
// its control connection (it would never see the host go) and runs a
// grandchild that left its process group and session: within 2 s no
// process of that tree is alive. The kill comes after skulk-host's health
// checks (1 s) looked at the child's tree, and again as soon as the
// grandchild called setsid, before any health check could see it.
//
// It runs alone (not t.Parallel): its 2 s bound is for a loaded machine,
// not for one that also runs other tests' commands.
func TestKilledHostLeavesNoTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration // from the grandchild's pid file to the kill
	}{
		{"after health checks", 2500 * time.Millisecond},
		{"right after setsid", 0},
	} {
		t.Run(tc.name, func(t *testing.T) { killHostTree(t, tc.wait) })
	}
}

// killHostTree runs TestKilledHostLeavesNoTree's case: it SIGKILLs
// skulk-host wait after the grandchild wrote its pid file (which it does
// right after its setsid).
func killHostTree(t *testing.T, wait time.Duration) {
	bin := fakeChild(t)
	pids := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostBin, "call", "ok", "--input", "-", "--env", "FAKECHILD_PIDS="+pids, "--", bin, "ignorefd3")
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // held open: the call lasts until the kill
	require.NoError(t, err)
	defer stdin.Close()
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	defer reap()
	var grandchild int
	for deadline := time.Now().Add(30 * time.Second); grandchild == 0; {
		entries, _ := os.ReadDir(pids)
		for _, e := range entries {
			if rest, ok := strings.CutPrefix(e.Name(), "grandchild-"); ok && !strings.HasSuffix(rest, ".tmp") {
				grandchild, _ = strconv.Atoi(rest)
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("no grandchild; skulk-host said %q", stderr.String()))
		}
		time.Sleep(2 * time.Millisecond)
	}
	seen := time.Now()
	time.Sleep(wait)
	tree := append(testnet.Children(cmd.Process.Pid), grandchild) // the child, the grandchild (and the host's guardian)
	require.Falsef(t, len(tree) < 2, "tree %v: want the child and the grandchild", tree)
	for _, pid := range tree {
		require.Truef(t, running(pid), "%d of %v not running before the kill", pid, tree)
	}
	killed := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	reap()
	for {
		var left []int
		for _, pid := range tree {
			if running(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			t.Logf("killed %v after the grandchild's pid file was seen; tree %v gone %v after the kill", killed.Sub(seen), tree, time.Since(killed))
			return
		}
		// The bound. The guardian's shell scans /proc to stop
		// the tree, once more to see nothing new, then kills it: gone
		// 100 to 300 ms after the kill, 0.7 s at worst seen under -race
		// on a loaded 2-core machine.
		if time.Since(killed) > 2*time.Second {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			require.FailNow(t, fmt.Sprintf("alive 2 s after skulk-host was killed: %v of %v", left, tree))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat returns a process's state and parent from /proc/PID/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// TestInputToAFailingChild streams --input to a child that dies, stops
// reading or breaks the protocol while the input streams: skulk-host exits
// with the status of how the call ended (docs/cli.md: 12 unreachable, 14
// timeout, 15 invalid_frame), and prints no socket error.
func TestInputToAFailingChild(t *testing.T) {
	t.Parallel()
	bin := fakeChild(t)
	// 512 lines of 32 KiB: 16 MiB, more than the socket buffers hold.
	line := `{"text": "` + strings.Repeat("x", 32<<10) + `"}` + "\n"
	input := strings.Repeat(line, 512)
	for _, tc := range []struct {
		tool   string
		args   []string
		status int
	}{
		{"inputdie", nil, 12},
		{"hang", []string{"--timeout", "1s"}, 14},
		{"inputgarbage", nil, 15},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			args := append(append([]string{"call", tc.tool, "--input", "-"}, tc.args...), "--", bin)
			r := run(t, input, args...)
			assert.Falsef(t, r.Status != tc.status, "exit status %d, want %d; stderr %q", r.Status, tc.status, r.Stderr)
			for _, raw := range []string{"broken pipe", "closed network connection", "connection reset"} {
				assert.Falsef(t, strings.Contains(r.Stderr, raw), "a socket error reached the user: %q", r.Stderr)
			}
		})
	}
}

// TestProviderTextEscapedOnTerminal sends provider text that writes the
// clipboard (OSC 52), sets the window title (OSC 0), clears the screen
// (CSI 2J), overwrites its line with a fake success after a carriage
// return, and carries a C1 CSI and a right-to-left override, to a
// skulk-host whose standard output is a real pseudo-terminal: by default
// none of it reaches the terminal as anything but visible text; with
// --raw the bytes arrive as they were sent.
func TestProviderTextEscapedOnTerminal(t *testing.T) {
	t.Parallel()
	bin := fakeChild(t)
	const text = "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2Jreal output\r\x1b[1;32mFAKE: completed OK \u009b\u202eevil\n"
	input, err := json.Marshal(map[string]string{"text": text})
	require.NoError(t, err)
	screen := func(t *testing.T, extra ...string) string {
		t.Helper()
		master, slave := openPTY(t)
		defer master.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args := append(append([]string{"call", "ok", "--input", "-"}, extra...), "--", bin)
		cmd := exec.CommandContext(ctx, hostBin, args...)
		cmd.WaitDelay = 5 * time.Second
		cmd.Stdin = bytes.NewReader(append(input, '\n'))
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = slave, &stderr
		require.NoError(t, cmd.Start())
		slave.Close()
		read := readTerminal(master)
		if err := cmd.Wait(); err != nil {
			require.FailNow(t, fmt.Sprintf("call ok: %v; stderr %q", err, stderr.String()))
		}
		return awaitTerminal(ctx, t, read)
	}
	t.Run("default", func(t *testing.T) {
		got := screen(t)
		shown := strings.ReplaceAll(got, "\r\n", "\n") // the terminal's own line ending
		for i, r := range shown {
			require.Falsef(t, r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e, "control character %U at %d reached the terminal: %q", r, i, got)
		}
		want := `\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2Jreal output\r\x1b[1;32mFAKE: completed OK \u009b\u202eevil` + "\n"
		require.Falsef(t, shown != want, "terminal shows %q, want %q", shown, want)
	})
	t.Run("raw", func(t *testing.T) {
		got := screen(t, "--raw")
		require.Truef(t, strings.Contains(got, "\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2Jreal output\r\x1b[1;32m"), "--raw did not keep the provider's bytes: %q", got)
	})
}

// TestMemoryMaxFlag: a child that allocates past --memory-max is killed;
// the call ends unreachable (status 12) with a status line that says the
// memory limit was reached. A size that does not parse is a usage error.
func TestMemoryMaxFlag(t *testing.T) {
	t.Parallel()
	bin := fakeChild(t)
	r := run(t, "", "call", "hog", "--memory-max", "64M", "--", bin)
	if r.Status == 3 && strings.Contains(r.Stderr, "limit unavailable") {
		t.Skipf("the memory limit cannot be enforced here: %s", r.Stderr)
	}
	require.Falsef(t, r.Status != 12 || !strings.Contains(r.Stderr, "memory limit"), "status %d, stderr:\n%s", r.Status, r.Stderr)
	r = run(t, "", "call", "hog", "--memory-max", "lots", "--", bin)
	require.Falsef(t, r.Status != 2 || !strings.Contains(r.Stderr, "memory-max") || strings.Contains(r.Stderr, "lots"), "a bad size: status %d, stderr:\n%s", r.Status, r.Stderr)
}
