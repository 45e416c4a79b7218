//go:build unix

package nbsys_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/skulkrt/skulk/internal/nbsys"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRead reads a non-blocking Unix socket: EAGAIN while it is empty,
// the bytes written, then 0 (EOF) once the peer closed, and EBADF for a
// closed descriptor.
func TestRead(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	a, b := fds[0], fds[1]
	defer syscall.Close(a)
	require.NoError(t, syscall.SetNonblock(a, true))

	buf := make([]byte, 8)
	_, err = nbsys.Read(a, buf)
	require.ErrorIs(t, err, syscall.EAGAIN)

	_, err = syscall.Write(b, []byte("hello"))
	require.NoError(t, err)
	n, err := nbsys.Read(a, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))

	n, err = nbsys.Read(a, nil)
	require.NoError(t, err)
	require.Zero(t, n, "an empty buffer reads nothing")

	require.NoError(t, syscall.Close(b))
	n, err = nbsys.Read(a, buf)
	require.NoError(t, err)
	require.Zero(t, n, "the peer closed: EOF")

	_, err = nbsys.Read(-1, buf)
	require.ErrorIs(t, err, syscall.EBADF)
}

// TestConnReadRaw reads a socket through its RawConn: onWait is called
// when the read finds it empty and the read returns once bytes come; then
// the end of the stream, and the deadline's error as the RawConn gives it.
func TestConnReadRaw(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.SetNonblock(fds[0], true))
	f := os.NewFile(uintptr(fds[0]), "a")
	defer f.Close()
	peer := os.NewFile(uintptr(fds[1]), "b")
	rc, err := f.SyscallConn()
	require.NoError(t, err)

	waits := make(chan struct{}, 1)
	c := nbsys.NewConn(rc, func() {
		select {
		case waits <- struct{}{}:
		default:
		}
	})
	go func() { // ends once it wrote, after the read began to wait
		<-waits
		peer.Write([]byte("hi"))
	}()
	buf := make([]byte, 8)
	n, sysErr, waitErr := c.ReadRaw(buf)
	require.NoError(t, sysErr)
	require.NoError(t, waitErr)
	require.Equal(t, "hi", string(buf[:n]))

	require.NoError(t, f.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
	_, _, waitErr = c.ReadRaw(buf)
	require.ErrorIs(t, waitErr, os.ErrDeadlineExceeded)

	require.NoError(t, f.SetReadDeadline(time.Time{}))
	require.NoError(t, peer.Close())
	n, sysErr, waitErr = c.ReadRaw(buf)
	require.Zero(t, n, "the peer closed: the end of the stream")
	require.NoError(t, sysErr)
	require.NoError(t, waitErr)
}
