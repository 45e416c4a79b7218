package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
	"go.uber.org/goleak"
)

// childBin is the real cmd/skulk-child and fakeBin internal/fakechild, the
// fake child, both built once by TestMain.
var childBin, fakeBin string

func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(testHostEnv); ok {
		os.Exit(runTestHost(dir))
	}
	dir, err := os.MkdirTemp("", "skulk-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	childBin, err = testnet.Build(dir, "github.com/skulkrt/skulk/cmd/skulk-child")
	if err == nil {
		fakeBin, err = testnet.Build(dir, "github.com/skulkrt/skulk/internal/fakechild")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	os.Setenv("SKULK_TEST_CHILD", childBin) // for the Examples
	// Warm up the network poller so that its descriptors are not counted as
	// leaks by the first test.
	if ln, err := net.Listen("unix", filepath.Join(dir, "warm.sock")); err == nil {
		ln.Close()
	}
	goleak.VerifyTestMain(&checkedRun{m: m, fds: openFDs()}, testnet.CleanupAndExit(func() { os.RemoveAll(dir) }))
}

// checkedRun runs the package's tests and then checks what the
// side-by-side tests (sideBySide) may have left in the process as a whole,
// which each of them cannot check while the others run: child processes
// (zombies included) and open descriptors, against the count before the
// first test. Goroutines are goleak.VerifyTestMain's to check, after Run.
type checkedRun struct {
	m   *testing.M
	fds int
}

func (r *checkedRun) Run() int {
	code := r.m.Run()
	if code != 0 || !anySideBySide() {
		return code
	}
	// This covers everything m.Run ran, the examples included; the
	// side-by-side tests are checked for the whole process here only,
	// most other tests each by testHost as well.
	if kids := childProcessList(); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: after the tests and examples (the side-by-side tests are checked here only): child processes left: %v\n", kids)
		code = 1
	}
	if n := openFDs(); r.fds < 0 || n != r.fds {
		fmt.Fprintf(os.Stderr, "FAIL: after the tests and examples (the side-by-side tests are checked here only): descriptors: %d before, %d after (-1: /proc/self/fd unreadable)\n", r.fds, n)
		code = 1
	}
	return code
}

// sideBySide runs the test t beside the package's other side-by-side
// tests, once every other test has ended (t.Parallel): for tests that
// spend seconds waiting on health intervals, deadlines and grace periods
// while using little CPU, and that neither stop the test process nor
// measure its memory. testHost cannot check such a test's host for
// process-wide leaks while other hosts run, so it checks what is the
// host's own (its private directory, its children's state) and
// checkedRun checks the process once they have all ended: a leak then
// fails the package, and the test that left it is found by running each
// side-by-side test alone (-run '^TestName$').
func sideBySide(t *testing.T) {
	t.Helper()
	sideBySideTests.Store(t.Name(), true)
	t.Parallel()
}

// sideBySideTests holds the names of the top-level tests that called
// sideBySide.
var sideBySideTests sync.Map

// anySideBySide says whether a test called sideBySide.
func anySideBySide() bool {
	found := false
	sideBySideTests.Range(func(_, _ any) bool {
		found = true
		return false
	})
	return found
}

// runsSideBySide says whether t, or the top-level test it is a subtest
// of, runs side by side.
func runsSideBySide(t *testing.T) bool {
	top, _, _ := strings.Cut(t.Name(), "/")
	_, ok := sideBySideTests.Load(top)
	return ok
}

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// realConfig runs the real child with its test tools.
func realConfig() Config {
	return Config{Command: childBin, Args: []string{"--test-tools"}}
}

// fakeConfig runs the fake child (internal/fakechild) in mode; its package
// doc lists the modes and the tools.
func fakeConfig(mode string) Config {
	return Config{Command: fakeBin, Args: []string{mode}}
}

// The fake child's environment: fakeInvokesEnv names a file it appends
// "call_id tool_id tree parent" to for every invoke it reads,
// fakeEnvOutEnv a file it writes its whole environment to as it starts.
const (
	fakeInvokesEnv = "FAKECHILD_INVOKES"
	fakeEnvOutEnv  = "FAKECHILD_ENVOUT"
)

// fastHealth makes health checks quick, with margins that hold on a loaded
// machine under -race.
func fastHealth(c Config) Config {
	c.HealthInterval = 100 * time.Millisecond
	c.HealthTimeout = 2500 * time.Millisecond
	c.KillGrace = 500 * time.Millisecond
	c.Restart.BackoffMin = 10 * time.Millisecond
	c.Restart.BackoffMax = 50 * time.Millisecond
	return c
}

// testHost starts a host for t and registers its Close and the checks that
// nothing is left behind: no child process (zombies included), no socket
// file or private directory, no descriptor of ours. The test as a whole
// must end within limit.
func testHost(t *testing.T, cfg Config, limit time.Duration) (*Host, *syncBuffer) {
	t.Helper()
	watchdog := time.AfterFunc(limit, func() {
		panic(fmt.Sprintf("%s: exceeded its hard deadline of %v", t.Name(), limit))
	})
	base, err := os.MkdirTemp("", "sk")
	require.NoError(t, err)
	logs := &syncBuffer{}
	cfg.TempDir = base
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	shared := runsSideBySide(t)
	var fds int
	if !shared {
		fds = countFDs(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(base)
		watchdog.Stop()
		require.FailNow(t, fmt.Sprintf("Start: %v", err))
	}
	t.Cleanup(func() {
		defer watchdog.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var pids []int
		for _, c := range h.Children() {
			pids = append(pids, c.PID)
		}
		h.Close(ctx)
		if err := h.Close(ctx); err != nil {
			t.Logf("Close: %v", err)
		}
		if shared {
			checkOwn(t, pids, base)
		} else {
			checkClean(t, base, fds)
			goleak.VerifyNone(t)
		}
		if t.Failed() {
			t.Logf("host log:\n%s", logs.String())
		}
		os.RemoveAll(base)
	})
	return h, logs
}

// checkClean asserts that no child process, socket or descriptor is left.
func checkClean(t *testing.T, base string, fds int) {
	t.Helper()
	if kids := childProcessList(); len(kids) > 0 {
		assert.Fail(t, fmt.Sprintf("child processes left: %v", kids))
	}
	checkTempDir(t, base)
	// Descriptors are closed synchronously by Close; allow the runtime a
	// moment for nothing: the count must be back at once.
	if n := countFDs(t); n != fds {
		assert.Fail(t, fmt.Sprintf("descriptors: %d before, %d after", fds, n))
	}
}

// checkOwn asserts what a side-by-side test's closed host leaves of its
// own: nothing in its private directory base, and none of pids, its
// children as Close began, still a child of this process (running or a
// zombie). The process-wide checks wait for checkedRun.
func checkOwn(t *testing.T, pids []int, base string) {
	t.Helper()
	left := map[string]bool{}
	for _, kid := range childProcessList() {
		pid, _, _ := strings.Cut(kid, " ")
		left[pid] = true
	}
	for _, pid := range pids {
		if pid > 0 && left[strconv.Itoa(pid)] {
			assert.Fail(t, fmt.Sprintf("the host's child %d left after Close", pid))
		}
	}
	checkTempDir(t, base)
}

// checkTempDir asserts that the host's private directory base is empty.
func checkTempDir(t *testing.T, base string) {
	t.Helper()
	entries, err := os.ReadDir(base)
	assert.NoError(t, err, "reading the temp dir")
	for _, e := range entries {
		assert.Fail(t, fmt.Sprintf("left in the temp dir: %s", e.Name()))
	}
}

// childProcessList lists processes (zombies included) whose parent is us,
// "pid state S" each; a one-entry list naming the error if /proc cannot
// be read.
func childProcessList() []string {
	me := strconv.Itoa(os.Getpid())
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"/proc unreadable: " + err.Error()}
	}
	var kids []string
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[1] == me {
			kids = append(kids, p.Name()+" state "+f[0])
		}
	}
	return kids
}

func countFDs(t *testing.T) int {
	t.Helper()
	n := openFDs()
	require.GreaterOrEqual(t, n, 0, "reading /proc/self/fd")
	return n
}

// openFDs counts this process's open descriptors; -1 if it cannot.
func openFDs() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}

// callCtx is the context for one call in a test.
func callCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
