//go:build unix

package child

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/skulkrt/skulk/internal/nbsys"
)

// hostedFile takes over fd, a socket the host passed, as a pollable
// *os.File: close-on-exec, so that no process the provider starts
// inherits the host's connection, and non-blocking, so that reads, writes
// and deadlines go through the runtime's poller as a net.Conn's do.
func hostedFile(fd int, name string) (*os.File, error) {
	st, err := sockType(fd)
	if err != nil {
		return nil, err
	}
	if st != syscall.SOCK_STREAM {
		return nil, fmt.Errorf("%w: fd %d is not a stream socket", errNotHosted, fd)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("%w: fd %d: %v", errNotHosted, fd, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// sockFile is a hosted socket (an *os.File in non-blocking mode) whose
// reads are raw system calls waited for by the runtime's poller
// (nbsys.Conn), as its writes are (writev, through the file's RawConn): a
// provider's busy path then makes no system call that wakes the runtime's
// monitor thread (package nbsys says why that matters). Safe for
// concurrent use; concurrent Reads take turns, as an *os.File's do.
type sockFile struct {
	*os.File
	rc     syscall.RawConn
	mu     sync.Mutex  // held by Read: r reads for one caller at a time
	r      *nbsys.Conn // over rc
	closed atomic.Bool // Close was called: a read's wait that ended is the close's
}

// newSockFile wraps f, a socket in non-blocking mode; without a RawConn
// it returns f itself.
func newSockFile(f *os.File) Conn {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	return &sockFile{File: f, rc: rc, r: nbsys.NewConn(rc, nil)}
}

// Close closes the socket; a Read waiting on it returns os.ErrClosed.
func (s *sockFile) Close() error {
	s.closed.Store(true)
	return s.File.Close()
}

// Fd returns the socket's descriptor and, unlike an *os.File's Fd,
// leaves it in non-blocking mode, which the raw reads need; -1 once
// closed.
func (s *sockFile) Fd() uintptr {
	fd := ^uintptr(0)
	if err := s.rc.Control(func(d uintptr) { fd = d }); err != nil {
		return ^uintptr(0)
	}
	return fd
}

// Read reads as an *os.File's Read does, with its errors: io.EOF at the
// end, a *os.PathError matching os.ErrDeadlineExceeded when the read
// deadline passed, os.ErrClosed after Close, or the poller's or the
// socket's own error.
func (s *sockFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, sysErr, waitErr := s.r.ReadRaw(p)
	switch {
	case waitErr != nil && errors.Is(waitErr, os.ErrDeadlineExceeded):
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: waitErr}
	case waitErr != nil && s.closed.Load():
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: os.ErrClosed}
	case waitErr != nil:
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: waitErr}
	case sysErr != nil:
		return 0, &os.PathError{Op: "read", Path: s.Name(), Err: sysErr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// sockType returns the socket type of fd, or an error matching errNotHosted
// when fd is not an open socket.
func sockType(fd int) (int, error) {
	st, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil {
		return 0, fmt.Errorf("%w: fd %d is not an open socket: %v", errNotHosted, fd, err)
	}
	return st, nil
}

// socketListener accepts stream connections on the listening socket the
// host passed. Each connection is an *os.File in non-blocking mode.
type socketListener struct {
	f      *os.File
	raw    syscall.RawConn
	closed atomic.Bool
}

// newSocketListener makes a listener of f, the hostedFile of fd, a socket
// that listens.
func newSocketListener(f *os.File, fd int) (*socketListener, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: fd %d: %v", errNotHosted, fd, err)
	}
	var listening int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		listening, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
	}); err != nil || serr != nil || listening == 0 {
		return nil, fmt.Errorf("%w: fd %d is not a listening socket", errNotHosted, fd)
	}
	return &socketListener{f: f, raw: raw}, nil
}

// Accept waits for the next connection. After Close it returns an error
// matching os.ErrClosed.
func (l *socketListener) Accept() (Conn, error) {
	var nfd int
	var aerr error
	err := l.raw.Read(func(fd uintptr) bool {
		for {
			nfd, aerr = acceptSocket(int(fd))
			switch aerr {
			case syscall.EINTR, syscall.ECONNABORTED:
				continue
			case syscall.EAGAIN:
				return false // wait until the socket is readable
			}
			return true
		}
	})
	switch {
	case l.closed.Load():
		if aerr == nil && err == nil {
			syscall.Close(nfd)
		}
		return nil, fmt.Errorf("child: accepting a stream connection: %w", os.ErrClosed)
	case err != nil:
		return nil, fmt.Errorf("child: accepting a stream connection: %w", err)
	case aerr != nil:
		return nil, os.NewSyscallError("accept", aerr)
	}
	return newSockFile(os.NewFile(uintptr(nfd), "skulk-stream")), nil
}

// Close closes the socket; a waiting Accept returns.
func (l *socketListener) Close() error {
	l.closed.Store(true)
	return l.f.Close()
}

// dialUnix connects to the Unix stream socket at path (the host's call
// socket, docs/protocol.md §8) and returns the connection as a pollable,
// close-on-exec *os.File (a sockFile), without package net.
func dialUnix(path string) (Conn, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return newSockFile(os.NewFile(uintptr(fd), "calls")), nil
}

// shutdownWrite ends nc's writing (shutdown SHUT_WR) and leaves its
// reading open: the peer sees the hang-up, and its answer can still be
// read. It reports whether it could.
func shutdownWrite(nc Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_WR) }); err != nil {
		return false
	}
	return serr == nil
}
