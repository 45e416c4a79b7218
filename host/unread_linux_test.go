package host

import (
	"net"
	"testing"
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
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: t.TempDir() + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
