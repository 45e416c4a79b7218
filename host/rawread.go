package host

import (
	"io"
	"net"
	"syscall"
)

// newRawSource returns what a call connection's packetio.Reader reads
// from: a connSource over nc (raw reads, waited for by the runtime's
// poller), or nc itself when it has no RawConn.
func newRawSource(nc net.Conn) io.Reader {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	return newConnSource(nc, rc, nil)
}
