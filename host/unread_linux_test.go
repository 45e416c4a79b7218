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
	if unread(a) != 0 {
		t.Error("unread counts bytes on a connection without a descriptor")
	}
	c, s := testnet.SocketPair(t)
	if unread(s) != 0 {
		t.Fatal("unread before anything was written")
	}
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if n := unread(s); n != 4 {
		t.Fatalf("4 bytes written, unread says %d wait", n)
	}
	if _, err := s.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if unread(s) != 0 {
		t.Fatal("unread after every byte was read")
	}
}
