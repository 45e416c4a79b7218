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
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
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
	fds := countFDs(t)
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
		h.Close(ctx)
		if err := h.Close(ctx); err != nil {
			t.Logf("Close: %v", err)
		}
		checkClean(t, base, fds)
		goleak.VerifyNone(t)
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
	if kids := childProcesses(t); len(kids) > 0 {
		assert.Fail(t, fmt.Sprintf("child processes left: %v", kids))
	}
	entries, err := os.ReadDir(base)
	assert.NoError(t, err, "reading the temp dir")
	for _, e := range entries {
		assert.Fail(t, fmt.Sprintf("left in the temp dir: %s", e.Name()))
	}
	// Descriptors are closed synchronously by Close; allow the runtime a
	// moment for nothing: the count must be back at once.
	if n := countFDs(t); n != fds {
		assert.Fail(t, fmt.Sprintf("descriptors: %d before, %d after", fds, n))
	}
}

// childProcesses lists processes (zombies included) whose parent is us.
func childProcesses(t *testing.T) []string {
	t.Helper()
	me := strconv.Itoa(os.Getpid())
	procs, err := os.ReadDir("/proc")
	require.NoError(t, err)
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
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(fds)
}

// callCtx is the context for one call in a test.
func callCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
