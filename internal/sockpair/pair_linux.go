package sockpair

import "syscall"

// pair creates the sockets close-on-exec in one system call.
func pair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
