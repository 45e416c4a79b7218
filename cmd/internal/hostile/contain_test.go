package hostile_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// The containment promises (docs/operations.md, "Containment"): whatever
// a child starts, however it hides, nothing of it outlives the child or
// the host; its limits hold; a child run as another user cannot touch
// the host. These run on the machine's cgroup layout and skip, saying
// why, only where the host cannot make cgroups.

// needCgroups skips t where the host h cannot give its children cgroups.
func needCgroups(t *testing.T, h *host.Host) {
	t.Helper()
	if s := h.Stats(); !s.Cgroups {
		t.Skipf("no cgroup per child on this machine: %s", s.CgroupsUnavailable)
	}
}

// callResult calls tool with no input and returns its terminal.
func callResult(t *testing.T, h *host.Host, tool string, limit time.Duration) frame.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := h.Call(ctx, tool, nil)
	require.NoError(t, err)
	return terminal(t, c, limit)
}

// pidFile reads the pids a tool appended to FAKECHILD_PIDS/name.
func pidFile(t *testing.T, dir, name string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, n)
	}
	return pids
}

// daemons returns the pids the daemons wrote to dir.
func daemons(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), "daemon-"); ok && !strings.HasSuffix(rest, ".tmp") {
			if pid, err := strconv.Atoi(rest); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestDaemonThatClosesItsDescriptors: a child that daemonizes mid-call,
// after health checks ran (a double fork, setsid, every descriptor of its
// parent closed: nothing of the child's left to find it by), loses the
// daemon when the child stops.
func TestDaemonThatClosesItsDescriptors(t *testing.T) {
	pids := t.TempDir()
	h := startHost(t, config(t, "serve", pids))
	needCgroups(t, h)
	time.Sleep(300 * time.Millisecond) // a few health checks
	term := callResult(t, h, "daemon", 20*time.Second)
	require.Equal(t, frame.KindCompleted, term.Kind, "terminal %v", term.Error)
	d := daemons(t, pids)
	require.Len(t, d, 1)
	require.True(t, alive(d[0]), "the daemon is not running")
	require.NoError(t, h.Close(context.Background()))
	waitGone(t, d, 2*time.Second)
}

// TestSwarmOfOrphans: 200 setsid grandchildren whose parent exits before
// any health check looks at the child's tree die with the child.
func TestSwarmOfOrphans(t *testing.T) {
	pids := t.TempDir()
	h := startHost(t, config(t, "serve", pids))
	needCgroups(t, h)
	term := callResult(t, h, "swarm", 60*time.Second)
	require.Equal(t, frame.KindCompleted, term.Kind, "terminal %v", term.Error)
	swarm := pidFile(t, pids, "swarm")
	require.Len(t, swarm, 200)
	running := 0
	for _, pid := range swarm {
		if alive(pid) {
			running++
		}
	}
	require.Equal(t, 200, running, "grandchildren running before the stop")
	require.NoError(t, h.Close(context.Background()))
	waitGone(t, swarm, 2*time.Second)
}

// TestMemoryLimit: a child that allocates past MemoryMax is killed by the
// kernel; its call fails with a synthetic unreachable that says the
// memory limit was reached, its death's cause matches ErrMemoryLimit, the
// host stays up and the restarted child takes calls.
func TestMemoryLimit(t *testing.T) {
	cfg := config(t, "serve", t.TempDir())
	cfg.MemoryMax = 64 << 20
	h := startMaybeLimited(t, cfg)
	first := h.Children()[0].PID
	term := callResult(t, h, "hog", 60*time.Second)
	require.Equal(t, frame.KindFailed, term.Kind, "the hog completed: the limit did not hold")
	require.True(t, term.Synthetic)
	require.Equal(t, frame.CodeUnreachable, term.Error.Code)
	assert.Contains(t, term.Error.Message, "memory limit")
	var info host.ChildInfo
	for deadline := time.Now().Add(20 * time.Second); ; {
		info = h.Children()[0]
		if info.State == "ready" && info.PID != first {
			break
		}
		require.False(t, time.Now().After(deadline), "no restart: %+v", info)
		time.Sleep(5 * time.Millisecond)
	}
	assert.ErrorIs(t, info.LastCause, host.ErrMemoryLimit)
	assert.ErrorIs(t, info.LastCause, host.ErrChildDied)
	works(t, h)
}

// TestPidsLimit: a fork loop stops at PidsMax (a fork past it fails), and
// once the loop's processes are gone (the tool kills them before it
// answers, and the host reaps the ones it adopted) the child and the host
// serve the next call, and the host holds no zombie of them.
func TestPidsLimit(t *testing.T) {
	const limit = 48
	cfg := config(t, "serve", t.TempDir())
	cfg.PidsMax = limit
	h := startMaybeLimited(t, cfg)
	term := callResult(t, h, "forkloop", 60*time.Second)
	require.Equal(t, frame.KindCompleted, term.Kind, "terminal %v", term.Error)
	var v struct{ N int }
	require.NoError(t, term.Payload.Decode(&v))
	t.Logf("the fork loop started %d processes under pids.max %d", v.N, limit)
	assert.Greater(t, v.N, 0)
	assert.Less(t, v.N, limit, "more processes than the limit")
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		z := zombiesIn(0) // the fork loop's, or a leak of another test's
		if len(z) == 0 {
			break
		}
		require.Falsef(t, time.Since(start) > adoptedReapBound, "%d zombies of the fork loop still the host's: %v", len(z), z)
	}
	works(t, h)
}

// TestLimitUnavailable: a limit that cannot be had fails Start with
// ErrLimitUnavailable, naming the limit; nothing is left behind.
func TestLimitUnavailable(t *testing.T) {
	cfg := config(t, "serve", t.TempDir())
	cfg.NoCgroups = true
	cfg.PidsMax = 10
	_, err := host.Start(context.Background(), cfg)
	require.ErrorIs(t, err, host.ErrConfig)
	cfg.NoCgroups = false
	cfg.PidsMax = 0
	cfg.MemoryMax = -1
	_, err = host.Start(context.Background(), cfg)
	require.ErrorIs(t, err, host.ErrConfig)
}

// startMaybeLimited starts a host with a limit, skipping t where the
// machine cannot enforce it (no cgroups, or not that controller).
func startMaybeLimited(t *testing.T, cfg host.Config) *host.Host {
	t.Helper()
	probe := cfg
	probe.TempDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := host.Start(ctx, probe)
	if errors.Is(err, host.ErrLimitUnavailable) {
		t.Skipf("the limit cannot be enforced here: %v", err)
	}
	require.NoError(t, err)
	require.NoError(t, h.Close(context.Background()))
	return startHost(t, cfg)
}

// TestRunAsCannotTouchTheHost: a child run as nobody with no_new_privs
// can neither signal nor ptrace the host; the same child run as the
// host's user can signal it (the check is real).
func TestRunAsCannotTouchTheHost(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running a child as another user needs root")
	}
	type attack struct {
		UID, GID, NNP int
		Kill, Ptrace  string
	}
	run := func(cfg host.Config) attack {
		h := startHost(t, cfg)
		term := callResult(t, h, "attackhost", 20*time.Second)
		require.Equal(t, frame.KindCompleted, term.Kind, "terminal %v", term.Error)
		var a attack
		require.NoError(t, term.Payload.Decode(&a))
		require.NoError(t, h.Close(context.Background()))
		return a
	}
	a := run(config(t, "serve", t.TempDir()))
	require.Empty(t, a.Kill, "the host's own user cannot signal it: the check proves nothing")

	cfg := config(t, "serve", t.TempDir())
	cfg.User, cfg.Group, cfg.NoNewPrivs = "nobody", "nogroup", true
	a = run(cfg)
	t.Logf("as nobody: %+v", a)
	assert.Equal(t, 65534, a.UID)
	assert.Equal(t, 65534, a.GID)
	assert.Equal(t, 1, a.NNP, "no_new_privs not set")
	assert.Equal(t, syscall.EPERM.Error(), a.Kill)
	assert.Equal(t, syscall.EPERM.Error(), a.Ptrace)
}

// testHostModeEnv selects what runTestHost does: "inflight" is
// runInFlightHost.
const testHostModeEnv = "HOSTILE_TEST_HOST_MODE"

// runInFlightHost is this test binary as a host with 100 calls in flight,
// each starting a setsid sleep, for TestHostKilledWithCallsInFlight. It
// prints "ready" and its cgroup directory's name prefix once some of the
// sleeps run, and waits to be killed.
func runInFlightHost(dir string) int {
	cfg := host.Config{
		Command: os.Getenv("HOSTILE_BIN"), Args: []string{"serve"}, PoolSize: 2,
		ExtraEnv: []string{"FAKECHILD_PIDS=" + dir}, TempDir: dir,
		HealthInterval: 50 * time.Millisecond, HealthTimeout: time.Minute,
	}
	h, err := host.Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test host:", err)
		return 1
	}
	if s := h.Stats(); !s.Cgroups {
		fmt.Printf("skip %s\n", s.CgroupsUnavailable)
		select {}
	}
	for range 100 {
		go func() { // ended by SIGKILL
			c, err := h.Call(context.Background(), "spawn", nil)
			if err == nil {
				c.Wait()
			}
		}()
	}
	for deadline := time.Now().Add(170 * time.Millisecond); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("ready %d %d\n", h.Children()[0].PID, h.Children()[1].PID)
	select {} // until SIGKILL
}

// TestHostKilledWithCallsInFlight: a host SIGKILLed 170 ms after it
// started 100 calls, each of which starts a setsid sleep, leaves nothing
// within 2 s: not its children, not one sleep, not its cgroups.
func TestHostKilledWithCallsInFlight(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testHostEnv+"="+dir, testHostModeEnv+"=inflight")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var once sync.Once
	reap := func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	defer reap()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	if reason, ok := strings.CutPrefix(line, "skip "); ok {
		t.Skipf("no cgroup per child on this machine: %s", strings.TrimSpace(reason))
	}
	f := strings.Fields(line)
	require.Len(t, f, 3, "the test host said %q", line)
	var tree []int
	for _, s := range f[1:] {
		pid, err := strconv.Atoi(s)
		require.NoError(t, err)
		tree = append(tree, pid)
	}
	hostCgroups := setDirs(t, cmd.Process.Pid)
	require.NotEmpty(t, hostCgroups, "the host made no cgroup")
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	reap()
	// What ran at the kill; a sleep whose shell was killed before it
	// wrote its pid is in the cgroup all the same, and the cgroup must go.
	var spawned []int
	if _, err := os.Stat(filepath.Join(dir, "spawn")); err == nil {
		spawned = pidFile(t, dir, "spawn")
	}
	t.Logf("host %d killed with %d sleeps recorded", cmd.Process.Pid, len(spawned))
	waitGone(t, append(tree, spawned...), 2*time.Second)
	for deadline := killed.Add(2 * time.Second); ; {
		left := 0
		for _, d := range hostCgroups {
			if _, err := os.Stat(d); err == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the host's cgroups are still there 2 s after the kill: %v", hostCgroups)
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("everything gone %v after the kill", time.Since(killed))
}

// setDirs finds the cgroup directories of the host process pid: those
// named skulk-PID-* in every cgroup hierarchy's directory of this
// process.
func setDirs(t *testing.T, pid int) []string {
	t.Helper()
	var dirs []string
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[4], "/sys/fs/cgroup") {
			continue
		}
		filepath.WalkDir(f[4], func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), "skulk-"+strconv.Itoa(pid)+"-") {
				dirs = append(dirs, path)
				return filepath.SkipDir
			}
			if strings.Count(strings.TrimPrefix(path, f[4]), "/") >= 3 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return dirs
}

// TestWithoutCgroups: with Config.NoCgroups (what a machine without
// cgroups gets) the host says why in Stats, and a setsid grandchild still
// dies with its child, whether the child exits or is stopped at Close.
func TestWithoutCgroups(t *testing.T) {
	for _, tool := range []string{"escapedie", "escape"} {
		t.Run(tool, func(t *testing.T) {
			pids := t.TempDir()
			cfg := config(t, "serve", pids)
			cfg.NoCgroups = true
			h := startHost(t, cfg)
			s := h.Stats()
			require.False(t, s.Cgroups)
			require.NotEmpty(t, s.CgroupsUnavailable)
			c, err := h.Call(context.Background(), tool, nil, host.WithInput())
			require.NoError(t, err)
			if tool == "escape" {
				c.CloseSend()
			}
			terminal(t, c, 20*time.Second)
			gc := grandchildren(t, pids)
			require.Len(t, gc, 1)
			if tool == "escape" {
				require.NoError(t, h.Close(context.Background()))
			}
			waitGone(t, gc, 2*time.Second)
		})
	}
}

// runUnprivilegedHost is this test binary, run as nobody, as a host for
// TestUnprivilegedHostFallsBack: it starts a host, makes a call, and
// prints what Stats says of cgroups; then it asks for a pids limit and
// prints whether Start refused it with ErrLimitUnavailable.
func runUnprivilegedHost(dir string) int {
	var logs strings.Builder
	cfg := host.Config{
		Command: os.Getenv("HOSTILE_BIN"), Args: []string{"serve"}, TempDir: dir,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{b: &logs}, nil)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	c, err := h.Call(ctx, "attackhost", nil)
	if err == nil {
		_, err = c.Wait()
	}
	s := h.Stats()
	h.Close(context.Background())
	fmt.Printf("call %v\ncgroups %v\nwhy %s\nwarnings %d\n", err, s.Cgroups, s.CgroupsUnavailable,
		strings.Count(logs.String(), "children run without cgroups of their own"))
	cfg.PidsMax, cfg.Logger = 16, nil
	_, err = host.Start(ctx, cfg)
	fmt.Printf("limit refused %v\n", errors.Is(err, host.ErrLimitUnavailable))
	return 0
}

// syncWriter serializes writes to b.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestUnprivilegedHostFallsBack: a host that may not create cgroups (run
// as nobody, with no delegated subtree) says why once in its log and in
// Stats, still runs its children (contained without cgroups), and refuses
// a limit with ErrLimitUnavailable.
func TestUnprivilegedHostFallsBack(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running the host as another user needs root")
	}
	// The test binary, where nobody may run it, and a TempDir of nobody's.
	bin := filepath.Join(filepath.Dir(fakeBin), "hostile.test")
	src, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, src, 0o755))
	defer os.Remove(bin)
	dir, err := os.MkdirTemp("", "sk")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chown(dir, 65534, 65534))
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), testHostEnv+"="+dir, testHostModeEnv+"=unprivileged")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("the unprivileged host said:\n%s", out)
	require.NoError(t, err)
	got := string(out)
	if strings.Contains(got, "cgroups true") {
		t.Skip("nobody may create cgroups here (a delegated subtree)")
	}
	assert.Contains(t, got, "call <nil>\n")
	assert.Contains(t, got, "cgroups false\n")
	assert.Regexp(t, `why \S+`, got)
	assert.Contains(t, got, "warnings 1\n")
	assert.Contains(t, got, "limit refused true\n")
}
