package host

import (
	"io"
	"net"
	"os"
	"syscall"

	"github.com/skulkrt/skulk/internal/nbsys"
)

// rawSource is what a call connection's packetio.Reader reads from: the
// socket, read through its syscall.RawConn with nbsys.Read, so that the
// host's busy path makes no system call that wakes the runtime's monitor
// thread (package nbsys says why that matters), as connSource reads a
// stream connection. Errors are those of a net.Conn's Read: io.EOF, a
// deadline's (matching os.ErrDeadlineExceeded), a closed connection's
// (net.ErrClosed), or the socket's, as *net.OpError. Used by one reader at
// a time, as the packetio.Reader over it is.
type rawSource struct {
	nc net.Conn
	rc syscall.RawConn
	fn func(fd uintptr) bool // read, made once so that a Read allocates nothing

	// Set by Read for fn.
	p   []byte
	n   int
	err error
}

// newRawSource returns a rawSource over nc, or nc itself when it has no
// RawConn.
func newRawSource(nc net.Conn) io.Reader {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &rawSource{nc: nc, rc: rc}
	s.fn = s.read
	return s
}

func (s *rawSource) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.p, s.n, s.err = p, 0, nil
	err := s.rc.Read(s.fn)
	s.p = nil
	switch {
	case err != nil: // the deadline, or the connection closed
		return 0, err
	case s.err != nil:
		return 0, &net.OpError{Op: "read", Net: "unix", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError("read", s.err)}
	case s.n == 0:
		return 0, io.EOF
	}
	return s.n, nil
}

// read is one attempt of Read: false, so that the runtime's poller waits
// for the socket to be readable and calls it again, when nothing is there
// yet.
func (s *rawSource) read(fd uintptr) bool {
	for {
		n, err := nbsys.Read(int(fd), s.p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.n, s.err = max(n, 0), err
		return true
	}
}
