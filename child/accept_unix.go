//go:build unix && !linux

package child

import "syscall"

// acceptSocket accepts a connection on the listening socket fd as a
// close-on-exec, non-blocking fd. ForkLock keeps a process started
// meanwhile from inheriting it before it is close-on-exec.
func acceptSocket(fd int) (int, error) {
	syscall.ForkLock.RLock()
	nfd, _, err := syscall.Accept(fd)
	if err == nil {
		syscall.CloseOnExec(nfd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return -1, err
	}
	return nfd, nil
}
