//go:build unix && !race

package nbsys

import (
	"syscall"
	"unsafe"
)

// Read reads from fd, a descriptor in non-blocking mode, into p, as
// syscall.Read does: syscall.EAGAIN when nothing is there yet.
func Read(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return syscall.Read(fd, p) // no buffer to point at; rare
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
