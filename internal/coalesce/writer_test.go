package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// gateWriter lets Writes through only once gate is closed, and records them.
// Inside a synctest bubble a Write waiting at the gate is durably blocked.
type gateWriter struct {
	gate chan struct{}

	mu     sync.Mutex
	writes [][]byte // each Write's bytes, as passed (not copied)
	buf    bytes.Buffer
}

func newGateWriter() *gateWriter { return &gateWriter{gate: make(chan struct{})} }

func (g *gateWriter) Write(p []byte) (int, error) {
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, p)
	g.buf.Write(p)
	return len(p), nil
}

func (g *gateWriter) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.writes)
}

func (g *gateWriter) bytes() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return bytes.Clone(g.buf.Bytes())
}

// gatedChunkWriter returns a Writer to a closed gate, a small chunk and
// its encoding.
func gatedChunkWriter(t testing.TB) (*gateWriter, *Writer, *wire.Frame, []byte) {
	g := newGateWriter()
	p := smallChunk(t, "c1", 1)
	enc, err := packetio.Encode(p, wire.Limits{})
	require.NoError(t, err)
	return g, New(g, wire.Limits{}), p, enc
}

func smallChunk(t testing.TB, callID string, seq uint64) *wire.Frame {
	f, err := frame.NewChunk(callID, frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"i": seq}), nil)
	require.NoError(t, err)
	return &wire.Frame{Frame: f}
}

// TestWriterCoalesces queues many packets while the flusher is stuck in a
// write and checks that they leave in one further write, in order.
func TestWriterCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		const n = 200
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 1)))
		synctest.Wait() // the flusher holds packet 1 and waits at the gate
		for i := uint64(2); i <= n; i++ {
			require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", i)))
		}
		close(g.gate)
		require.NoError(t, w.Flush())
		require.Equal(t, 2, g.count(), "packet 1 alone, then the %d queued behind it in one write", n-1)
		require.NoError(t, w.Close())

		r := packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{})
		for i := uint64(1); i <= n; i++ {
			p, err := r.ReadPacket()
			require.NoError(t, err)
			require.Equal(t, i, p.(*wire.Frame).Sequence)
		}
		_, err := r.ReadPacket()
		require.ErrorIs(t, err, io.EOF)
	})
}

// TestWriterDoesNotWaitForLaterPackets: a lone packet is written at once.
func TestWriterDoesNotWaitForLaterPackets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		close(g.gate)
		w := New(g, wire.Limits{})
		defer w.Close()
		require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 1}))
		synctest.Wait() // no timer, no later packet: the write happened
		require.Equal(t, 1, g.count())
	})
}

// TestWriterBackpressure: while the connection takes nothing, a Stream write
// queues at most maxPending bytes of headers and then blocks.
func TestWriterBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, w, p, enc := gatedChunkWriter(t)
		size := len(enc)

		var mu sync.Mutex
		accepted := 0
		done := make(chan error, 1)
		go func() { // stopped by the gate opening, or by a write error
			for range 10 * maxPending / size {
				if err := w.Write(context.Background(), Stream, p); err != nil {
					done <- err
					return
				}
				mu.Lock()
				accepted++
				mu.Unlock()
			}
			done <- nil
		}()
		synctest.Wait()
		blocked := true
		select {
		case err := <-done:
			blocked = false
			done <- err
		default:
		}
		mu.Lock()
		queued := accepted * size
		mu.Unlock()
		close(g.gate)
		require.NoError(t, <-done)
		require.True(t, blocked, "a Stream write did not block")
		// The batch in the flusher's hands and the queue behind it: each
		// below maxPending plus one packet.
		require.Less(t, queued, 2*(maxPending+size))
		require.GreaterOrEqual(t, queued, maxPending)

		require.NoError(t, w.Close())
		require.Len(t, g.bytes(), 10*maxPending/size*size)
	})
}

// TestWriterContextStopsWaiting: a sender waiting for room in a full queue
// returns its context's cause once the context is done, with nothing
// queued, while a sender without one goes on waiting; both variants.
func TestWriterContextStopsWaiting(t *testing.T) {
	errStop := errors.New("stop")
	for name, send := range map[string]func(*Writer, context.Context, wire.Packet) error{
		"Stream": func(w *Writer, ctx context.Context, p wire.Packet) error { return w.Write(ctx, Stream, p) },
		"Reply":  func(w *Writer, ctx context.Context, p wire.Packet) error { return w.Write(ctx, Reply, p) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, w, p, enc := gatedChunkWriter(t)
				// Fill the batch under way and the queue behind it.
				sent := 0
				for range 2*maxPending/len(enc) + 2 {
					ok, err := w.TryWrite(p)
					require.NoError(t, err)
					if ok {
						sent++
					}
					synctest.Wait() // the flusher takes the first batch and blocks at the gate
				}
				ctx, cancel := context.WithCancelCause(context.Background())
				stopped := make(chan error, 1)
				go func() { stopped <- send(w, ctx, p) }() // ends with the cancel below
				plain := make(chan error, 1)
				go func() { plain <- w.Write(context.Background(), Stream, p) }() // ends once the gate opens
				synctest.Wait()
				select {
				case err := <-stopped:
					require.FailNow(t, fmt.Sprintf("returned %v before its context was done", err))
				default:
				}
				cancel(errStop)
				synctest.Wait()
				select {
				case err := <-stopped:
					require.ErrorIs(t, err, errStop)
				default:
					require.FailNow(t, "still waiting after its context was done")
				}
				select {
				case err := <-plain:
					require.FailNow(t, fmt.Sprintf("a Stream write returned %v with the queue full", err))
				default:
				}
				close(g.gate)
				require.NoError(t, <-plain)
				require.NoError(t, w.Close())
				// Everything but the stopped packet was written.
				require.Len(t, g.bytes(), (sent+1)*len(enc))

				// Once the queue has room a done context does not matter.
				g2 := openGate()
				w2 := New(g2, wire.Limits{})
				require.NoError(t, send(w2, ctx, p))
				require.NoError(t, w2.Close())
				require.Len(t, g2.bytes(), len(enc))
			})
		})
	}
}

// TestWriterReplyNeverWaitsForSocket: a reply its sender writes itself
// (a Reply after a quiet spell) does not wait for a full socket:
// the flusher takes the rest over, so a sender whose peer stopped reading
// only ever waits for room in the queue, and there its context ends the
// wait. What was sent arrives whole and in order once the peer reads.
func TestWriterReplyNeverWaitsForSocket(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	defer ua.Close()
	w := New(ua, wire.Limits{})
	errStop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	payload := frame.MustPayload(map[string]any{"pad": strings.Repeat("p", 1000)})
	sent := make(chan int, 1)
	stopped := make(chan error, 1)
	go func() { // ends with the cancel below
		n := 0
		for {
			f, err := frame.NewChunk("c1", frame.ProviderToCaller, uint64(n+1), payload, nil)
			if err != nil {
				stopped <- err
				return
			}
			if err := w.Write(ctx, Reply, &wire.Frame{Frame: f}); err != nil {
				sent <- n
				stopped <- err
				return
			}
			n++
			time.Sleep(2 * quietGap) // each a reply of its own
		}
	}()
	// The peer reads nothing until the socket, the handed-over batch and
	// the queue are full (a sender stuck in its own write never gets the
	// queue there).
	for deadline := time.Now().Add(10 * time.Second); !queueFull(w); {
		require.True(t, time.Now().Before(deadline), "the queue never filled")
		time.Sleep(time.Millisecond)
	}
	cancel(errStop)
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, errStop)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the sender is still blocked after its context ended")
	}
	n := <-sent
	require.Positive(t, n)
	// Everything sent arrives, in order, as whole packets.
	r := packetio.NewReader(ub, wire.Limits{})
	ub.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		p, err := r.ReadPacket()
		require.NoError(t, err, "packet %d of %d", i+1, n)
		f, ok := p.(*wire.Frame)
		require.True(t, ok)
		require.Equal(t, uint64(i+1), f.Sequence)
	}
	require.NoError(t, w.Close())
}

// queueFull reports whether w's queue is at its bound while a write is
// under way: a sender now waits for room.
func queueFull(w *Writer) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spare == nil && len(w.cur.hdr) >= maxPending
}

// TestWriterAttachmentWaitsForWrite: a Stream write of an inline-media frame
// larger than the Writer copies returns only once the attachment is
// written, so the caller may reuse it.
func TestWriterAttachmentWaitsForWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		data := bytes.Repeat([]byte{0xab}, copyAttachment+1)
		f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: data, MediaType: "audio/pcm"})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- w.Write(context.Background(), Stream, &wire.Frame{Frame: f}) }() // stopped by the gate opening
		synctest.Wait()
		returned := false
		select {
		case err := <-done:
			returned = true
			done <- err
		default:
		}
		close(g.gate)
		require.NoError(t, <-done)
		require.False(t, returned, "a Stream write returned before its attachment was written")
		require.NoError(t, w.Close())

		// The attachment was handed to the connection as the caller's own
		// slice: not copied.
		found := false
		for _, wr := range g.writes {
			if len(wr) == len(data) && &wr[0] == &data[0] {
				found = true
			}
		}
		require.True(t, found, "attachment written from the caller's slice")
	})
}

// TestWriterCopiesSmallAttachment: an attachment of at most copyAttachment
// bytes is copied into the queue: its Write returns while the write before
// it is still under way, the caller may change its bytes at once, and the
// packets queued meanwhile leave in one write, in order, with the bytes as
// they were when queued. TryWrite takes such a packet too.
func TestWriterCopiesSmallAttachment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 1}))
		synctest.Wait() // the flusher holds the ping at the gate
		var want []wire.Packet
		buf := make([]byte, copyAttachment)
		for i, size := range []int{1, 64, 1 << 10, copyAttachment} {
			data := buf[:size]
			for j := range data {
				data[j] = byte(i)
			}
			f, err := frame.NewChunk("c1", frame.ProviderToCaller, uint64(i+1), nil, &frame.InlineMedia{Data: data, MediaType: "a/b"})
			require.NoError(t, err)
			p := &wire.Frame{Frame: f}
			if i%2 == 0 {
				require.NoError(t, w.Write(context.Background(), Stream, p), "a small attachment's Write waits for nothing")
			} else {
				ok, err := w.TryWrite(p)
				require.NoError(t, err)
				require.True(t, ok, "TryWrite takes a small attachment")
			}
			sent := *p
			sent.Media = &frame.InlineMedia{Data: bytes.Clone(data), MediaType: "a/b"}
			want = append(want, &sent)
		}
		clear(buf) // the caller's bytes are its own again
		require.Equal(t, 0, g.count(), "nothing written while the gate is shut")
		close(g.gate)
		require.NoError(t, w.Close())
		require.Equal(t, 2, g.count(), "the ping, then every small attachment in one write")
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Equal(t, append([]wire.Packet{&wire.Ping{Nonce: 1}}, want...), got)
	})
}

// TestWriterCloseUnblocksOnConnectionClose: a Writer whose peer reads
// nothing is released by closing the connection; the write error sticks.
func TestWriterCloseUnblocksOnConnectionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe() // b is never read
		defer b.Close()
		w := New(a, wire.Limits{})
		done := make(chan error, 1)
		go func() { // stopped by the write error once a is closed
			for i := uint64(1); ; i++ {
				if err := w.Write(context.Background(), Stream, smallChunk(t, "c1", i)); err != nil {
					done <- err
					return
				}
			}
		}()
		synctest.Wait()
		require.NoError(t, a.Close())
		err := <-done
		require.ErrorIs(t, err, io.ErrClosedPipe)
		require.ErrorIs(t, w.Write(context.Background(), Stream, &wire.Ping{}), io.ErrClosedPipe, "the write error is sticky")
		require.ErrorIs(t, w.Flush(), io.ErrClosedPipe)
		require.ErrorIs(t, w.Close(), io.ErrClosedPipe)
		require.ErrorIs(t, w.Close(), io.ErrClosedPipe, "Close is idempotent")
	})
}

// failWriter accepts ok writes, then fails every write.
type failWriter struct {
	mu  sync.Mutex
	ok  int
	err error
}

func (f *failWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ok == 0 {
		return 0, f.err
	}
	f.ok--
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	boom := errors.New("boom")
	w := New(&failWriter{ok: 1, err: boom}, wire.Limits{})
	require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 1}))
	require.NoError(t, w.Flush())
	require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 2}))
	require.ErrorIs(t, w.Flush(), boom)
	for range 3 {
		require.ErrorIs(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 3}), boom)
		require.ErrorIs(t, w.Flush(), boom)
	}
	require.ErrorIs(t, w.Close(), boom)
	require.ErrorIs(t, w.Close(), boom)
}

func TestWriterClose(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), wire.Limits{})
	for i := range uint64(10) {
		require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: i}))
	}
	require.NoError(t, w.Close(), "Close writes what is queued")
	require.NoError(t, w.Close(), "Close is idempotent")
	require.ErrorIs(t, w.Write(context.Background(), Stream, &wire.Ping{}), ErrClosed)
	require.NoError(t, w.Flush())
	mu.Lock()
	got := readAll(t, packetio.NewReader(bytes.NewReader(buf.Bytes()), wire.Limits{}))
	mu.Unlock()
	require.Len(t, got, 10)
	require.Equal(t, &wire.Ping{Nonce: 9}, got[9])
}

func TestWriterCloseConcurrent(t *testing.T) {
	w := New(io.Discard, wire.Limits{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range uint64(100) {
				if err := w.Write(context.Background(), Stream, &wire.Ping{Nonce: i}); err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
			}
		})
		wg.Go(func() { _ = w.Close() })
	}
	wg.Wait()
	require.NoError(t, w.Close())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestWriterRefusesInvalidAndKeepsGoing(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf, wire.Limits{MaxAttachment: 8})
	bad := smallChunk(t, "c1", 1)
	bad.Sequence = 0
	inv, ok := protocol.AsInvalid(w.Write(context.Background(), Stream, bad))
	require.True(t, ok, "an invalid frame is refused as one")
	require.Equal(t, protocol.TypeFrame, inv.Type)
	require.Equal(t, "c1", inv.CallID)
	f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: make([]byte, 9), MediaType: "a/b"})
	require.NoError(t, err)
	require.ErrorIs(t, w.Write(context.Background(), Stream, &wire.Frame{Frame: f}), wire.ErrTooLarge)
	w.SetLimits(wire.Limits{MaxAttachment: 9})
	require.NoError(t, w.Write(context.Background(), Stream, &wire.Frame{Frame: f}))
	require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: 5}))
	require.NoError(t, w.Close())
	got := readAll(t, packetio.NewReader(bytes.NewReader(buf.Bytes()), wire.Limits{}))
	require.Equal(t, []wire.Packet{&wire.Frame{Frame: f}, &wire.Ping{Nonce: 5}}, got)
}

// TestWriterConcurrentOverSocket: many goroutines share one Writer on a real
// Unix socket; every packet arrives whole and each goroutine's packets keep
// their order.
func TestWriterConcurrentOverSocket(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	w := New(ua, wire.Limits{})
	const writers, per = 8, 300
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("call-%d", g)
			for i := uint64(1); i <= per; i++ {
				var p wire.Packet = smallChunk(t, id, i)
				if i%50 == 0 { // now and then a frame with an attachment
					f, err := frame.NewChunk(id, frame.ProviderToCaller, i, nil,
						&frame.InlineMedia{Data: bytes.Repeat([]byte{byte(g)}, int(i)*97), MediaType: "a/b"})
					if err != nil { // not require: this is not the test's goroutine
						assert.Fail(t, fmt.Sprintf("writer %d: %v", g, err))
						return
					}
					p = &wire.Frame{Frame: f}
				}
				if err := w.Write(context.Background(), Stream, p); err != nil {
					assert.Fail(t, fmt.Sprintf("writer %d: %v", g, err))
					return
				}
			}
		})
	}
	readDone := make(chan error, 1)
	next := map[string]uint64{}
	go func() { // stopped by EOF once ua is closed
		// A reader that stops early closes ub, so the writers fail
		// rather than block on a full socket and hang the test.
		defer ub.Close()
		r := packetio.NewReader(ub, wire.Limits{})
		for {
			p, err := r.ReadPacket()
			if err != nil {
				readDone <- err
				return
			}
			f := p.(*wire.Frame)
			if f.Sequence != next[f.CallID]+1 {
				readDone <- fmt.Errorf("%s: got %d after %d", f.CallID, f.Sequence, next[f.CallID])
				return
			}
			if m, ok := f.Media.(*frame.InlineMedia); ok && len(m.Data) != int(f.Sequence)*97 {
				readDone <- fmt.Errorf("%s: attachment of %d bytes", f.CallID, len(m.Data))
				return
			}
			next[f.CallID] = f.Sequence
		}
	}()
	wg.Wait()
	require.NoError(t, w.Close())
	require.NoError(t, ua.Close())
	require.ErrorIs(t, <-readDone, io.EOF)
	require.Len(t, next, writers)
	for id, n := range next {
		require.Equal(t, uint64(per), n, id)
	}
}

// TestWriterBackpressureOverSocket: a peer that reads nothing makes the
// Writer stop taking packets after the socket buffers and the bounded queue
// are full. The write deadline turns the block into an error.
func TestWriterBackpressureOverSocket(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	defer ua.Close()
	require.NoError(t, ua.SetWriteDeadline(time.Now().Add(500*time.Millisecond)))
	w := New(ua, wire.Limits{})
	p := smallChunk(t, "c1", 1)
	enc, err := packetio.Encode(p, wire.Limits{})
	require.NoError(t, err)
	const limit = 64 << 20 // far more than socket buffers and queue hold
	sent := 0
	for sent < limit {
		if err = w.Write(context.Background(), Stream, p); err != nil {
			break
		}
		sent += len(enc)
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, sent, 16<<20, "the writer took %d bytes from a peer that reads nothing", sent)
	require.ErrorIs(t, w.Close(), os.ErrDeadlineExceeded)
}

// TestWriterDirectWriteThenQueue: an inline-media packet larger than the
// Writer copies that finds the Writer idle is written by its caller;
// packets queued meanwhile wait for it, then leave together, after it;
// Close waits for it too.
func TestWriterDirectWriteThenQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: make([]byte, copyAttachment+1), MediaType: "a/b"})
		require.NoError(t, err)
		media := &wire.Frame{Frame: f}
		done := make(chan error, 1)
		go func() { done <- w.Write(context.Background(), Stream, media) }() // stopped by the gate opening
		synctest.Wait()
		for i := range uint64(3) {
			require.NoError(t, w.Write(context.Background(), Stream, &wire.Ping{Nonce: i}))
		}
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }() // returns once everything is written
		synctest.Wait()
		require.Zero(t, g.count(), "nothing written while the gate is shut")
		select {
		case <-closed:
			assert.Fail(t, "Close returned while a write was under way")
		default:
		}
		close(g.gate)
		require.NoError(t, <-done)
		require.NoError(t, <-closed)
		// Header and attachment (two buffers of one vectored write), then
		// the three pings in one write.
		require.Equal(t, 3, g.count())
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Equal(t, []wire.Packet{media, &wire.Ping{Nonce: 0}, &wire.Ping{Nonce: 1}, &wire.Ping{Nonce: 2}}, got)
	})
}

// TryWrite queues what a Stream write would queue without waiting, and
// refuses, doing nothing, what would make it wait: a full queue, an
// attachment. The packets it queued leave in order with the rest.
func TestWriterTryWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		ok, err := w.TryWrite(&wire.Frame{Frame: frame.Frame{CallID: "c1", Direction: frame.ProviderToCaller, Sequence: 0, Kind: frame.KindChunk}})
		require.ErrorIs(t, err, frame.ErrInvalid)
		require.False(t, ok)
		p := smallChunk(t, "c1", 1)
		ok, err = w.TryWrite(p)
		require.NoError(t, err)
		require.True(t, ok)
		synctest.Wait() // the flusher holds it at the gate
		att, err := frame.NewChunk("c1", frame.ProviderToCaller, 2, nil, &frame.InlineMedia{Data: make([]byte, copyAttachment+1), MediaType: "a/b"})
		require.NoError(t, err)
		ok, err = w.TryWrite(&wire.Frame{Frame: att})
		require.NoError(t, err)
		require.False(t, ok, "an attachment larger than the Writer copies always waits for its write")
		queued := 1
		for {
			ok, err := w.TryWrite(smallChunk(t, "c1", uint64(queued+1)))
			require.NoError(t, err)
			if !ok {
				break
			}
			queued++
			require.Less(t, queued, 10*maxPending, "TryWrite never reported a full queue")
		}
		require.Greater(t, queued, 2)
		close(g.gate)
		require.NoError(t, w.Flush())
		require.NoError(t, w.Close())
		r := packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{})
		for i := 1; i <= queued; i++ {
			p, err := r.ReadPacket()
			require.NoError(t, err)
			require.Equal(t, uint64(i), p.(*wire.Frame).Sequence)
		}
		_, err = r.ReadPacket()
		require.ErrorIs(t, err, io.EOF, "nothing TryWrite refused was written")
		ok, err = w.TryWrite(p)
		require.ErrorIs(t, err, ErrClosed)
		require.False(t, ok)
	})
}

// TestWriterWriteAllocatesNothing checks that a small packet written and
// flushed allocates nothing once the Writer is warm: its header goes into
// the batch's reused buffer, and the write's pieces live in the batch.
func TestWriterWriteAllocatesNothing(t *testing.T) {
	w := New(io.Discard, wire.Limits{})
	defer w.Close()
	p := smallChunk(t, "c1", 1)
	allocs := testing.AllocsPerRun(200, func() {
		require.NoError(t, w.Write(context.Background(), Stream, p))
		require.NoError(t, w.Flush())
	})
	require.Zero(t, allocs)
}

// openGate is a gateWriter that lets every Write through at once.
func openGate() *gateWriter {
	g := newGateWriter()
	close(g.gate)
	return g
}

// TestWriterCork: packets written under a Cork wait for the Uncork, which
// writes them all in one write, in order, on the calling goroutine.
func TestWriterCork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := openGate()
		w := New(g, wire.Limits{})
		defer w.Close()
		w.Cork()
		for i := uint64(1); i <= 3; i++ {
			require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", i)))
		}
		require.NoError(t, w.Write(context.Background(), Reply, smallChunk(t, "c1", 4)), "a Reply is corked too")
		synctest.Wait()
		require.Zero(t, g.count(), "written before the Uncork")
		require.NoError(t, w.Uncork())
		require.Equal(t, 1, g.count(), "Uncork returned before the write, or wrote more than once")
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Len(t, got, 4)
		for i, p := range got {
			require.Equal(t, uint64(i+1), p.(*wire.Frame).Sequence)
		}
		require.Panics(t, func() { w.Uncork() }, "an Uncork without its Cork")
	})
}

// TestWriterCorkedStillDrains: a corked Writer still writes when Flush asks,
// and when its queue reaches the bound, so that neither waits for an
// Uncork that cannot come first.
func TestWriterCorkedStillDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := openGate()
		w := New(g, wire.Limits{})
		defer w.Close()
		w.Cork()
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 1)))
		require.NoError(t, w.Flush())
		require.Equal(t, 1, g.count())
		seq := uint64(2)
		for range 2 * maxPending / 32 { // more than maxPending bytes of small headers
			require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", seq)))
			seq++
		}
		require.NoError(t, w.Uncork())
		require.NoError(t, w.Flush())
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Len(t, got, int(seq-1))
	})
}

// requireWritesOnCaller runs write, inside a synctest bubble, and checks
// that it does not return before its write got through g's gate, which it
// then lets one write through: the write was made by write's goroutine.
func requireWritesOnCaller(t *testing.T, g *gateWriter, write func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- write() }() // stopped by the gate value below
	synctest.Wait()
	select {
	case err := <-done:
		require.FailNow(t, fmt.Sprintf("returned (%v) before its write", err))
	default:
	}
	g.gate <- struct{}{}
	require.NoError(t, <-done)
}

// TestWriterReply: a packet that finds the Writer idle and quiet
// is written before a Reply returns; one that follows another
// within quietGap goes to the flusher, as a Stream write's always does. Each
// value sent on the gate lets one write through.
func TestWriterReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		defer close(g.gate)
		direct := func(seq uint64) {
			t.Helper()
			requireWritesOnCaller(t, g, func() error { return w.Write(context.Background(), Reply, smallChunk(t, "c1", seq)) })
		}
		direct(1)
		require.Equal(t, 1, g.count())

		// Right after that write: queued for the flusher, which waits at
		// the gate (were it written here, this would block for good).
		require.NoError(t, w.Write(context.Background(), Reply, smallChunk(t, "c1", 2)))
		synctest.Wait()
		require.Equal(t, 1, g.count())
		g.gate <- struct{}{}
		require.NoError(t, w.Flush())
		require.Equal(t, 2, g.count())

		// a Stream write never writes on its caller, quiet or not.
		time.Sleep(2 * quietGap)
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 3)))
		g.gate <- struct{}{}
		require.NoError(t, w.Flush())

		// After a quiet spell, the caller writes again.
		time.Sleep(2 * quietGap)
		direct(4)
		require.Equal(t, 4, g.count())
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Len(t, got, 4)
		require.NoError(t, w.Close()) // nothing queued: no write to wait for
	})
}

// TestWriterWritePackets: a request's packets go out in one write, made
// before a Request returns when the Writer is idle; one refused packet
// queues none of them and leaves the Writer as it was.
func TestWriterRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		defer close(g.gate)
		bad := &wire.Frame{Frame: frame.Frame{CallID: "c1", Direction: frame.ProviderToCaller, Sequence: 0, Kind: frame.KindChunk}}
		require.ErrorIs(t, w.Write(context.Background(), Request, smallChunk(t, "c1", 1), bad), frame.ErrInvalid)
		synctest.Wait()
		require.Zero(t, g.count())

		requireWritesOnCaller(t, g, func() error {
			return w.Write(context.Background(), Request, smallChunk(t, "c1", 1), smallChunk(t, "c1", 2), &wire.Ping{Nonce: 3})
		})
		require.Equal(t, 1, g.count())
		got := readAll(t, packetio.NewReader(bytes.NewReader(g.bytes()), wire.Limits{}))
		require.Equal(t, []wire.Packet{smallChunk(t, "c1", 1), smallChunk(t, "c1", 2), &wire.Ping{Nonce: 3}}, got)
		require.NoError(t, w.Close())
	})
}

// TestWriterMixedSendsOverSocket: one sender mixing every way to send
// (a Stream write, a Reply with and without a context, a corked pair,
// inline media of random sizes, random pauses so that some replies are
// written by the sender and find the socket full) to a peer that reads in
// bursts with pauses: every packet arrives whole, once and in order, the
// media bytes intact.
func TestWriterMixedSendsOverSocket(t *testing.T) {
	ua, ub := testnet.SocketPair(t)
	defer ub.Close()
	defer ua.Close()
	w := New(ua, wire.Limits{})
	const n = 3000
	rng := rand.New(rand.NewPCG(1, 2))
	pad := strings.Repeat("q", 3000)
	// mediaOf(seq, size)[i] is byte(seq) + byte(i), copied out of
	// pattern: one ranged access for the race detector rather than one
	// per byte, which took most of the test's time under -race.
	pattern := make([]byte, 256+200_000)
	for i := range pattern {
		pattern[i] = byte(i)
	}
	mediaOf := func(seq uint64, size int) []byte {
		return bytes.Clone(pattern[seq%256 : seq%256+uint64(size)])
	}
	// The plan, made before anything is sent: how each packet goes and its
	// media's size (-1 for none).
	const (
		queued = iota
		now
		nowCtx
		media
		corked // this packet and the next, in one Cork
		pause  // a pause before this packet
	)
	how := make([]int, n+2)
	size := make([]int, n+2)
	for seq := 1; seq <= n; seq++ {
		how[seq], size[seq] = rng.IntN(6), -1
		switch {
		case how[seq] == media:
			size[seq] = rng.IntN(200_000)
		case how[seq] == corked && seq < n:
			how[seq+1] = -1 // the second of the pair
			seq++
		case how[seq] == corked:
			how[seq] = queued
		}
	}
	sendErr := make(chan error, 1)
	go func() { // ends after n packets, or at the first error
		ctx := context.Background()
		chunk := func(seq uint64) *wire.Frame {
			var m frame.Media
			if size[seq] >= 0 {
				m = &frame.InlineMedia{Data: mediaOf(seq, size[seq]), MediaType: "application/octet-stream"}
			}
			f, err := frame.NewChunk("c1", frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"pad": pad[:int(seq*7)%len(pad)]}), m)
			if err != nil {
				panic(err)
			}
			return &wire.Frame{Frame: f}
		}
		for seq := uint64(1); seq <= n; seq++ {
			var err error
			switch how[seq] {
			case queued:
				err = w.Write(context.Background(), Stream, chunk(seq))
			case now:
				err = w.Write(context.Background(), Reply, chunk(seq))
			case nowCtx:
				err = w.Write(ctx, Reply, chunk(seq))
			case media:
				err = w.Write(ctx, Stream, chunk(seq))
			case corked:
				w.Cork()
				if err = w.Write(context.Background(), Stream, chunk(seq)); err == nil {
					err = w.Write(context.Background(), Reply, chunk(seq+1))
				}
				if uerr := w.Uncork(); err == nil {
					err = uerr
				}
				seq++
			case pause:
				time.Sleep(time.Duration(seq%100) * time.Microsecond)
				err = w.Write(context.Background(), Reply, chunk(seq))
			}
			if err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- w.Flush()
	}()
	r := packetio.NewReader(ub, wire.Limits{})
	ub.SetReadDeadline(time.Now().Add(60 * time.Second))
	for seq := uint64(1); seq <= n; seq++ {
		if seq%200 == 0 {
			time.Sleep(5 * time.Millisecond) // the socket and the queue fill meanwhile
		}
		p, err := r.ReadPacket()
		require.NoError(t, err, "packet %d", seq)
		f, ok := p.(*wire.Frame)
		require.True(t, ok)
		require.Equal(t, seq, f.Sequence)
		if size[seq] >= 0 {
			m, ok := f.Media.(*frame.InlineMedia)
			require.True(t, ok, "packet %d has no inline media", seq)
			require.Equal(t, mediaOf(seq, size[seq]), m.Data, "packet %d media", seq)
		} else {
			require.Nil(t, f.Media, "packet %d", seq)
		}
	}
	require.NoError(t, <-sendErr)
	require.NoError(t, w.Close())
}

// TestWriterMarkWritten: a mark taken after a Write says whether that
// packet is on the connection yet, without waiting: not while the
// flusher's write of it is held up, and once it went through.
func TestWriterMarkWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		require.True(t, w.Written(w.Mark()), "nothing queued: nothing to write")
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 1)))
		first := w.Mark()
		synctest.Wait() // the flusher holds packet 1 and waits at the gate
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 2)))
		second := w.Mark()
		require.Greater(t, second, first, "packet 2 waits behind the write under way")
		require.False(t, w.Written(first))
		require.False(t, w.Written(second))
		close(g.gate)
		require.NoError(t, w.Flush())
		require.True(t, w.Written(first))
		require.True(t, w.Written(second))
		require.NoError(t, w.Close())
	})
}

// flusherGoroutines counts the goroutines running a Writer's flusher.
func flusherGoroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "coalesce.(*Writer).flush(")
}

// TestWriterFlusherOnlyWhileWork: a Writer (New) holds no goroutine while
// nothing is queued: its flusher starts with the first packet queued for
// it, writes what comes meanwhile and returns once it has had nothing to
// write for flusherLinger.
func TestWriterFlusherOnlyWhileWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateWriter()
		w := New(g, wire.Limits{})
		synctest.Wait()
		require.Equal(t, 0, flusherGoroutines(), "a new Writer")
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 1)))
		synctest.Wait() // the flusher holds packet 1 and waits at the gate
		require.Equal(t, 1, flusherGoroutines(), "a Writer writing a packet")
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 2)))
		require.Equal(t, 1, flusherGoroutines(), "a Writer with a packet queued behind the one it writes")
		close(g.gate)
		require.NoError(t, w.Flush())
		time.Sleep(flusherLinger / 2)
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 3)))
		require.NoError(t, w.Flush())
		synctest.Wait()
		require.Equal(t, 1, flusherGoroutines(), "a Writer that wrote within flusherLinger: the same flusher")
		time.Sleep(flusherLinger + time.Millisecond)
		synctest.Wait()
		require.Equal(t, 0, flusherGoroutines(), "a Writer that wrote nothing for flusherLinger")
		require.Equal(t, 3, g.count(), "packet 1, then 2, then 3")
		require.NoError(t, w.Write(context.Background(), Stream, smallChunk(t, "c1", 4)))
		require.NoError(t, w.Close())
		require.Equal(t, 0, flusherGoroutines(), "a closed Writer")
		require.Equal(t, 4, g.count(), "Close wrote what was queued")
	})
}
