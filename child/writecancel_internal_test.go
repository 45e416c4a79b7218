package child

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// A cancel written while the host has not read the caller's chunks (the
// socket is full and more wait in the Writer's queue) reaches the host
// whole, after those chunks, before the writing is shut down: the host,
// once it reads, finds every chunk and then the cancelled frame.
func TestWriteCancelFlushesBeforeShutdown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "calls.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	nc, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer nc.Close()
	hostEnd, err := ln.Accept()
	require.NoError(t, err)
	defer hostEnd.Close()

	l := packetio.DefaultLimits()
	c := &Call{id: "c1", nc: nc, w: coalesce.New(nc, l), next: 1}
	defer c.w.Close() // after nc's Close (defers run last first)

	// Chunks that fill the socket, and 8 more (32 KB, under the Writer's
	// queue bound) that wait in the Writer's queue: how many fill it is
	// measured on a socket of the same kind, one packet per write, as the
	// Writer writes them while it is idle.
	payload := frame.MustPayload(map[string]any{"s": strings.Repeat("x", 4000)})
	chunk := func(seq uint64) *wire.Frame {
		f, err := frame.NewChunk(c.id, frame.CallerToProvider, seq, payload, nil)
		require.NoError(t, err)
		return &wire.Frame{Frame: f}
	}
	fill := socketCapacity(t, chunk(1)) + 8
	for range fill {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.w.Write(ctx, coalesce.Request, chunk(c.next))
		cancel()
		require.NoError(t, err, "the queue was full: the measured capacity is off")
		c.next++
	}

	read := make(chan []byte, 1) // one value, from the goroutine below
	go func() {                  // the host's side: stopped by the caller's shutdown, or its deadline
		hostEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(hostEnd)
		read <- b
	}()
	c.sendMu.Lock()
	require.NoError(t, c.writeCancel())
	c.sendMu.Unlock()

	r := packetio.NewReader(bytes.NewReader(<-read), l)
	var last frame.Frame
	chunks := uint64(0)
	for {
		pkt, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "after %d chunks", chunks)
		p, ok := pkt.(*wire.Frame)
		require.True(t, ok)
		last = p.Frame
		if last.Kind == frame.KindChunk {
			chunks++
		}
	}
	require.Equal(t, c.next-2, chunks, "every chunk the Writer took")
	require.Equal(t, frame.KindCancelled, last.Kind, "the cancelled frame last")
	require.Equal(t, c.next-1, last.Sequence)
}

// socketCapacity returns how many packets p, each written on its own,
// a Unix stream socket nobody reads takes before a write would wait.
func socketCapacity(t *testing.T, p wire.Packet) int {
	b, err := packetio.Encode(p, packetio.DefaultLimits())
	require.NoError(t, err)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	require.NoError(t, syscall.SetNonblock(fds[0], true))
	for n := 0; ; n++ {
		require.Less(t, n, 100000)
		m, err := syscall.Write(fds[0], b)
		if err != nil || m < len(b) {
			return n
		}
	}
}
