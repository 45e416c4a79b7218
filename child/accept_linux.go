package child

import "syscall"

// acceptSocket accepts a connection on the listening socket fd as a
// close-on-exec, non-blocking fd, in one system call.
func acceptSocket(fd int) (int, error) {
	nfd, _, err := syscall.Accept4(fd, syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK)
	return nfd, err
}
