package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Each child gets a private directory (spawn) holding its stream
// listener's socket. A host holds an exclusive flock(2) on each of its
// private directories for as long as the directory exists, and the kernel
// releases it when the host dies, however it dies. A host killed with
// SIGKILL removes nothing; the next host to start with the same base
// directory removes what it left: the directories no live host holds
// (sweepStale).

// privatePrefix starts every private directory's name; os.MkdirTemp adds
// decimal digits. Only hosts that lock their directories make names with
// it: hosts built before they did made "skulk-" and digits, as the test
// helpers in internal/testnet still do, and a sweep must never take those
// for a dead host's (they are never locked).
const privatePrefix = "skulk-host-"

// sockName is the stream listener's name in a private directory.
const sockName = "streams.sock"

// maxSockPath is the longest socket path Linux takes (sun_path holds 108
// bytes with the terminating NUL).
const maxSockPath = 107

// longestPrivateTail is the longest a private directory's name and its
// socket make a path under the base: MkdirTemp's suffix is a uint32.
const longestPrivateTail = len("/" + privatePrefix + "4294967295/" + sockName)

// staleAge is how old (by modification time) a private directory must be
// before a sweep may remove it. A directory is locked a few system calls
// after it is made, so the age only keeps a sweep away from one being made
// now; a minute is far past that on any machine.
const staleAge = time.Minute

// tempBase is the directory the private directories are made in.
func (c *Config) tempBase() string {
	if c.TempDir != "" {
		return c.TempDir
	}
	return os.TempDir()
}

// checkTempBase reports a base under which a private directory's socket
// path would be too long to bind.
func checkTempBase(base string) error {
	if len(base)+longestPrivateTail > maxSockPath {
		return configErr("TempDir", fmt.Sprintf("too long for a socket path under it (or $TMPDIR, when TempDir is empty): at most %d bytes", maxSockPath-longestPrivateTail))
	}
	return nil
}

// lockDir opens dir (openDir) and takes an exclusive, non-blocking flock
// on it (flock), held until the returned file is closed. The descriptor is
// close-on-exec, so no child inherits the lock.
func lockDir(dir string) (*os.File, error) {
	f, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openDir opens dir, which must be a directory and not a symbolic link.
func openDir(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
}

// flock takes an exclusive, non-blocking flock on f.
func flock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return err
	}
	return lockErr
}

// noFlock reports whether err says the file system has no flock at all
// (then no sweep can take the directory either, and a host goes on
// without the lock).
func noFlock(err error) bool {
	return errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP)
}

// isPrivateName reports whether name is one os.MkdirTemp(base,
// privatePrefix) makes: the prefix, then digits only.
func isPrivateName(name string) bool {
	digits, ok := strings.CutPrefix(name, privatePrefix)
	if !ok || digits == "" {
		return false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// localFS names the file systems, by their type in /proc/self/mountinfo,
// whose flock covers every process that can reach the directory: local
// disks, memory and overlays of them. Elsewhere (NFS, SMB, Ceph, 9p,
// virtiofs, FUSE, cluster file systems, any type not listed) a lock may
// not show that a host on another machine is alive, so nothing is swept.
var localFS = map[string]bool{
	"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true,
	"f2fs": true, "zfs": true, "bcachefs": true, "jfs": true, "nilfs2": true,
	"reiserfs": true, "tmpfs": true, "ramfs": true, "overlay": true,
}

// mountinfoPath is where the kernel lists this process's mounts.
const mountinfoPath = "/proc/self/mountinfo"

// fsType returns the type of the file system that holds path (which must
// have no symbolic links left in it), from the mount table mountinfo: the
// longest mount point that is path or one of its parents. "" when none
// is.
func fsType(mountinfo []byte, path string) string {
	best, typ := -1, ""
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// id parent major:minor root mountpoint options... - type source opts
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mp := unescapeMount(fields[4])
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, typ = len(mp), fields[sep+1]
		}
	}
	return typ
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, and
// so on) in a mount point.
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sweepable reports whether base is on a local file system (localFS).
func sweepable(base string) bool {
	resolved, err := filepath.EvalSymlinks(base)
	if err != nil {
		return false
	}
	resolved, err = filepath.Abs(resolved)
	if err != nil {
		return false
	}
	mi, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return false
	}
	return localFS[fsType(mi, resolved)]
}

// sweepStale removes the private directories under base that hosts which
// are gone left behind, and returns how many it removed. It takes only
// what a host that locks makes: a directory (not a link to one) named as
// spawn names one, mode 0700, owned by this user, older than staleAge,
// that no process holds locked, holding nothing but the stream listener's
// socket (a directory with anything else in it is left as it is). Only a
// base on a local file system (localFS) is swept. It reads base once, so
// it is as quick as base is small.
func sweepStale(base string, now time.Time, log *slog.Logger) int {
	if !sweepable(base) {
		return 0
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || !isPrivateName(e.Name()) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if sweepOne(dir, now) {
			removed++
			log.Info("removed a private directory left by a host that is gone", "dir", dir)
		}
	}
	return removed
}

// sweepOne removes dir if it is a dead host's (see sweepStale) and reports
// whether it did. Every check is made on the directory it opened, so a
// name swapped for a link to somewhere else meanwhile is not followed; the
// lock is tried last, so that a sweep never holds, even briefly, the lock
// of a directory a host has just made and is about to lock.
func sweepOne(dir string, now time.Time) bool {
	f, err := openDir(dir)
	if err != nil {
		return false // a link, or it went away
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o700 || now.Sub(info.ModTime()) < staleAge {
		return false
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	if flock(f) != nil {
		return false // a live host holds it
	}
	entries, err := f.ReadDir(-1)
	if err != nil || len(entries) > 1 {
		return false
	}
	if len(entries) == 1 {
		if entries[0].Name() != sockName || entries[0].Type()&os.ModeSocket == 0 {
			return false
		}
		if err := unix.Unlinkat(int(f.Fd()), sockName, 0); err != nil {
			return false
		}
	}
	// rmdir does not follow a link the name may have become meanwhile; the
	// lock is released after it, so no other sweep sees the directory
	// unlocked.
	return syscall.Rmdir(dir) == nil
}
