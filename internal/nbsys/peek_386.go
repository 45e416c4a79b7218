//go:build linux && 386

package nbsys

import "syscall"

// Peek is syscall.Recvfrom on linux/386, which has no recvfrom system
// call of its own (socketcall multiplexes it).
func Peek(fd int, b *[1]byte) (int, error) {
	n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
