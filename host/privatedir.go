package host

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
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
		return configErr("TempDir", fmt.Sprintf("too long for a socket path under it: at most %d bytes", maxSockPath-longestPrivateTail))
	}
	return nil
}

// lockDir opens dir, which must be a directory and not a symbolic link,
// and takes an exclusive, non-blocking flock on it, held until the
// returned file is closed. The descriptor is close-on-exec, so no child
// inherits the lock.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		lockErr = err
	}
	if lockErr != nil {
		f.Close()
		return nil, lockErr
	}
	return f, nil
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

// sharedFS names the file systems whose flock is local to one machine
// (NFS, SMB, CIFS, Ceph, 9p) or up to a user-space server (FUSE), by
// statfs(2) type: on them a lock does not show that a host on another
// machine is alive, so nothing there is swept.
var sharedFS = map[int64]string{
	0x6969:     "nfs",
	0x517b:     "smb",
	0xff534d42: "cifs",
	0xfe534d42: "smb2",
	0x00c36400: "ceph",
	0x01021997: "9p",
	0x65735546: "fuse",
}

// sweepStale removes the private directories under base that hosts which
// are gone left behind, and returns how many it removed. It takes only
// what a host that locks makes: a directory (not a link to one) named as
// spawn names one, mode 0700, owned by this user, older than staleAge,
// that no process holds locked, holding nothing but the stream listener's
// socket (a directory with anything else in it is left as it is). A base
// on a shared file system (sharedFS) is not swept. It reads base once, so
// it is as quick as base is small.
func sweepStale(base string, now time.Time, log *slog.Logger) int {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(base, &fs); err != nil {
		return 0
	}
	if _, shared := sharedFS[int64(fs.Type)]; shared {
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
// name swapped for a link to somewhere else meanwhile is not followed.
func sweepOne(dir string, now time.Time) bool {
	lock, err := lockDir(dir)
	if err != nil {
		return false // a live host holds it, it is a link, or it went away
	}
	defer lock.Close()
	info, err := lock.Stat()
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o700 || now.Sub(info.ModTime()) < staleAge {
		return false
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	entries, err := lock.ReadDir(-1)
	if err != nil || len(entries) > 1 {
		return false
	}
	if len(entries) == 1 {
		if entries[0].Name() != sockName || entries[0].Type()&os.ModeSocket == 0 {
			return false
		}
		if err := syscall.Unlinkat(int(lock.Fd()), sockName); err != nil {
			return false
		}
	}
	// rmdir does not follow a link the name may have become meanwhile; the
	// lock is released after it, so no other sweep sees the directory
	// unlocked.
	return syscall.Rmdir(dir) == nil
}
