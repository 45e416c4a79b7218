//go:build linux

package child_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWriteFailureClosesConnection: a connection the child can no longer
// write to (here the host shut its read side before the request, so every
// write of the child fails with EPIPE) is closed once the call ends, so
// the host sees the failure rather than waiting for an end that cannot
// come.
//
// The read side is shut before the request, not after it: a write of the
// child already waiting for room in a full socket when the host shuts its
// read side is never woken (Linux reports no poll event for the peer's
// SHUT_RD, and the unread bytes keep the socket full), so the child sees a
// host that does not read, which it waits for as for any backpressure.
// Shut after the request, a host descheduled between the two let the
// child fill the socket first, and the test waited out its 10 s.
func TestWriteFailureClosesConnection(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		require.NoError(t, s.Conn.CloseRead())
		require.NoError(t, s.Request("c1", "count", map[string]any{"n": 100000}))
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
