package host

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
)

// TestUnread: unread sees bytes written to a connection's peer and not yet
// read, and nothing once they were read.
func TestUnread(t *testing.T) {
	a, b := net.Pipe() // no descriptor: unread cannot tell
	defer a.Close()
	defer b.Close()
	assert.EqualValues(t, 0, unread(a), "unread counts bytes on a connection without a descriptor")
	c, s := testnet.SocketPair(t)
	require.EqualValues(t, 0, unread(s), "unread before anything was written")
	if _, err := c.Write([]byte("pong")); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	if n := unread(s); n != 4 {
		require.FailNow(t, fmt.Sprintf("4 bytes written, unread says %d wait", n))
	}
	if _, err := s.Read(make([]byte, 4)); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	require.EqualValues(t, 0, unread(s), "unread after every byte was read")
}
