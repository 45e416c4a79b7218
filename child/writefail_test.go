//go:build linux

package child_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWriteFailureClosesConnection: a connection the child can no longer
// write to (here the host shut its read side, so every write fails with
// EPIPE) is closed once the call ends, so the host sees the failure rather
// than waiting for an end that cannot come.
func TestWriteFailureClosesConnection(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		require.NoError(t, s.Request("c1", "count", map[string]any{"n": 100000}))
		require.NoError(t, s.Conn.CloseRead())
		raw, err := s.Conn.SyscallConn()
		require.NoError(t, err)
		end := time.Now().Add(wait)
		for {
			var hup bool
			require.NoError(t, raw.Control(func(fd uintptr) {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				if n, err := unix.Poll(fds, 100); err == nil && n == 1 {
					hup = fds[0].Revents&unix.POLLHUP != 0
				}
			}))
			if hup {
				return // the child closed its end
			}
			require.False(t, time.Now().After(end), "the child kept a connection it cannot write to")
		}
	})
}
