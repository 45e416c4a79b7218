//go:build unix

package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

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

// connPairs are the kinds of socket a Writer writes to with writev.
var connPairs = []struct {
	name string
	pair func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser)
}{
	{"net", func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) {
		a, b := testnet.SocketPair(t)
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

// TestVectoredPeerGone: a write to a socket whose peer closed fails with
// the system's error, and the Writer keeps it.
func TestVectoredPeerGone(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) {
			a, b := cp.pair(t)
			require.NoError(t, b.Close())
			w := New(a, wire.Limits{})
			err := w.Write(context.Background(), Request, &wire.Ping{Nonce: 1})
			require.ErrorIs(t, err, syscall.EPIPE)
			require.ErrorIs(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 2}), syscall.EPIPE)
			require.ErrorIs(t, w.Close(), syscall.EPIPE)
		})
	}
}

// TestWriterOverSocketAllocatesNothing is TestWriterWriteAllocatesNothing
// on the writev path.
func TestWriterOverSocketAllocatesNothing(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) {
			a, b := cp.pair(t)
			read := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, b); read <- err }() // ends when a is closed
			w := New(a, wire.Limits{})
			p := smallChunk(t, "c1", 1)
			allocs := testing.AllocsPerRun(200, func() {
				require.NoError(t, w.Write(context.Background(), Stream, p))
				require.NoError(t, w.Flush())
			})
			require.NoError(t, w.Close())
			require.NoError(t, a.Close())
			require.NoError(t, <-read)
			require.Zero(t, allocs)
		})
	}
}

// waitWriter waits until cond, called with w.mu held, holds: the state a
// sender that blocks in w leaves (w.spare nil: a batch is being written;
// w.cur.atts: attachments queued behind it). The test fails with what after
// 10 s.
func waitWriter(t *testing.T, w *Writer, what string, cond func(w *Writer) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		ok := cond(w)
		w.mu.Unlock()
		if ok {
			return
		}
		require.True(t, time.Now().Before(deadline), what)
	}
}

// TestWriterContextDetachesAttachment: a sender whose context ends while
// its attachment waits for a peer that does not read gets a
// *DetachedError with the cause at once, and may overwrite its buffer: the
// packet still arrives whole with the bytes it had when it was sent, and
// what was queued after it follows it. Both the sender's own write (an
// idle Writer) and a packet queued behind another are covered.
func TestWriterContextDetachesAttachment(t *testing.T) {
	errStop := errors.New("stop")
	const size = 4 << 20 // more than the socket buffers hold
	mediaOf := func(seq uint64, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(seq) + byte(i*7)
		}
		return b
	}
	media := func(seq uint64, data []byte) *wire.Frame {
		f, err := frame.NewChunk("c1", frame.ProviderToCaller, seq, nil,
			&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
		require.NoError(t, err)
		return &wire.Frame{Frame: f}
	}
	for _, cp := range connPairs {
		for _, behind := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/behind=%v", cp.name, behind), func(t *testing.T) {
				a, b := cp.pair(t)
				w := New(a, wire.Limits{})
				seq := uint64(1)
				want := map[uint64][]byte{}
				first := make(chan error, 1)
				if behind { // a plain packet in flight, blocked by the peer
					want[seq] = mediaOf(seq, size)
					p := media(1, want[1])
					go func() { first <- w.Write(context.Background(), Stream, p) }() // ends once b is read below
					waitWriter(t, w, "the first packet never went out", func(w *Writer) bool { return w.spare == nil })
					seq++
				} else {
					first <- nil
				}
				data := mediaOf(seq, size)
				want[seq] = bytes.Clone(data)
				ctx, cancel := context.WithCancelCause(context.Background())
				sent := make(chan error, 1)
				go func() { sent <- w.Write(ctx, Stream, media(seq, data)) }() // ends with the cancel
				// Being written (or queued behind the first): nothing
				// reads b, so the sender cannot be done.
				waitWriter(t, w, "the packet was never written or queued", func(w *Writer) bool {
					return w.spare == nil && (!behind || len(w.cur.atts) == 1)
				})
				select {
				case err := <-sent:
					require.FailNow(t, fmt.Sprintf("returned %v with the peer not reading", err))
				default:
				}
				cancel(errStop)
				var err error
				select {
				case err = <-sent:
				case <-time.After(5 * time.Second):
					require.FailNow(t, "still waiting 5 s after its context ended")
				}
				var de *DetachedError
				require.ErrorAs(t, err, &de)
				require.ErrorIs(t, err, errStop)
				for i := range data {
					data[i] = 0xff // the caller reuses its buffer
				}
				after := &wire.Frame{Frame: frame.Frame{CallID: "c1", Direction: frame.ProviderToCaller, Sequence: seq + 1, Kind: frame.KindCompleted}}
				require.NoError(t, w.Write(context.Background(), Stream, after))
				r := packetio.NewReader(b, wire.Limits{})
				for s := uint64(1); s <= seq; s++ {
					p, err := r.ReadPacket()
					require.NoError(t, err)
					f := p.(*wire.Frame)
					require.Equal(t, s, f.Sequence)
					require.True(t, bytes.Equal(want[s], f.Media.(*frame.InlineMedia).Data), "packet %d's media changed", s)
				}
				p, err := r.ReadPacket()
				require.NoError(t, err)
				require.Equal(t, frame.KindCompleted, p.(*wire.Frame).Kind)
				require.NoError(t, <-first)
				require.NoError(t, w.Close())
			})
		}
	}
}

// TestWriterInterruptKeepsOwnersDeadline: a sender writing its own
// attachment is interrupted, when its context ends, by a deadline in the
// past; the Writer then puts its owner's deadline (SetWriteDeadline) back
// for the flusher, which writes the rest: with a peer that never reads,
// that write fails once the owner's deadline passes, rather than at once
// (the past deadline left in place) or never (the deadline lost).
//
// The kinds of socket run in parallel: each waits a second for its own
// deadline, on its own socket pair.
func TestWriterInterruptKeepsOwnersDeadline(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) {
			t.Parallel()
			a, _ := cp.pair(t)
			w := New(a, wire.Limits{})
			const ownerWait = time.Second
			setAt := time.Now()
			require.NoError(t, w.SetWriteDeadline(setAt.Add(ownerWait)))
			f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil,
				&frame.InlineMedia{Data: make([]byte, 4<<20), MediaType: "application/octet-stream"})
			require.NoError(t, err)
			ctx, cancel := context.WithCancelCause(context.Background())
			sent := make(chan error, 1)
			go func() { sent <- w.Write(ctx, Stream, &wire.Frame{Frame: f}) }() // ends with the cancel
			waitWriter(t, w, "the packet never went out", func(w *Writer) bool { return w.spare == nil })
			errStop := errors.New("stop")
			cancel(errStop)
			var de *DetachedError
			select {
			case err = <-sent:
				require.ErrorAs(t, err, &de)
				require.ErrorIs(t, err, errStop)
			case <-time.After(5 * time.Second):
				require.FailNow(t, "still waiting 5 s after its context ended")
			}
			flushed := make(chan error, 1)
			go func() { flushed <- w.Flush() }() // ends when the flusher's write fails
			select {
			case err = <-flushed:
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			case <-time.After(10 * time.Second):
				require.FailNow(t, "the flusher's write outlived the owner's deadline")
			}
			require.GreaterOrEqual(t, time.Since(setAt), ownerWait-10*time.Millisecond,
				"the write failed before the owner's deadline: the interruption's was left in place")
			require.ErrorIs(t, w.Close(), os.ErrDeadlineExceeded)
		})
	}
}

// TestWriterBlockingFileDetachWaits: over an *os.File of a blocking
// descriptor, whose writev blocks in the kernel, a sender whose context
// ends while the flusher writes its attachment waits for it as a Stream write
// does, and holds up no one else: TryWrite returns at once.
func TestWriterBlockingFileDetachWaits(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	defer b.Close()
	defer a.Close()
	w := New(a, wire.Limits{})
	media := func(seq uint64) *wire.Frame {
		f, err := frame.NewChunk("c1", frame.ProviderToCaller, seq, nil,
			&frame.InlineMedia{Data: make([]byte, 4<<20), MediaType: "application/octet-stream"})
		require.NoError(t, err)
		return &wire.Frame{Frame: f}
	}
	first := make(chan error, 1)
	go func() { first <- w.Write(context.Background(), Stream, media(1)) }() // written by its sender, blocked until b is read
	waitWriter(t, w, "the first packet never went out", func(w *Writer) bool { return w.spare == nil })
	ctx, cancel := context.WithCancelCause(context.Background())
	second := make(chan error, 1)
	p2 := media(2)
	go func() { second <- w.Write(ctx, Stream, p2) }() // queued behind the first
	waitWriter(t, w, "the second packet was never queued", func(w *Writer) bool { return len(w.cur.atts) == 1 })
	r := packetio.NewReader(b, wire.Limits{})
	_, err = r.ReadPacket() // the first: the flusher goes on with the second, blocked
	require.NoError(t, err)
	require.NoError(t, <-first)
	// The flusher took the second batch and is blocked in its writev.
	waitWriter(t, w, "the second packet never went out", func(w *Writer) bool { return w.spare == nil && len(w.cur.atts) == 0 })
	cancel(errors.New("stop"))
	small := &wire.Frame{Frame: frame.Frame{CallID: "c1", Direction: frame.ProviderToCaller, Sequence: 3, Kind: frame.KindCompleted}}
	tried := make(chan error, 1)
	go func() { _, err := w.TryWrite(small); tried <- err }()
	select {
	case err := <-tried:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "TryWrite blocked behind a blocking writev")
	}
	select {
	case err := <-second:
		require.FailNow(t, fmt.Sprintf("the second sender returned %v with its attachment unwritten", err))
	default:
	}
	for s := uint64(2); s <= 3; s++ {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		require.Equal(t, s, p.(*wire.Frame).Sequence)
	}
	require.NoError(t, <-second) // written, as by a Stream write
	require.NoError(t, w.Close())
}

// TestWriterRequestDoesNotWait: a request larger than the socket takes goes
// out partly from its sender, which returns without waiting for the peer
// to read; the flusher writes the rest, and everything arrives in order
// (the peer reads only after the sender returned).
func TestWriterRequestDoesNotWait(t *testing.T) {
	for _, cp := range connPairs {
		t.Run(cp.name, func(t *testing.T) {
			a, b := cp.pair(t)
			w := New(a, wire.Limits{})
			var ps []wire.Packet
			for i := uint64(1); i <= 64; i++ { // 64 × about 16 KiB: more than the socket buffers
				f, err := frame.NewChunk("c1", frame.ProviderToCaller, i,
					frame.MustPayload(map[string]any{"text": string(bytes.Repeat([]byte{'z'}, 16<<10))}), nil)
				require.NoError(t, err)
				ps = append(ps, &wire.Frame{Frame: f})
			}
			sent := make(chan error, 1)
			go func() { sent <- w.Write(context.Background(), Request, ps...) }() // returns without the peer reading, or the test fails below
			select {
			case err := <-sent:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				require.FailNow(t, "a Request waited for the peer to read")
			}
			r := packetio.NewReader(b, wire.Limits{})
			for i := uint64(1); i <= 64; i++ {
				p, err := r.ReadPacket()
				require.NoError(t, err)
				require.Equal(t, i, p.(*wire.Frame).Sequence)
			}
			require.NoError(t, w.Close())
		})
	}
}

// TestWriterRequestThenFlush: Flush after a Request that a full socket
// split waits until the flusher has written the rest, and returns the
// error of that write when the peer is gone.
func TestWriterRequestThenFlush(t *testing.T) {
	big := func() []wire.Packet {
		var ps []wire.Packet
		for i := uint64(1); i <= 64; i++ {
			f, err := frame.NewChunk("c1", frame.ProviderToCaller, i,
				frame.MustPayload(map[string]any{"text": string(bytes.Repeat([]byte{'z'}, 16<<10))}), nil)
			require.NoError(t, err)
			ps = append(ps, &wire.Frame{Frame: f})
		}
		return ps
	}
	t.Run("written", func(t *testing.T) {
		a, b := filePair(t)
		w := New(a, wire.Limits{})
		require.NoError(t, w.Write(context.Background(), Request, big()...))
		flushed := make(chan error, 1)
		go func() { flushed <- w.Flush() }() // returns once the peer has read enough
		select {
		case err := <-flushed:
			require.FailNow(t, fmt.Sprintf("Flush returned %v before the peer read the rest", err))
		case <-time.After(100 * time.Millisecond):
		}
		r := packetio.NewReader(b, wire.Limits{})
		for i := uint64(1); i <= 64; i++ {
			p, err := r.ReadPacket()
			require.NoError(t, err)
			require.Equal(t, i, p.(*wire.Frame).Sequence)
		}
		require.NoError(t, <-flushed)
		require.NoError(t, w.Close())
	})
	t.Run("peer gone", func(t *testing.T) {
		a, b := filePair(t)
		w := New(a, wire.Limits{})
		require.NoError(t, w.Write(context.Background(), Request, big()...))
		require.NoError(t, b.Close())
		require.ErrorIs(t, w.Flush(), syscall.EPIPE)
		require.ErrorIs(t, w.Close(), syscall.EPIPE)
	})
}
