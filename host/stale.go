package host

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A host holds an exclusive flock(2) on each of its private directories for
// as long as the directory exists, and the kernel releases it when the host
// dies, however it dies. A host killed with SIGKILL removes nothing; the
// next host to start with the same TempDir removes what it left: the
// directories no live host holds (sweepStale).

// privatePrefix starts every private directory's name; os.MkdirTemp adds
// decimal digits.
const privatePrefix = "skulk-"

// sockName is the stream listener's name in a private directory.
const sockName = "streams.sock"

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

// lockDir opens dir and takes an exclusive, non-blocking flock on it, held
// until the returned file is closed. The descriptor is close-on-exec, so no
// child inherits the lock.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
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

// sweepStale removes the private directories under base that hosts which
// are gone left behind, and returns how many it removed. It takes only
// what a host makes: a directory named as spawn names one, mode 0700,
// owned by this user, older than staleAge, that no process holds locked,
// holding nothing but the stream listener's socket file (a directory with
// anything else in it is left as it is). It reads base once, so it is as
// quick as base is small.
func sweepStale(base string, now time.Time, log *slog.Logger) int {
	entries, err := os.ReadDir(base)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || !isPrivateName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Mode().Perm() != 0o700 || now.Sub(info.ModTime()) < staleAge {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		lock, err := lockDir(dir)
		if err != nil {
			continue // a live host holds it, or it went away meanwhile
		}
		if onlySocket(dir) {
			os.Remove(filepath.Join(dir, sockName))
			if os.Remove(dir) == nil {
				removed++
				log.Info("removed a private directory left by a host that is gone", "dir", dir)
			}
		}
		lock.Close()
	}
	return removed
}

// onlySocket reports whether dir holds nothing but, at most, a socket
// file named sockName.
func onlySocket(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) > 1 {
		return false
	}
	return len(entries) == 0 || entries[0].Name() == sockName && entries[0].Type()&os.ModeSocket != 0
}
