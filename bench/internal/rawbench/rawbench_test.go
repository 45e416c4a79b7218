package rawbench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs Serve on one end of a pipe and returns the other end and a
// channel closed when Serve returned, after it stored Serve's result in
// *result.
func serve(t *testing.T, result *error) (net.Conn, <-chan struct{}) {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() { // ends at EOF (the cleanup closes a) or at a bad command
		defer close(done)
		*result = Serve(b)
		b.Close()
	}()
	t.Cleanup(func() { a.Close(); <-done })
	return a, done
}

func TestCommands(t *testing.T) {
	var result error
	c, _ := serve(t, &result)
	c.Write(Command(OpStream, 3, 64))
	for i := range 3 {
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[:]) != 64 {
			require.FailNow(t, fmt.Sprintf("message %d: length %v, %v", i, hdr, err))
		}
		msg := make([]byte, 64)
		io.ReadFull(c, msg)
		if binary.LittleEndian.Uint64(msg) != uint64(i) {
			assert.Fail(t, fmt.Sprintf("message %d numbered %d", i, binary.LittleEndian.Uint64(msg)))
		}
	}
	c.Write(Command(OpCopy, 1000, 300))
	if n, err := io.CopyN(io.Discard, c, 1000); n != 1000 || err != nil {
		require.FailNow(t, fmt.Sprintf("copy: %d, %v", n, err))
	}
	go c.Write(append(Command(OpEcho, 2, 4), "pingpong"...)) // ends when Serve has read it
	got := make([]byte, 8)
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, []byte("pingpong")) {
		require.FailNow(t, fmt.Sprintf("echo = %q, %v", got, err))
	}
}

func TestBadCommand(t *testing.T) {
	var result error
	c, done := serve(t, &result)
	go c.Write(Command(9, 1, 1)) // ends when Serve has read it
	<-done
	require.ErrorIsf(t, result, ErrCommand, "Serve = %v, want ErrCommand", result)
}
