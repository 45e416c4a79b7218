//go:build linux

package contain

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"golang.org/x/sys/unix"
)

func isSubreaper(t *testing.T) bool {
	t.Helper()
	var v int32
	require.NoError(t, unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0))
	return v != 0
}

func setSubreaper(t *testing.T, on bool) {
	t.Helper()
	v := uintptr(0)
	if on {
		v = 1
	}
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, v, 0, 0, 0))
}

// TestSubreaperBeforeAskedAnew: whether the process was a subreaper before
// the first Host is asked each time the count leaves zero, so a flag the
// program set for one Host's life and cleared afterwards does not keep the
// next Host's flag set for ever.
func TestSubreaperBeforeAskedAnew(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	was := isSubreaper(t)
	t.Cleanup(func() { setSubreaper(t, was) })

	setSubreaper(t, true) // the program's own
	require.True(t, holdSubreaper(log), "holdSubreaper: no reference")
	releaseSubreaper()
	require.True(t, isSubreaper(t), "the program's own flag was cleared")

	setSubreaper(t, false) // the program is done with it
	require.True(t, holdSubreaper(log), "holdSubreaper: no reference")
	require.True(t, isSubreaper(t), "not a subreaper while a reference is held")
	releaseSubreaper()
	require.False(t, isSubreaper(t), "still a subreaper after the last reference: the first cycle's 'before' stuck")
}

// treeOf starts sh with one sleeping child in its own group and returns
// sh's pid once the child runs; Cleanup kills and reaps both.
func treeOf(t *testing.T) (sh, kid int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if kids := childrenOf(cmd.Process.Pid); len(kids) == 1 {
			return cmd.Process.Pid, kids[0]
		}
		require.False(t, time.Now().After(deadline), "sh started no child")
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTrackReusedPID: a lineage whose child's pid now names another
// process (another start time) remembers none of that process's tree,
// and a lineage whose sweep is over remembers nothing more.
func TestTrackReusedPID(t *testing.T) {
	sh, kid := treeOf(t)
	st, ok := readStat(sh)
	require.True(t, ok, "no stat for sh")
	// The child as it started, earlier than the process that has its pid now.
	l := &lineage{root: procStat{pid: sh, start: st.start - 1}, self: os.Getpid(), seen: map[int]uint64{}}
	l.track()
	require.EqualValuesf(t, 0, len(l.seen), "seen %v: the tree of a process that reused the child's pid", l.seen)

	l = &lineage{root: st, self: os.Getpid(), seen: map[int]uint64{}}
	l.track()
	if _, ok := l.seen[kid]; !ok || len(l.seen) != 1 {
		require.FailNow(t, fmt.Sprintf("seen %v, want %d", l.seen, kid))
	}
	l.mu.Lock()
	clear(l.seen)
	l.swept = true
	l.mu.Unlock()
	l.track()
	require.EqualValuesf(t, 0, len(l.seen), "seen %v after the sweep", l.seen)
}

// sleeper starts sleep holding extra as fd 3, in its own group if own;
// Cleanup kills and reaps it.
func sleeper(t *testing.T, own bool, extra ...*os.File) int {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: own}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

// TestDescriptorRule: a process holding the write end of the child's
// stdout pipe is the child's, in the host's process group or not; one
// holding only the read end (as a fork of the host does between its fork
// and its exec) is not.
func TestDescriptorRule(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	root := sleeper(t, true)
	l := newLineage(statOf(root), []*os.File{w}, nil)
	reader := sleeper(t, true, r)
	inGroup := sleeper(t, false, w)
	ownGroup := sleeper(t, true, w)
	in := l.members(allProcs(l.root.start))
	for _, tc := range []struct {
		name string
		pid  int
		want bool
	}{
		{"the child", root, true},
		{"holds the read end", reader, false},
		{"holds the write end in the host's group", inGroup, true},
		{"holds the write end in its own group", ownGroup, true},
	} {
		if _, got := in[tc.pid]; got != tc.want {
			assert.Fail(t, fmt.Sprintf("%s (%d): member %v, want %v", tc.name, tc.pid, got, tc.want))
		}
	}
}

// TestGuardianGone: once the guardian is gone the host stops telling it
// (one warning, not one per process), and closing it still returns.
func TestGuardianGone(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	g := startGuardian(log)
	if g == nil {
		t.Skip("no /bin/sh")
	}
	g.cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if st, ok := readStat(g.cmd.Process.Pid); !ok || st.state == 'Z' {
			break // its end of the pipe is closed
		}
		require.False(t, time.Now().After(deadline), "the guardian survived SIGKILL")
		time.Sleep(5 * time.Millisecond)
	}
	for range 100 {
		g.add(1<<22, 1)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		assert.Fail(t, fmt.Sprintf("%d warnings, want 1:\n%s", n, logs.String()))
	}
	g.close()
}

// TestGuardianDescriptorRule: told of a pipe (and of no process), the
// guardian, once its input ends, kills a process in a session of its own
// that holds that pipe, and leaves alone one that holds another, and one
// that holds a pipe of a child younger than itself.
func TestGuardianDescriptorRule(t *testing.T) {
	g := startGuardian(slog.New(slog.DiscardHandler))
	if g == nil {
		t.Skip("no /bin/sh")
	}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	other, otherW, err := os.Pipe()
	require.NoError(t, err)
	defer other.Close()
	defer otherW.Close()
	older, olderW, err := os.Pipe()
	require.NoError(t, err)
	defer older.Close()
	defer olderW.Close()
	holder := sleeper(t, true, w)
	bystander := sleeper(t, true, otherW)
	elder := sleeper(t, true, olderW)
	link := func(f *os.File) string {
		var st syscall.Stat_t
		require.NoError(t, syscall.Fstat(int(f.Fd()), &st))
		return "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]"
	}
	es, ok := readStat(elder)
	require.True(t, ok, "no stat of the elder")
	g.addFile(link(w), 0)
	// A pipe of a child that started after elder: elder, which holds it,
	// was running before that child and is not the child's.
	g.addFile(link(olderW), es.start+1)
	g.close() // the guardian acts on end of input, and close waits for it
	if s, ok := readStat(holder); ok && s.state != 'Z' {
		assert.Fail(t, fmt.Sprintf("the holder of the pipe runs on (state %c)", s.state))
	}
	if s, ok := readStat(bystander); !ok || s.state == 'Z' || s.state == 'T' {
		assert.Fail(t, fmt.Sprintf("a process holding another pipe was stopped or killed (state %c)", s.state))
	}
	if s, ok := readStat(elder); !ok || s.state == 'Z' || s.state == 'T' {
		assert.Fail(t, fmt.Sprintf("a process older than the child that holds its pipe was stopped or killed (state %c)", s.state))
	}
}

// TestSeenZombieSwept: without cgroups, a descendant in a session of its
// own that a health check saw, then orphaned (the host adopted it) and
// exited, is still the child's when the next health check runs: the
// sweep after the child's exit reaps it.
func TestSeenZombieSwept(t *testing.T) {
	s, err := New(Options{NoCgroups: true}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	if !s.subreaper {
		t.Skip("the process cannot become a subreaper")
	}
	// The reaper would reap the grandchild on its SIGCHLD; without the
	// signal (a program that took it back with signal.Reset) the health
	// checks and the sweep are what reap it, and the lineage must still
	// name it when they run.
	signal.Stop(s.reap.sig)
	dir := t.TempDir()
	cmd, ch := startIn(t, s, "c0.1", `sh -c 'setsid sh -c "echo \$\$ > `+dir+`/gc.tmp; mv `+dir+`/gc.tmp `+dir+`/gc; while [ ! -e `+dir+`/go ]; do sleep 0.01; done" </dev/null >/dev/null 2>&1 &
while [ ! -e `+dir+`/orphan ]; do sleep 0.01; done'
while [ ! -e `+dir+`/end ]; do sleep 0.01; done`)
	var gc int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "gc")); err == nil {
			gc, err = strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			break
		}
		require.False(t, time.Now().After(deadline), "no grandchild")
	}
	ch.Track() // seen, in the child's tree
	require.NoError(t, os.WriteFile(filepath.Join(dir, "orphan"), nil, 0o600))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, ok := readStat(gc); ok && st.ppid == os.Getpid() {
			break
		}
		require.False(t, time.Now().After(deadline), "the grandchild was not adopted")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, ok := readStat(gc); !ok || st.state == 'Z' {
			break
		}
		require.False(t, time.Now().After(deadline), "the grandchild did not exit")
	}
	ch.Track() // a health check after it exited
	require.NoError(t, os.WriteFile(filepath.Join(dir, "end"), nil, 0o600))
	cmd.Wait()
	_, left := ch.Sweep()
	assert.Equal(t, 0, left)
	_, ok := readStat(gc)
	assert.False(t, ok, "the grandchild is left a zombie of this process")
}
