//go:build unix && race

package nbsys

import "syscall"

// Read is syscall.Read under the race detector (see the package doc).
func Read(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }
