package sockpair

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFilesCloseOnExecConnected: both ends are close-on-exec and connected
// to each other.
func TestFilesCloseOnExecConnected(t *testing.T) {
	a, b, err := Files("a", "b")
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()
	for _, f := range []interface{ Fd() uintptr }{a, b} {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFD, 0)
		if errno != 0 || flags&syscall.FD_CLOEXEC == 0 {
			require.FailNow(t, fmt.Sprintf("fd %d: flags %#x, errno %v: not close-on-exec", f.Fd(), flags, errno))
		}
	}
	if _, err := a.Write([]byte("x")); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	buf := make([]byte, 1)
	if n, err := b.Read(buf); err != nil || n != 1 || buf[0] != 'x' {
		require.FailNow(t, fmt.Sprintf("read %d %q %v", n, buf, err))
	}
}
