//go:build !unix

package child

import (
	"fmt"
	"os"
)

// hostedFile: a hosted child needs the Unix sockets the host passes.
func hostedFile(fd int, name string) (*os.File, error) {
	return nil, fmt.Errorf("%w: a hosted child needs a Unix system", errNotHosted)
}

// newSocketListener is never reached: hostedFile fails first.
func newSocketListener(f *os.File, fd int) (Listener, error) {
	return nil, fmt.Errorf("%w: a hosted child needs a Unix system", errNotHosted)
}

// newSockFile returns f: no raw reads here.
func newSockFile(f *os.File) Conn { return f }

// dialUnix: calls through the host need Unix sockets.
func dialUnix(path string) (Conn, error) {
	return nil, fmt.Errorf("%w: calls through the host need a Unix system", errNotHosted)
}

// shutdownWrite: no call connections here.
func shutdownWrite(Conn) bool { return false }
