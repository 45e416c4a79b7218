//go:build linux

package contain

import (
	"fmt"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zombiesOfGroup lists the zombie children of this process in process
// group pgrp.
func zombiesOfGroup(pgrp int) []int {
	var out []int
	for _, st := range zombieChildren(os.Getpid()) {
		if st.pgrp == pgrp {
			out = append(out, st.pid)
		}
	}
	return out
}

// reapingSet returns a Set with a reaper, with cgroups (the test is
// skipped where the machine has none) or without.
func reapingSet(t *testing.T, noCgroups bool) *Set {
	t.Helper()
	var s *Set
	if noCgroups {
		var err error
		s, err = New(Options{NoCgroups: true}, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(s.Close)
	} else {
		s = newSet(t, Options{})
	}
	require.NotNil(t, s.reap, "no reaper: the process did not become a subreaper")
	return s
}

// TestReaperReapsAdopted: a child that double-forks 100 short-lived
// processes, each orphaned at once, and runs on leaves this process (its
// subreaper) no zombie of them, with a cgroup (the zombies' cgroup is the
// child's) and without (their process group is the child's).
func TestReaperReapsAdopted(t *testing.T) {
	for _, noCgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCgroups=%v", noCgroups), func(t *testing.T) {
			s := reapingSet(t, noCgroups)
			dir := t.TempDir()
			cmd, ch := startIn(t, s, "c0.1", `i=0
while [ $i -lt 100 ]; do
	(sleep 0.01 </dev/null >/dev/null 2>&1 &)
	i=$((i + 1))
done
: > `+dir+`/done
exec sleep 600`)
			defer func() {
				cmd.Process.Kill()
				cmd.Wait()
				ch.Sweep()
				require.NoError(t, ch.Release())
			}()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
					break
				}
				require.False(t, time.Now().After(deadline), "the child's loop did not end")
			}
			start := time.Now()
			for {
				z := zombiesOfGroup(cmd.Process.Pid)
				if len(z) == 0 {
					break
				}
				require.Falsef(t, time.Since(start) > 5*time.Second, "%d zombies of the child left to this process: %v", len(z), z)
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("no zombie of the child left %v after its loop ended", time.Since(start).Round(time.Millisecond))
			st, ok := readStat(cmd.Process.Pid)
			require.True(t, ok && st.state != 'Z', "the child is not running")
		})
	}
}

// TestLineageAdopted: without cgroups, a zombie child of the host process
// is the child's when it was seen, or its group or session is led by the
// child or a descendant seen; never the child itself, a process older
// than the child, another parent's zombie, or one whose group leader's
// pid now names another process.
func TestLineageAdopted(t *testing.T) {
	root := sleeper(t, true)
	other := sleeper(t, true) // a process of the program's, started after the child
	l := newLineage(statOf(root), nil, nil)
	ost, ok := readStat(other)
	require.True(t, ok)
	self := os.Getpid()
	later := l.root.start + 1
	const gone = pidMaxLimit + 1  // no process has this pid
	l.seen[gone] = later          // a descendant seen, gone now
	l.seen[other] = ost.start - 1 // a seen pid that names another process now
	for _, tc := range []struct {
		name string
		st   procStat
		want bool
	}{
		{"in the child's group", procStat{pid: 1 << 21, ppid: self, pgrp: root, sid: 1, start: later}, true},
		{"in the child's session", procStat{pid: 1 << 21, ppid: self, pgrp: 1, sid: root, start: later}, true},
		{"seen", procStat{pid: gone, ppid: self, pgrp: 1, sid: 1, start: later}, true},
		{"in the group of a seen one that is gone", procStat{pid: 1 << 21, ppid: self, pgrp: gone, sid: 1, start: later}, true},
		{"the child itself", procStat{pid: root, ppid: self, pgrp: root, sid: root, start: l.root.start}, false},
		{"older than the child", procStat{pid: 1 << 21, ppid: self, pgrp: root, sid: 1, start: l.root.start - 1}, false},
		{"another parent's", procStat{pid: 1 << 21, ppid: 1, pgrp: root, sid: 1, start: later}, false},
		{"the program's own, in its own group", procStat{pid: other, ppid: self, pgrp: other, sid: 1, start: ost.start}, false},
		{"in a group of no one's", procStat{pid: 1 << 21, ppid: self, pgrp: 1 << 21, sid: 1, start: later}, false},
	} {
		assert.Equal(t, tc.want, l.adopted(tc.st), tc.name)
	}
}

// TestReaperLeavesTheChild: a child the Set started that exits stays a
// zombie for its Cmd.Wait, however many passes the reaper makes meanwhile
// (each Track asks for one), and Wait gets its exit status; with a cgroup
// (the child is in its own cgroup, as its adopted descendants are) and
// without (it leads its own process group).
func TestReaperLeavesTheChild(t *testing.T) {
	for _, noCgroups := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCgroups=%v", noCgroups), func(t *testing.T) {
			s := reapingSet(t, noCgroups)
			cmd, ch := startIn(t, s, "c0.1", "(sleep 0.01 &); exit 3")
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				st, ok := readStat(cmd.Process.Pid)
				require.True(t, ok, "the child was reaped by someone else than its Cmd.Wait")
				if st.state == 'Z' {
					break
				}
				require.False(t, time.Now().After(deadline), "the child never exited")
			}
			for range 10 { // passes over the zombie, made here rather than waited for
				s.reap.pass()
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 3, ee.ExitCode())
			_, left := ch.Sweep()
			assert.Equal(t, 0, left)
			require.NoError(t, ch.Release())
		})
	}
}

// TestReaperKeepsSIGCHLDIgnored: a program that ignores SIGCHLD (its
// children are reaped by the kernel, none is left a zombie) still has it
// ignored while a Set runs and after it closed: the reaper does not ask
// for it.
func TestReaperKeepsSIGCHLDIgnored(t *testing.T) {
	signal.Ignore(syscall.SIGCHLD)
	defer func() {
		// Reset does not undo Ignore for SIGCHLD: the kernel would go
		// on reaping every child of the test process, and the Waits of
		// the next tests would fail. Notify puts the Go runtime's
		// handler back, and Stop keeps it.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGCHLD)
		signal.Stop(c)
	}()
	s, err := New(Options{NoCgroups: true}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.True(t, signal.Ignored(syscall.SIGCHLD), "SIGCHLD no longer ignored while the Set runs")
	s.Close()
	assert.True(t, signal.Ignored(syscall.SIGCHLD), "SIGCHLD no longer ignored after the Set closed")
}

// TestReaperLeavesAnOlderProcessMovedIn: a process of the program's,
// older than the child, that lands in the child's cgroup (a child that
// runs as the host's user may write its cgroup.procs; here the test does
// it for the child) and exits there keeps its exit status for its own
// Cmd.Wait: the reaper takes only zombies that started after the child.
func TestReaperLeavesAnOlderProcessMovedIn(t *testing.T) {
	s := reapingSet(t, false)
	dir := t.TempDir()
	older := exec.Command("/bin/sh", "-c", `while [ ! -e `+dir+`/exit ]; do sleep 0.01; done; exit 7`)
	require.NoError(t, older.Start())
	ost, ok := readStat(older.Process.Pid)
	require.True(t, ok)
	// Start times count clock ticks (1/100 s, as /proc/uptime's
	// hundredths): wait for a later tick, so that the child's is later.
	for deadline := time.Now().Add(5 * time.Second); ; {
		require.False(t, time.Now().After(deadline), "/proc/uptime never passed the older process's start")
		b, err := os.ReadFile("/proc/uptime")
		require.NoError(t, err)
		up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
		require.NoError(t, err)
		if uint64(up*100) > ost.start {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cmd, ch := startIn(t, s, "c0.1", "exec sleep 600")
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		ch.Sweep()
		require.NoError(t, ch.Release())
	}()
	if ch.cg == nil || ch.cg.v2 == "" {
		older.Process.Kill()
		older.Wait()
		t.Skip("no unified cgroup for the child here")
	}
	require.NoError(t, os.WriteFile(filepath.Join(ch.cg.v2, "cgroup.procs"), []byte(strconv.Itoa(older.Process.Pid)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "exit"), nil, 0o600))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if st, ok := readStat(older.Process.Pid); !ok || st.state == 'Z' {
			break
		}
		require.False(t, time.Now().After(deadline), "the older process did not exit")
	}
	for range 10 { // passes over the zombie, made here rather than waited for
		s.reap.pass()
	}
	err := older.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the older process's status was taken by someone else than its Cmd.Wait")
	assert.Equal(t, 7, ee.ExitCode())
}
