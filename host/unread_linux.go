//go:build linux

package host

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unread returns how many bytes the peer wrote wait unread in c's
// receive buffer (SIOCINQ), without reading or waiting; 0 when it cannot
// tell. The supervisor asks it when the health timeout fires: a pong that
// reached the host while the host itself was too busy to read it shows
// the child answered.
func unread(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	if rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) != nil {
		return 0
	}
	return max(n, 0)
}
