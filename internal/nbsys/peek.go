//go:build unix && !(linux && 386)

package nbsys

import (
	"syscall"
	"unsafe"
)

// Peek looks at the first byte waiting on fd, a socket in non-blocking
// mode, and leaves it there (recv with MSG_PEEK and MSG_DONTWAIT): 1 when
// a byte waits, 0 at the end of the stream, syscall.EAGAIN when nothing
// is there yet.
func Peek(fd int, b *[1]byte) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
