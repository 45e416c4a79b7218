//go:build linux

package host

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unreadKnown: unread can tell (lost calls are detected only where it can).
const unreadKnown = true

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

// unsent reports whether bytes the host wrote on c wait for the peer to
// read them (SIOCOUTQ: on a Unix socket, what the peer has not taken
// yet), without waiting; false when it cannot tell.
func unsent(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }) != nil {
		return false
	}
	return n > 0
}
