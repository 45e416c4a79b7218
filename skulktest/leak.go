package skulktest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/testnet"
	"go.uber.org/goleak"
)

// settle bounds how long the leak checks wait for goroutines and
// descriptors that are on their way out: well above the scheduling noise
// of a loaded 2-core machine under -race, and still a failure rather than
// a hang.
const settle = 5 * time.Second

// warm makes the runtime open the descriptors it keeps for the life of the
// process (the network poller's), so that the first check does not count
// them as a test's.
var warm sync.Once

func warmUp() {
	warm.Do(func() {
		if r, w, err := os.Pipe(); err == nil {
			r.Close()
			w.Close()
		}
	})
}

// snapshot is what a process had before a test made its host: its child
// processes, its descriptors, its goroutines, and the entries of the
// directory where the host makes its private directories.
type snapshot struct {
	kids       []int
	fds        []string
	goroutines goleak.Option
	dir        string
	entries    []string
}

func takeSnapshot(t testing.TB, dir string) *snapshot {
	t.Helper()
	warmUp()
	s := &snapshot{kids: testnet.Children(os.Getpid()), fds: openFDs(), goroutines: goleak.IgnoreCurrent(), dir: dir}
	s.entries = dirEntries(dir)
	return s
}

// check fails t for everything the test process has now that it did not
// have at the snapshot, and kills the child processes among them.
// Goroutines and descriptors get settle to go away.
func (s *snapshot) check(t testing.TB) {
	t.Helper()
	for _, pid := range testnet.Children(os.Getpid()) {
		if !slices.Contains(s.kids, pid) {
			// Killed, so that it does not outlive the test under init;
			// its zombie is the test process's to reap (an exec.Cmd's
			// Wait, or the process's exit).
			name := procName(pid)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Errorf("skulktest: child process %d (%s) left behind; killing it: %v", pid, name, err)
				continue
			}
			t.Errorf("skulktest: child process %d (%s) left behind (killed)", pid, name)
		}
	}
	for _, e := range dirEntries(s.dir) {
		if !slices.Contains(s.entries, e) {
			t.Errorf("skulktest: %s left behind", filepath.Join(s.dir, e))
		}
	}
	// goleak.Find retries for about a second itself; a loaded machine may
	// need longer.
	for deadline := time.Now().Add(settle); ; {
		err := goleak.Find(s.goroutines)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("skulktest: goroutines left behind: %v", err)
			break
		}
	}
	var extra []string
	for deadline := time.Now().Add(settle); ; time.Sleep(10 * time.Millisecond) {
		extra = extra[:0]
		for _, fd := range openFDs() {
			if !slices.Contains(s.fds, fd) {
				extra = append(extra, fd)
			}
		}
		if len(extra) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, fd := range extra {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd))
		t.Errorf("skulktest: descriptor %s (%s) left behind", fd, target)
	}
}

// openFDs lists the process's open descriptors by number, as
// /proc/self/fd does (the read's own descriptor is gone by the time the
// list is used, and was never in an earlier one under the same number
// while open: it is skipped by asking again).
func openFDs() []string {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	own := strconv.Itoa(int(f.Fd()))
	names, _ := f.Readdirnames(-1)
	f.Close()
	return slices.DeleteFunc(names, func(n string) bool { return n == own })
}

func procName(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

func dirEntries(dir string) []string {
	if dir == "" {
		return nil
	}
	es, _ := os.ReadDir(dir)
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name()
	}
	return names
}
