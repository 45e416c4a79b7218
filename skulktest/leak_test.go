package skulktest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/skulktest"
)

// leakEnv selects, in this test binary re-run by TestLeakChecksFail, what
// TestLeakyHelper leaves behind.
const leakEnv = "SKULKTEST_TEST_LEAK"

// TestLeakChecksFail runs TestLeakyHelper in a subprocess once per kind of
// leak: each run must fail, naming what it left behind; a run that leaks
// nothing must pass.
func TestLeakChecksFail(t *testing.T) {
	for _, tc := range []struct{ leak, want string }{
		{"none", ""},
		{"goroutine", "goroutines left behind"},
		{"fd", "descriptor"},
		{"process", "child process"},
		{"socket", "leak.sock left behind"},
		{"provider", "goroutines left behind"}, // a handler's, through StartProvider
	} {
		t.Run(tc.leak, func(t *testing.T) {
			// Each case is a process of its own: they run side by side,
			// since a case that leaks waits out the checks' settle time
			// (5 s) before it fails.
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLeakyHelper$", "-test.v")
			cmd.Env = append(os.Environ(), leakEnv+"="+tc.leak)
			out, err := cmd.CombinedOutput()
			if tc.want == "" {
				require.NoErrorf(t, err, "a clean run failed: %v\n%s", err, out)
				return
			}
			require.Falsef(t, err == nil, "a run that leaks a %s passed:\n%s", tc.leak, out)
			require.Falsef(t, !strings.Contains(string(out), tc.want), "the failure does not say %q:\n%s", tc.want, out)
			// The failure points at the line of this file that started
			// the host, not at skulktest's own.
			at := regexp.MustCompile(`(?m)^\s+(\w+\.go):\d+: skulktest: `).FindAllStringSubmatch(string(out), -1)
			require.NotEqualValuesf(t, 0, len(at), "no failure line of skulktest's:\n%s", out)
			for _, m := range at {
				if m[1] != "leak_test.go" {
					require.FailNow(t, fmt.Sprintf("a failure points at %s, not at the test:\n%s", m[1], out))
				}
			}
			if tc.leak == "process" {
				m := regexp.MustCompile(`leaked process (\d+)`).FindStringSubmatch(string(out))
				require.Falsef(t, m == nil, "the run did not say which process it leaked:\n%s", out)
				pid, _ := strconv.Atoi(m[1])
				// Its parent has exited: a process the check killed is
				// gone once init reaped it; one it left runs on.
				deadline := time.Now().Add(5 * time.Second)
				for processExists(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						require.FailNow(t, fmt.Sprintf("the leaked process %d was left running", pid))
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// TestLeakyHelper is run by TestLeakChecksFail: it starts a host and leaves
// something behind. Each leak but the process is undone by a cleanup
// registered before StartHost (StartProvider for "provider"), which runs
// after its checks, so that the subprocess fails only because the checks
// caught it; the process is the checks' to kill.
func TestLeakyHelper(t *testing.T) {
	leak := os.Getenv(leakEnv)
	if leak == "" {
		t.Skip("run by TestLeakChecksFail")
	}
	cfg := skulktest.Child(t)
	dir, err := os.MkdirTemp("", "skl")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.TempDir = dir
	stop := make(chan struct{})
	var undo []func()
	t.Cleanup(func() {
		for _, f := range undo {
			f()
		}
	})
	if leak == "provider" {
		// A handler served in the test process leaves a goroutine.
		opts := child.Options{Tools: []child.Tool{{
			ID: "leak",
			Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
				go func() { <-stop }() // stopped by the undo below, after the checks
				return frame.MustPayload(map[string]any{}), nil
			},
		}}}
		h := skulktest.StartProvider(t, opts, host.Config{TempDir: dir})
		undo = append(undo, func() { close(stop) })
		c, err := h.Call(t.Context(), "leak", nil)
		require.NoError(t, err)
		if o := skulktest.Collect(t, c); o.Err != nil {
			require.FailNow(t, fmt.Sprint(o.Err))
		}
		return
	}
	skulktest.StartHost(t, cfg)
	switch leak {
	case "goroutine":
		go func() { <-stop }() // stopped by the undo below, after the checks
		undo = append(undo, func() { close(stop) })
	case "fd":
		f, err := os.Open(os.DevNull)
		require.NoError(t, err)
		undo = append(undo, func() { f.Close() })
	case "process":
		// Not undone: the check must kill it (TestLeakChecksFail looks).
		cmd := exec.Command("sleep", "30")
		require.NoError(t, cmd.Start())
		t.Logf("leaked process %d", cmd.Process.Pid)
	case "socket":
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "leak.sock"), Net: "unix"})
		require.NoError(t, err)
		ln.SetUnlinkOnClose(false)
		ln.Close()
	}
}

// processExists says whether pid is a process that has not exited (a
// zombie has).
func processExists(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
