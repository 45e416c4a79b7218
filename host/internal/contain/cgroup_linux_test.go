//go:build linux

package contain

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// newSet makes a Set for t and closes it at the end; it skips t, saying
// why, where the machine cannot give children cgroups, or cannot enforce
// opts' limits.
func newSet(t *testing.T, opts Options) *Set {
	t.Helper()
	s, err := New(opts, slog.New(slog.DiscardHandler))
	if errors.Is(err, ErrLimitUnavailable) {
		t.Skipf("limit unavailable here: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Close()
		if s.cg != nil {
			for _, d := range s.cg.dirs() {
				assert.NoDirExists(t, d, "the Set's cgroup outlived Close")
			}
		}
	})
	if !s.Status().Cgroups {
		t.Skipf("no cgroup per child here: %s", s.Status().Unavailable)
	}
	return s
}

// startIn starts sh -c script through s as name and returns the child.
func startIn(t *testing.T, s *Set, name, script string) (*exec.Cmd, *Child) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	cmd.Stdout = out
	t.Cleanup(func() { out.Close() })
	ch, err := s.Start(cmd, name, nil)
	require.NoError(t, err)
	return cmd, ch
}

// TestChildCgroup: a child starts in a cgroup of its own (it reads so from
// its own /proc/self/cgroup, first thing), and once it is reaped, Sweep
// kills and reaps everything it left, whatever left its tree, group and
// session; Release removes the cgroup.
func TestChildCgroup(t *testing.T) {
	s := newSet(t, Options{})
	dir := t.TempDir()
	script := fmt.Sprintf(`cat /proc/self/cgroup > %s/cg
setsid sh -c 'sleep 600 & echo $! > %s/orphan; exec sleep 600' </dev/null >/dev/null 2>&1 &
while [ ! -s %s/orphan ]; do sleep 0.01; done`, dir, dir, dir)
	cmd, ch := startIn(t, s, "c0.1", script)
	require.NoError(t, cmd.Wait())
	b, err := os.ReadFile(filepath.Join(dir, "cg"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "0::"+ch.cg.v2Rel+"\n", "the child's first look at its cgroup")
	b, err = os.ReadFile(filepath.Join(dir, "orphan"))
	require.NoError(t, err)
	orphan, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	st, ok := readStat(orphan)
	require.True(t, ok && st.state != 'Z', "the orphan is not running")

	killed, left := ch.Sweep()
	assert.Equal(t, 0, left)
	assert.GreaterOrEqual(t, killed, 2, "the setsid shell and its sleep")
	_, ok = readStat(orphan)
	assert.False(t, ok, "the orphan is still there (alive or a zombie of ours)")
	assert.False(t, populated(ch.cg.v2))
	require.NoError(t, ch.Release())
	assert.NoDirExists(t, ch.cg.v2)
}

// TestLimitsJoinBeforeExec: with limits, the child is in every limit's
// cgroup before it runs (v1 controllers on a hybrid machine: the starter
// thread joined them for the fork), the limits are written, the pids
// limit is exact once the start is over, and the starter thread is back
// in the host's cgroups.
func TestLimitsJoinBeforeExec(t *testing.T) {
	lim := Limits{MemoryBytes: 256 << 20, Pids: 32, CPU: 1.5}
	s := newSet(t, Options{Limits: lim})
	t.Logf("layout %s", s.Status().Layout)
	dir := t.TempDir()
	cmd, ch := startIn(t, s, "c0.1", "cat /proc/self/cgroup > "+dir+"/cg")
	require.NoError(t, cmd.Wait())
	b, err := os.ReadFile(filepath.Join(dir, "cg"))
	require.NoError(t, err)
	seen := string(b)
	for ctl, d := range ch.cg.v1 {
		rel := strings.TrimPrefix(d, filepath.Dir(s.cg.v1[ctl]))
		assert.Regexp(t, `(?m)^\d+:[^:]*\b`+ctl+`\b[^:]*:.*`+regexpQuote(rel)+`$`, seen, "the child was not in its %s cgroup from the start", ctl)
	}
	read := func(d, f string) string {
		b, err := os.ReadFile(filepath.Join(d, f))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	if d, ok := ch.cg.v1[ctlPids]; ok {
		assert.Equal(t, "32", read(d, "pids.max"))
	}
	if d, ok := ch.cg.v1[ctlMemory]; ok {
		assert.Equal(t, strconv.Itoa(256<<20), read(d, "memory.limit_in_bytes"))
	}
	if d, ok := ch.cg.v1[ctlCPU]; ok {
		assert.Equal(t, "150000", read(d, "cpu.cfs_quota_us"))
		assert.Equal(t, "100000", read(d, "cpu.cfs_period_us"))
	}
	for _, ctl := range s.cg.v2Ctl {
		switch ctl {
		case ctlPids:
			assert.Equal(t, "32", read(ch.cg.v2, "pids.max"))
		case ctlMemory:
			assert.Equal(t, strconv.Itoa(256<<20), read(ch.cg.v2, "memory.max"))
		case ctlCPU:
			assert.Equal(t, "150000 100000", read(ch.cg.v2, "cpu.max"))
		}
	}
	// The starter thread went back: no task of this process is left in
	// the child's v1 cgroups.
	for _, d := range ch.cg.v1 {
		assert.Empty(t, strings.TrimSpace(read(d, "tasks")), "tasks left in %s", d)
	}
	ch.Sweep()
	require.NoError(t, ch.Release())
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(".", `\.`, "-", `\-`)
	return r.Replace(s)
}

// TestLimitErrors: limits without cgroups, and a limit whose controller
// is missing, fail New with a *LimitError naming the limit.
func TestLimitErrors(t *testing.T) {
	_, err := New(Options{NoCgroups: true, Limits: Limits{Pids: 5}}, slog.New(slog.DiscardHandler))
	var le *LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "pids", le.Limit)
	assert.ErrorIs(t, err, ErrLimitUnavailable)

	err = limitsNeed(Limits{CPU: 1}, "no cpu controller")
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "cpu", le.Limit)
	assert.NoError(t, limitsNeed(Limits{}, "anything"))
}

// TestLeftoversOfDeadHosts: a Set that starts kills and removes the
// cgroups of a host that is gone (its pid names no process with its start
// time, and nothing holds its lock), with what still ran in them; it
// leaves a dead-looking host's cgroups whose lock is held (a host in
// another pid namespace) and a live host's.
//
// The cgroups are made in a directory of the test's own: every host that
// starts, in any test process, sweeps the directory its Sets are made in,
// and one that took the dead host's cgroup first would have removed it
// before the test put its process there, or would still be removing it
// when this test's sweep, finding it locked, passed it by. The directory
// is named as a Set of this process is: other hosts pass it by while the
// test runs, and the next host's sweep removes it if the test process
// dies first.
func TestLeftoversOfDeadHosts(t *testing.T) {
	probe := newSet(t, Options{})
	self, _ := readStat(os.Getpid())
	parent := filepath.Join(filepath.Dir(probe.cg.v2), fmt.Sprintf("%s%d-%d-%08x", hostPrefix, self.pid, self.start, rand.Uint32()))
	require.NoError(t, os.Mkdir(parent, 0o755))
	t.Cleanup(func() { assert.NoError(t, os.Remove(parent), "the test's own directory") }) // after the cgroups in it

	// A process that is gone: its pid and start time name the dead host.
	gone := exec.Command("/bin/true")
	require.NoError(t, gone.Start())
	gst, ok := readStat(gone.Process.Pid)
	require.True(t, ok)
	require.NoError(t, gone.Wait())

	mk := func(name string) string {
		d := filepath.Join(parent, name)
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Mkdir(filepath.Join(d, "c0.1"), 0o755))
		return d
	}
	dead := mk(fmt.Sprintf("skulk-%d-%d-0badcafe", gst.pid, gst.start))
	locked := mk(fmt.Sprintf("skulk-%d-%d-0badbeef", gst.pid, gst.start))
	live := mk(fmt.Sprintf("skulk-%d-%d-0dadcafe", self.pid, self.start))
	t.Cleanup(func() { // dead too, when the sweep failed
		for _, d := range []string{dead, locked, live} {
			os.Remove(filepath.Join(d, "c0.1"))
			os.Remove(d)
		}
	})
	lock, err := os.Open(locked)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB))

	// Something still runs in the dead host's child cgroup.
	sleeper := exec.Command("sleep", "600")
	require.NoError(t, sleeper.Start())
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = sleeper.Wait(); close(exited) }() // ends with the sleeper: killed by the sweep, or by the cleanup
	t.Cleanup(func() { sleeper.Process.Kill(); <-exited })
	require.NoError(t, writeFile(filepath.Join(dead, "c0.1", "cgroup.procs"), strconv.Itoa(sleeper.Process.Pid)))

	var logs syncBuffer
	sweepLeftovers(parent, true, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.NoDirExists(t, dead)
	assert.DirExists(t, locked)
	assert.DirExists(t, live)
	assert.Contains(t, logs.String(), "removed a cgroup left by a host that is gone")
	select {
	case <-exited:
		var ee *exec.ExitError
		require.ErrorAs(t, waitErr, &ee)
		assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	case <-time.After(5 * time.Second):
		require.FailNow(t, "what ran in the dead host's cgroup was not killed")
	}
}

// TestParseSetName: only a Set's own names are taken.
func TestParseSetName(t *testing.T) {
	for name, want := range map[string]bool{
		"skulk-12-345-0badcafe": true,
		"skulk-12-345-0badcaf":  false,
		"skulk-12-345-0badcafz": false,
		"skulk-x-345-0badcafe":  false,
		"skulk-12-345":          false,
		"other-12-345-0badcafe": false,
		"skulk-0-345-0badcafe":  false,
	} {
		_, _, ok := parseSetName(name)
		assert.Equal(t, want, ok, name)
	}
}

// TestReleaseRemovesNestedCgroups: a child may make cgroups below its own
// (its directories are its user's, which it may be) and move processes
// there; Sweep kills them and Release still removes every directory.
// Limits give the child v1 directories too where the machine has them.
func TestReleaseRemovesNestedCgroups(t *testing.T) {
	s, err := New(Options{Limits: Limits{Pids: 64}}, slog.New(slog.DiscardHandler))
	if errors.Is(err, ErrLimitUnavailable) {
		t.Skipf("limit unavailable here: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(s.Close)
	cmd, ch := startIn(t, s, "c0.1", "exec sleep 600")
	var dirs []string
	if ch.cg.v2 != "" {
		dirs = append(dirs, ch.cg.v2)
	}
	for _, d := range ch.cg.v1 {
		dirs = append(dirs, d)
	}
	require.NotEmpty(t, dirs)
	for _, d := range dirs {
		nested := filepath.Join(d, "x", "y")
		require.NoError(t, os.MkdirAll(nested, 0o755))
		require.NoError(t, os.Mkdir(filepath.Join(d, "z"), 0o755))
		require.NoError(t, writeFile(filepath.Join(nested, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)))
	}
	if ch.cg.v2 != "" {
		assert.True(t, inCgroup(cmd.Process.Pid, ch.cg.v2Rel), "a process in a cgroup below the child's is the child's")
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	_, left := ch.Sweep()
	assert.Equal(t, 0, left)
	require.NoError(t, ch.Release())
	for _, d := range dirs {
		assert.NoDirExists(t, d)
	}
}

// TestWithin: a cgroup path is within rel when it is rel or below it.
func TestWithin(t *testing.T) {
	assert.True(t, within("/a/skulk-1/c0.1", "/a/skulk-1/c0.1"))
	assert.True(t, within("/a/skulk-1/c0.1/x/y", "/a/skulk-1/c0.1"))
	assert.False(t, within("/a/skulk-1/c0.10", "/a/skulk-1/c0.1"))
	assert.False(t, within("/a/skulk-1", "/a/skulk-1/c0.1"))
}

// TestPidsLimitPastTheKernels: a pids limit above the most processes the
// kernel allows is no limit ("max"), not a start that fails.
func TestPidsLimitPastTheKernels(t *testing.T) {
	s, err := New(Options{Limits: Limits{Pids: 1 << 40}}, slog.New(slog.DiscardHandler))
	if errors.Is(err, ErrLimitUnavailable) {
		t.Skipf("limit unavailable here: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(s.Close)
	cmd, ch := startIn(t, s, "c0.1", "exit 0")
	require.NoError(t, cmd.Wait())
	for _, d := range []string{ch.cg.v1[ctlPids], ch.cg.v2} {
		if b, err := os.ReadFile(filepath.Join(d, "pids.max")); d != "" && err == nil {
			assert.Equal(t, "max", strings.TrimSpace(string(b)), d)
		}
	}
	ch.Sweep()
	require.NoError(t, ch.Release())
	assert.Equal(t, "4194304", pidsMax(pidMaxLimit))
	assert.Equal(t, "max", pidsMax(pidMaxLimit+1))
}

// TestGuardianRemovesNestedCgroups: told of a cgroup directory, the
// guardian, once its input ends (the host is gone), removes it with the
// cgroups made below it, the deepest first.
func TestGuardianRemovesNestedCgroups(t *testing.T) {
	s := newSet(t, Options{})
	dir := filepath.Join(s.cg.v2, "c9")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "x", "y"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "z"), 0o755))
	t.Cleanup(func() {
		for _, d := range tree(dir) {
			os.Remove(d)
		}
	})
	g := startGuardian(slog.New(slog.DiscardHandler))
	if g == nil {
		t.Skip("no /bin/sh")
	}
	g.cgroup(dir)
	g.close() // its input ends: it acts and exits
	assert.NoDirExists(t, dir)
}
