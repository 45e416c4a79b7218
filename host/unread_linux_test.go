package host

import (
	"net"
	"testing"

	"github.com/skulkrt/skulk/internal/testnet"
)

// TestUnread: unread sees bytes written to a connection's peer and not yet
// read, and nothing once they were read.
func TestUnread(t *testing.T) {
	a, b := net.Pipe() // no descriptor: unread cannot tell
	defer a.Close()
	defer b.Close()
	if unread(a) {
		t.Error("unread is true for a connection without a descriptor")
	}
	c, s := testnet.SocketPair(t)
	if unread(s) {
		t.Fatal("unread before anything was written")
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if !unread(s) {
		t.Fatal("4 bytes written, unread says none wait")
	}
	if _, err := s.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if unread(s) {
		t.Fatal("unread after every byte was read")
	}
}
