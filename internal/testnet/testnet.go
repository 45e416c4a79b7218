// Package testnet holds socket-level helpers for tests of Skulk's children
// and hosts: connected AF_UNIX socketpairs, a stream listener in a private
// directory, a small test host that speaks the wire protocol (handshake,
// ping, cancel, drain on the control connection; invoke, caller frames and
// provider frames on stream connections), and a way to start a provider
// binary exactly as docs/protocol.md §1 says (fds 3 and 4, SKULK_* environment).
//
// It imports neither child nor host, so both can use it in their tests,
// the in-package ones included. Package skulktest, the public face of the
// same helpers, imports both, so only tests outside those two packages can
// use it; they do. skulktest is built on this package: its Peer and Stream
// are a Host and a Stream with skulktest's Config, its ExecPeer starts the
// child with Exec.
package testnet

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/skulkrt/skulk/internal/sockpair"
)

// SocketPair returns the two ends of a connected AF_UNIX SOCK_STREAM
// socketpair. Both are closed when the test ends.
func SocketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fa, fb, err := SocketPairFiles()
	if err != nil {
		t.Fatal(err)
	}
	a, err := FileConn(fa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FileConn(fb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// SocketPairFiles returns the two ends of a connected AF_UNIX SOCK_STREAM
// socketpair as files (close-on-exec; exec.Cmd.ExtraFiles clears that for
// the files it passes). The caller closes them.
func SocketPairFiles() (*os.File, *os.File, error) {
	a, b, err := sockpair.Files("socketpair-a", "socketpair-b")
	if err != nil {
		return nil, nil, fmt.Errorf("testnet: %w", err)
	}
	return a, b, nil
}

// FileConn turns a socket file into a *net.UnixConn and closes the file
// (the connection holds its own duplicate of the fd).
func FileConn(f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("testnet: %s is not a Unix socket", f.Name())
	}
	return uc, nil
}

// PrivateDir returns a fresh directory of mode 0700, removed when the test
// ends. Its path is short, so socket paths in it fit sun_path.
func PrivateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "skulk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Listen returns a stream listener at <dir>/streams.sock in a fresh private
// directory, and its path. The listener is closed when the test ends.
func Listen(t testing.TB) (*net.UnixListener, string) {
	t.Helper()
	path := filepath.Join(PrivateDir(t), "streams.sock")
	ln, err := netListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

// netListenUnix listens at path. Close leaves the socket file in place, so
// a duplicate of the fd (a child's fd 4) still answers at path; the private
// directory's cleanup removes it.
func netListenUnix(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}
