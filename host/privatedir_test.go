package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testHostEnv makes a re-executed test binary a host (runTestHost) whose
// private directories go in the variable's value.
const testHostEnv = "SKULK_HOST_TEST_HOST"

// runTestHost is the test binary as a host process: it starts a host with
// the real child (SKULK_TEST_CHILD, set by TestMain) in TempDir dir,
// prints "ready PID" with its child's pid, and waits to be killed.
func runTestHost(dir string) int {
	cfg := Config{Command: os.Getenv("SKULK_TEST_CHILD"), TempDir: dir}
	h, err := Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test host:", err)
		return 1
	}
	fmt.Printf("ready %d\n", h.Children()[0].PID)
	select {} // until SIGKILL
}

// makeStaleDir makes a private directory under base as a host that is
// gone leaves it: named and moded as spawn makes it, with a socket file
// named streams.sock, last modified age ago.
func makeStaleDir(t *testing.T, base, name string, age time.Duration) string {
	t.Helper()
	dir := filepath.Join(base, name)
	require.NoError(t, os.Mkdir(dir, 0o700))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, sockName), Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	old := time.Now().Add(-age)
	require.NoError(t, os.Chtimes(dir, old, old))
	return dir
}

// TestSweepStale removes exactly the directories a host that is gone left:
// old, unlocked, named and moded as spawn makes them, holding only the
// socket; everything else under the base stays as it was.
func TestSweepStale(t *testing.T) {
	base := t.TempDir()
	old := time.Now().Add(-2 * staleAge)
	aged := func(p string) {
		require.NoError(t, os.Chtimes(p, old, old))
	}
	stale := makeStaleDir(t, base, privatePrefix+"100", 2*staleAge)
	empty := filepath.Join(base, privatePrefix+"101")
	require.NoError(t, os.Mkdir(empty, 0o700))
	aged(empty)

	keep := map[string]string{}
	keep["young"] = makeStaleDir(t, base, privatePrefix+"200", 0)
	keep["locked"] = makeStaleDir(t, base, privatePrefix+"201", 2*staleAge)
	lock, err := lockDir(keep["locked"])
	require.NoError(t, err)
	defer lock.Close()
	// A host built before directories were locked, or internal/testnet:
	// never locked, so never taken for a dead host's.
	keep["an unlocking host's name"] = makeStaleDir(t, base, "skulk-300", 2*staleAge)
	keep["not spawn's name"] = makeStaleDir(t, base, privatePrefix+"test-1", 2*staleAge)
	keep["no digits"] = makeStaleDir(t, base, privatePrefix, 2*staleAge)
	keep["another mode"] = makeStaleDir(t, base, privatePrefix+"202", 2*staleAge)
	require.NoError(t, os.Chmod(keep["another mode"], 0o755))
	keep["something else in it"] = makeStaleDir(t, base, privatePrefix+"203", 2*staleAge)
	require.NoError(t, os.WriteFile(filepath.Join(keep["something else in it"], "notes"), nil, 0o600))
	aged(keep["something else in it"])
	keep["a file, not a socket"] = filepath.Join(base, privatePrefix+"204")
	require.NoError(t, os.Mkdir(keep["a file, not a socket"], 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(keep["a file, not a socket"], sockName), nil, 0o600))
	aged(keep["a file, not a socket"])
	keep["a plain file"] = filepath.Join(base, privatePrefix+"205")
	require.NoError(t, os.WriteFile(keep["a plain file"], nil, 0o700))
	aged(keep["a plain file"])
	// A link with a private directory's name, to a directory that looks
	// like a dead host's: neither the link nor what it points at is taken.
	elsewhere := makeStaleDir(t, t.TempDir(), privatePrefix+"206", 2*staleAge)
	keep["a link"] = filepath.Join(base, privatePrefix+"207")
	require.NoError(t, os.Symlink(elsewhere, keep["a link"]))
	keep["a link's target"] = elsewhere
	if os.Geteuid() == 0 {
		keep["another user's"] = makeStaleDir(t, base, privatePrefix+"208", 2*staleAge)
		require.NoError(t, os.Chown(keep["another user's"], 65534, 65534))
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.Equal(t, 2, sweepStale(base, time.Now(), log))
	require.NoDirExists(t, stale)
	require.NoDirExists(t, empty)
	for why, p := range keep {
		_, err := os.Lstat(p)
		require.NoError(t, err, "%s: removed", why)
	}
	for _, d := range []string{"something else in it", "a link's target", "an unlocking host's name"} {
		_, err := os.Lstat(filepath.Join(keep[d], sockName))
		require.NoError(t, err, "%s: its socket was removed", d)
	}
}

// TestTempDirLength: a TempDir under which a private directory's socket
// path would pass 107 bytes is refused by validate, naming the field.
func TestTempDirLength(t *testing.T) {
	limit := maxSockPath - longestPrivateTail
	ok := Config{Command: "x", TempDir: "/" + strings.Repeat("d", limit-1)}
	require.NoError(t, ok.validate())
	long := Config{Command: "x", TempDir: "/" + strings.Repeat("d", limit)}
	err := long.validate()
	require.ErrorIs(t, err, ErrConfig)
	require.Contains(t, err.Error(), "TempDir")
	require.NotContains(t, err.Error(), "ddd", "the path is not echoed")
}

// TestSweepAfterHostKilled: a host killed with SIGKILL leaves its private
// directory (its child exits on control EOF, but nobody removes it); the
// next host started with the same TempDir removes it, and leaves the
// directory of a host that is alive however old it is.
func TestSweepAfterHostKilled(t *testing.T) {
	base := t.TempDir()
	startTestHost := func() (*exec.Cmd, int, string) {
		before := privateDirs(t, base)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), testHostEnv+"="+base)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "the test host did not start")
		pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
		require.NoError(t, err, "test host said %q", line)
		var dir string
		for _, d := range privateDirs(t, base) {
			if !slices.Contains(before, d) {
				dir = d
			}
		}
		require.NotEmpty(t, dir, "the test host's private directory")
		return cmd, pid, dir
	}
	aged := func(dir string) {
		old := time.Now().Add(-2 * staleAge)
		require.NoError(t, os.Chtimes(dir, old, old))
	}

	alive, aliveChild, aliveDir := startTestHost()
	defer func() { // the live host, and then its child, which exits on control EOF
		alive.Process.Kill()
		alive.Wait()
		waitGone(t, aliveChild, 5*time.Second)
	}()
	killed, childPID, killedDir := startTestHost()
	require.NoError(t, killed.Process.Signal(syscall.SIGKILL))
	killed.Wait()
	waitGone(t, childPID, 5*time.Second) // control EOF: the child exits within 1 s
	require.DirExists(t, killedDir, "a host killed with SIGKILL removes nothing")
	aged(killedDir)
	aged(aliveDir)

	h, err := Start(context.Background(), Config{Command: childBin, TempDir: base})
	require.NoError(t, err)
	own := privateDirs(t, base)
	require.NoError(t, h.Close(context.Background())) // waits for the sweep
	require.NoDirExists(t, killedDir, "the killed host's directory is swept")
	require.DirExists(t, aliveDir, "a live host's directory is kept, however old")
	require.Contains(t, own, aliveDir)
	require.Equal(t, []string{aliveDir}, privateDirs(t, base), "the new host's own directory went with Close")
}

// privateDirs lists the private directories under base.
func privateDirs(t *testing.T, base string) []string {
	t.Helper()
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if isPrivateName(e.Name()) {
			dirs = append(dirs, filepath.Join(base, e.Name()))
		}
	}
	return dirs
}

// waitGone waits until pid has exited (gone, or a zombie its new parent
// has not reaped yet), failing the test after limit.
func waitGone(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for running(pid) {
		require.Falsef(t, time.Now().After(deadline), "process %d still there %v after its host was killed", pid, limit)
		time.Sleep(10 * time.Millisecond)
	}
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: a zombie counts as running
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(string(rest)), "Z")
}

// TestFsType finds the file system of a path in a mount table: the
// longest mount point that is the path or a parent of it, with
// mountinfo's escapes undone.
func TestFsType(t *testing.T) {
	mi := []byte(`27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
40 27 0:50 / /home/me/tmp rw - nfs4 server:/export rw
41 27 0:51 / /mnt/my\040share rw shared:1 - cifs //srv/share rw
42 27 0:52 / /srv/vm rw - 9p share rw
bad line
`)
	for path, want := range map[string]string{
		"/tmp":                 "ext4",
		"/":                    "ext4",
		"/dev/shm":             "tmpfs",
		"/dev/shmx":            "ext4",
		"/dev/shm/a/b":         "tmpfs",
		"/home/me/tmp/x":       "nfs4",
		"/home/me/tmpfoo":      "ext4",
		"/mnt/my share/skulk":  "cifs",
		"/srv/vm/skulk-host-1": "9p",
	} {
		require.Equal(t, want, fsType(mi, path), path)
	}
	require.Empty(t, fsType([]byte("garbage\n"), "/tmp"))
	for _, typ := range []string{"nfs4", "cifs", "9p", "fuse.sshfs", "virtiofs", "ceph", ""} {
		require.False(t, localFS[typ], "%q is swept", typ)
	}
	require.True(t, sweepable(t.TempDir()), "this machine's temporary directory is on a local file system")
}

// TestSweepOneLink: a private directory's name that is a link, to a
// directory a dead host could have left, is not followed: neither is
// removed, and the target keeps its socket.
func TestSweepOneLink(t *testing.T) {
	target := makeStaleDir(t, t.TempDir(), privatePrefix+"1", 2*staleAge)
	link := filepath.Join(t.TempDir(), privatePrefix+"2")
	require.NoError(t, os.Symlink(target, link))
	require.False(t, sweepOne(link, time.Now()))
	_, err := os.Lstat(link)
	require.NoError(t, err)
	_, err = os.Lstat(filepath.Join(target, sockName))
	require.NoError(t, err)
	require.True(t, sweepOne(target, time.Now()), "the target itself is a dead host's")
}
