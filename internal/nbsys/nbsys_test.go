//go:build unix

package nbsys_test

import (
	"syscall"
	"testing"

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
