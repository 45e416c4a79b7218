//go:build unix

package writev

import (
	"bytes"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// filePair returns the two ends of a Unix stream socketpair as *os.File in
// non-blocking mode, as a hosted child holds its connections.
func filePair(t testing.TB) (*os.File, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// socketPair returns the two ends of a connected Unix stream socket.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	require.NoError(t, err)
	s, err := l.AcceptUnix()
	require.NoError(t, err)
	return c, s
}

// connPairs are the kinds of socket written with writev.
var connPairs = []struct {
	name string
	pair func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser)
}{
	{"net", func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) {
		a, b := socketPair(t)
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}},
	{"file", func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) { return filePair(t) }},
}

// smallSendBuffer makes c's socket send buffer as small as the kernel
// allows, so that writes of a few KiB are partial.
func smallSendBuffer(t *testing.T, c io.ReadWriteCloser) {
	raw, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 1024)
	}))
	require.NoError(t, serr)
}

// TestVectoredManyPiecesPartialWrites writes more pieces than one writev
// takes, some empty, through a send buffer too small for them, to a peer
// that reads in small steps: every byte arrives, in order.
func TestVectoredManyPiecesPartialWrites(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) {
			a, b := cp.pair(t)
			smallSendBuffer(t, a)
			var v Vectored
			v.Init(a)
			require.NotNil(t, v.raw, "a socket must take the writev path")
			var pieces [][]byte
			var want []byte
			for i := range 3*maxIOV + 7 {
				p := bytes.Repeat([]byte{byte(i)}, i%97)
				pieces = append(pieces, p)
				want = append(want, p...)
			}
			got := make(chan []byte, 1)
			go func() { // ends when it has read len(want) bytes or b fails
				var buf bytes.Buffer
				step := make([]byte, 700)
				for buf.Len() < len(want) {
					n, err := b.Read(step)
					buf.Write(step[:n])
					if err != nil {
						break
					}
				}
				got <- buf.Bytes()
			}()
			v.Load(pieces)
			require.NoError(t, v.Write())
			require.Equal(t, want, <-got)
			for _, iov := range v.vec {
				require.Nil(t, iov.Base, "an iovec still points at a written piece")
			}
		})
	}
}

// TestVectoredFileDeadline: a write deadline on an *os.File socket ends a
// write the peer does not take, as it does on a net.Conn
// (coalesce.TestWriterBackpressureOverSocket).
func TestVectoredFileDeadline(t *testing.T) {
	a, _ := filePair(t)
	require.NoError(t, a.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
	var v Vectored
	v.Init(a)
	big := make([]byte, 8<<20) // more than the socket buffers hold
	v.Load([][]byte{big})
	require.ErrorIs(t, v.Write(), os.ErrDeadlineExceeded)
}
