//go:build unix && !linux

package sockpair

import "syscall"

// pair creates the sockets and marks them close-on-exec under
// syscall.ForkLock, which os/exec holds while it forks, so no process is
// started between the two steps (systems without SOCK_CLOEXEC).
func pair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
