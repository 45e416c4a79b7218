//go:build unix

package child

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// rawFD returns a new fd of f that is not close-on-exec and blocking, as a
// child's fds 3 and 4 are when it starts, and closes f.
func rawFD(t *testing.T, f *os.File) int {
	t.Helper()
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd())) // Dup's fd is not close-on-exec
	require.NoError(t, err)
	require.NoError(t, syscall.SetNonblock(fd, false))
	return fd
}

// fdFlags returns fd's descriptor flags and its file status flags.
func fdFlags(t *testing.T, fd uintptr) (fdFlags, flFlags int) {
	t.Helper()
	a, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFD, 0)
	require.Zero(t, errno)
	b, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	require.Zero(t, errno)
	return int(a), int(b)
}

// requireHostedFlags: fd is close-on-exec and non-blocking.
func requireHostedFlags(t *testing.T, f *os.File) {
	t.Helper()
	raw, err := f.SyscallConn()
	require.NoError(t, err)
	require.NoError(t, raw.Control(func(fd uintptr) {
		fdf, fl := fdFlags(t, fd)
		require.NotZero(t, fdf&syscall.FD_CLOEXEC, "close-on-exec")
		require.NotZero(t, fl&syscall.O_NONBLOCK, "non-blocking")
	}))
}

// hostedPair returns one end of a new socketpair taken over by hostedFile,
// and its fd; both ends are closed when t ends.
func hostedPair(t *testing.T, name string) (*os.File, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fds[1]) })
	f, err := hostedFile(fds[0], name)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f, fds[0]
}

// listenFile returns a listening Unix socket as a file, and its path.
func listenFile(t *testing.T) (*os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false) // the file's socket still listens at path
	defer ln.Close()
	f, err := ln.File()
	require.NoError(t, err)
	return f, path
}

// TestHostedFile: the fds a host passed become close-on-exec, so that no
// process the provider starts holds the host's connections open, and
// non-blocking, so that deadlines work; an fd that is not a stream socket
// is refused with errNotHosted.
func TestHostedFile(t *testing.T) {
	f, _ := hostedPair(t, "control")
	requireHostedFlags(t, f)
	require.NoError(t, f.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
	_, err := f.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	pipeFD := rawFD(t, r)
	defer syscall.Close(pipeFD)
	_, err = hostedFile(pipeFD, "control")
	require.ErrorIs(t, err, errNotHosted)

	dg, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	require.NoError(t, err)
	defer syscall.Close(dg)
	_, err = hostedFile(dg, "control")
	require.ErrorIs(t, err, errNotHosted)

	_, err = hostedFile(pipeFD+1000, "control") // not open
	require.ErrorIs(t, err, errNotHosted)
}

// TestSocketListener: the hosted stream listener accepts connections as
// close-on-exec, non-blocking files; Close wakes an Accept that waits and
// fails every later one with os.ErrClosed; a socket that does not listen
// is refused.
func TestSocketListener(t *testing.T) {
	lf, path := listenFile(t)
	fd := rawFD(t, lf)
	f, err := hostedFile(fd, "streams")
	require.NoError(t, err)
	ln, err := newSocketListener(f, fd)
	require.NoError(t, err)

	dialed, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer dialed.Close()
	c, err := ln.Accept()
	require.NoError(t, err)
	requireHostedFlags(t, c.(*sockFile).File)
	_, err = dialed.Write([]byte("hi"))
	require.NoError(t, err)
	buf := make([]byte, 2)
	_, err = c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hi", string(buf))
	require.NoError(t, c.Close())

	accepted := make(chan error, 1)
	go func() { _, err := ln.Accept(); accepted <- err }() // ends with Close below
	select {
	case err := <-accepted:
		require.FailNow(t, fmt.Sprintf("Accept returned with nothing to accept: %v", err))
	case <-time.After(50 * time.Millisecond): // it waits
	}
	require.NoError(t, ln.Close())
	select {
	case err := <-accepted:
		require.ErrorIs(t, err, os.ErrClosed)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close did not wake Accept")
	}
	_, err = ln.Accept()
	require.ErrorIs(t, err, os.ErrClosed)

	connected, cfd := hostedPair(t, "streams")
	_, err = newSocketListener(connected, cfd)
	require.ErrorIs(t, err, errNotHosted)
}

// TestSockFileRead: a hosted socket's raw reads give what an *os.File's
// Read gives: the bytes, an error matching os.ErrDeadlineExceeded when the
// read deadline passes (the connection still readable after it is
// cleared), io.EOF once the peer closed, and os.ErrClosed after Close,
// also for a Read that waits when Close comes.
func TestSockFileRead(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	peer := os.NewFile(uintptr(fds[1]), "peer")
	defer peer.Close()
	f, err := hostedFile(fds[0], "sock")
	require.NoError(t, err)
	c := newSockFile(f)
	defer c.Close()
	sf, ok := c.(*sockFile)
	require.True(t, ok, "a hosted socket is read raw")
	// Its Fd leaves the socket non-blocking, as the raw reads need.
	flags, err := unix.FcntlInt(sf.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.NotZero(t, flags&unix.O_NONBLOCK, "Fd made the socket blocking")
	buf := make([]byte, 8)

	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err = c.Read(buf)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))

	_, err = peer.Write([]byte("hi"))
	require.NoError(t, err)
	n, err := c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hi", string(buf[:n]))

	read := make(chan error, 1)
	go func() { _, err := c.Read(buf); read <- err }() // ends with the peer's close below
	select {
	case err := <-read:
		require.FailNow(t, fmt.Sprintf("Read returned with nothing to read: %v", err))
	case <-time.After(20 * time.Millisecond): // it waits
	}
	require.NoError(t, peer.Close())
	select {
	case err := <-read:
		require.ErrorIs(t, err, io.EOF)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Read still waits after the peer closed")
	}

	require.NoError(t, c.Close())
	_, err = c.Read(buf)
	require.ErrorIs(t, err, os.ErrClosed)

	// A Read that waits when Close comes.
	fds, err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fds[1])
	f, err = hostedFile(fds[0], "sock")
	require.NoError(t, err)
	c = newSockFile(f)
	go func() { _, err := c.Read(buf); read <- err }() // ends with Close below
	// It waits by now (or Close comes first: the same error).
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Close())
	select {
	case err := <-read:
		require.ErrorIs(t, err, os.ErrClosed)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Read still waits after Close")
	}
}
