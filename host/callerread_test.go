package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// A plain request's caller reads its connection itself (turnCaller); a
// Recv whose context ends while it reads returns at once, and the call
// goes on: its output is read by the connection's reader from then on.
func TestPlainRequestRecvContext(t *testing.T) {
	sideBySide(t)
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 2000}), WithInput())
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("first Recv: %v %v", f.Kind, err))
	}
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	t0 := time.Now()
	_, err = c.Recv(rctx)
	cancel()
	require.ErrorIsf(t, err, context.DeadlineExceeded, "Recv with a 50 ms context: %v, want DeadlineExceeded", err)
	if d := time.Since(t0); d > time.Second { // the handler answers after 2 s
		require.FailNow(t, fmt.Sprintf("Recv returned after %v: it waited for the handler", d))
	}
	res, err := c.Wait()
	require.Falsef(t, err != nil || string(res) != string(frame.MustPayload(map[string]any{"slept_ms": 2000})), "Wait: %v", err)
	// The connection is still in step: the next plain request is answered.
	in := frame.MustPayload(map[string]any{"text": "ab"})
	c, err = h.Call(ctx, "upper", nil, WithInput(in))
	require.NoError(t, err)
	fs := collect(t, c)
	if s, _ := fs[1].Payload.Text(); len(fs) != 3 || s != "AB" {
		require.FailNow(t, fmt.Sprintf("next call: %d frames, %q", len(fs), s))
	}
}

// A Recv given the call's own context, reading the connection itself when
// that context ends, returns its error at once: the call's watch of the
// context interrupts the read (callerRead arms no watch of its own for
// it), even while the child is slow to answer.
func TestPlainRequestRecvCallContext(t *testing.T) {
	sideBySide(t)
	cfg := realConfig()
	cfg.CancelGrace = 2 * time.Second // the child answers when the handler returns, after 1.5 s
	h, _ := testHost(t, cfg, time.Minute)
	ctx, cancel := context.WithCancel(callCtx(t, 30*time.Second))
	defer cancel()
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 1500, "ignore_cancel": true}), WithInput())
	require.NoError(t, err)
	if f, err := c.Recv(ctx); err != nil || f.Kind != frame.KindStarted {
		require.FailNow(t, fmt.Sprintf("first Recv: %v %v", f.Kind, err))
	}
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	defer stop.Stop()
	t0 := time.Now()
	if _, err = c.Recv(ctx); !errors.Is(err, context.Canceled) {
		require.FailNow(t, fmt.Sprintf("Recv: %v, want Canceled", err))
	}
	if d := time.Since(t0); d > time.Second { // the handler ignores the cancel for 1.5 s
		require.FailNow(t, fmt.Sprintf("Recv returned after %v: it waited for the child", d))
	}
	// The call still ends with a terminal, the child's or the grace's.
	var ce *frame.Error
	if _, err := c.Wait(); !errors.As(err, &ce) || ce.Code != frame.CodeCancelled {
		require.FailNow(t, fmt.Sprintf("Wait: %v, want a cancelled CallError", err))
	}
}

// A plain request cancelled while its caller is not in Recv still has the
// child's cancelled read as it comes: the call is released without a Recv,
// and its terminal is the child's, not the cancel grace's synthetic one.
func TestPlainRequestCancelledWithoutRecv(t *testing.T) {
	cfg := realConfig()
	cfg.CancelGrace = 5 * time.Second // a synthetic terminal would take 6 s
	h, _ := testHost(t, cfg, time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}), WithInput())
	require.NoError(t, err)
	c.Cancel() // before or after the handler starts, the child answers cancelled

	t0 := time.Now()
	for h.Children()[0].Running != 0 {
		require.False(t, time.Since(t0) > 3*time.Second, "the cancelled call was not released within 3 s without a Recv")
		time.Sleep(5 * time.Millisecond)
	}
	fs := collect(t, c)
	term := fs[len(fs)-1]
	require.Falsef(t, term.Kind != frame.KindCancelled || term.Synthetic, "terminal %v (synthetic %v), want the child's cancelled", term.Kind, term.Synthetic)
}

// Nobody reads an idle connection: one the child closed, or wrote on, while
// idle is found when the next call would take it (idleSound), and that call
// goes on a new connection.
func TestIdleConnectionSpoiledByChild(t *testing.T) {
	for _, tool := range []string{"idleclose", "idlewrite"} {
		t.Run(tool, func(t *testing.T) {
			h, logs := testHost(t, fastHealth(fakeConfig("serve")), time.Minute)
			ctx := callCtx(t, 30*time.Second)
			c, err := h.Call(ctx, tool, nil, WithInput())
			require.NoError(t, err)
			if _, err := c.Wait(); err != nil {
				require.FailNow(t, fmt.Sprintf("%s: %v", tool, err))
			}
			waitIdleReadable(t, h)
			for i := range 2 {
				c, err = h.Call(ctx, "ok", nil, WithInput(frame.MustPayload(map[string]any{"text": "x"})))
				require.NoError(t, err)
				if _, err := c.Wait(); err != nil {
					require.FailNow(t, fmt.Sprintf("call %d after %s: %v", i, tool, err))
				}
			}
			assert.False(t, tool == "idlewrite" && !strings.Contains(logs.String(), "child wrote on an idle stream connection"), "no warning for the write on an idle connection")
		})
	}
}

// Plain requests from many goroutines at once: a connection released by
// one caller's read is bound by another's right away, whose caller must
// then be free to read it (a stale "reading" mark would leave it unread).
func TestPlainRequestsConcurrent(t *testing.T) {
	h, _ := testHost(t, realConfig(), 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	in := frame.MustPayload(map[string]any{"text": "ab"})
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 150 {
				c, err := h.Call(ctx, "upper", nil, WithInput(in))
				if err == nil {
					_, err = c.Wait()
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, call %d: %w", g, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
}

// A plain request that streams: its caller reads the frames in bursts
// into the outbox, in order, small ones and 1 MiB media alike, without the
// outbox ever filling under its own consumer (which would stop the call).
func TestPlainRequestStreams(t *testing.T) {
	h, _ := testHost(t, realConfig(), 2*time.Minute)
	ctx := callCtx(t, time.Minute)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 3000}), WithInput())
	require.NoError(t, err)
	fs := collect(t, c)
	require.EqualValuesf(t, 3002, len(fs), "count: %d frames, want started, 3000 chunks and completed", len(fs))
	for i, f := range fs[1 : len(fs)-1] {
		require.Falsef(t, f.Sequence != uint64(i+1), "chunk %d has sequence %d", i, f.Sequence)
	}
	c, err = h.Call(ctx, "media", frame.MustPayload(map[string]any{"bytes": 40 << 20, "chunk": 1 << 20}), WithInput())
	require.NoError(t, err)
	if n := readMedia(t, c); n != 40<<20 {
		require.FailNow(t, fmt.Sprintf("media: %d bytes, want %d", n, 40<<20))
	}
}

// readMedia reads c to its end and returns the inline media bytes it
// got, handing each buffer back (Call.Recycle) once counted.
func readMedia(tb testing.TB, c *Call) int {
	tb.Helper()
	n := 0
	for f, err := range c.Frames() {
		require.NoError(tb, err)
		if m, ok := f.Media.(*frame.InlineMedia); ok {
			n += len(m.Data)
			c.Recycle(f)
		}
	}
	return n
}

// waitIdleReadable waits until the child's one idle stream connection has
// something to read, its EOF or bytes, in the socket or already in its
// Reader's buffer: what the child did to it arrived. It looks as
// idleSound does, leaving the bytes where they are.
func waitIdleReadable(t *testing.T, h *Host) {
	t.Helper()
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		idle := h.slots[0].cur.idle
		if len(idle) != 1 {
			return false
		}
		if idle[0].r.Buffered() > 0 { // came with the call's end
			return true
		}
		var perr error
		var b [1]byte
		idle[0].rc.Read(func(fd uintptr) bool {
			_, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			return true
		})
		return perr == nil
	})
}

// A terminal that comes with its end in one read arms no end grace: the
// end is read next, without waiting, so the timer would only be stopped.
// One that comes alone still arms it (TestNoEndClosesConnection).
func TestEndWithTerminalArmsNoGrace(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 20*time.Second)
	for range 5 {
		c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 1}), WithInput())
		require.NoError(t, err)
		if _, err := c.Wait(); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		c.clockMu.Lock()
		armed := c.endT != nil
		c.clockMu.Unlock()
		require.False(t, armed, "the end grace was armed for a terminal that came with its end")
	}
}

// A streamed call's caller reads its connection itself too, until a Send
// has to wait for the child: a caller that sends more than the sockets
// and the child's queues hold before it reads anything, to a child that
// echoes each chunk (and so stops reading while its output is not read),
// is not deadlocked: the Send that waits gives the connection to its
// reader, which reads the echoes into the call's queue (64 frames), as it
// did from the start before callers read. Without that hand-over the
// Sends block for good, at about the 40th chunk.
func TestStreamedSendWhileNotReading(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "echo", nil)
	require.NoError(t, err)
	const n = 60 // 60 × 16 KiB: more than the sockets and the child hold, less than they and the call's queue do
	text := strings.Repeat("x", 16<<10)
	for i := range n {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Send(sctx, frame.MustPayload(map[string]any{"text": text}), nil)
		cancel()
		require.NoErrorf(t, err, "send %d", i)
	}
	require.NoError(t, c.CloseSend())
	fs := collect(t, c)
	if len(fs) != n+2 || fs[len(fs)-1].Kind != frame.KindCompleted {
		require.FailNow(t, fmt.Sprintf("%d frames, the last %v; want started, %d chunks, completed", len(fs), fs[len(fs)-1].Kind, n))
	}
}

// A streamed call whose caller waits in Recv reads its answer on the
// caller's goroutine: the connection's reader is never given the turn.
func TestStreamedCallCallerReads(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 300}))
	require.NoError(t, err)
	conn := c.conn
	n := 0
	for f, err := range c.Frames() {
		require.NoError(t, err)
		if f.Kind == frame.KindChunk {
			n++
		}
		conn.mu.Lock()
		turn := conn.turn
		conn.mu.Unlock()
		require.Falsef(t, turn == turnReader, "after %d chunks the reader has the turn", n)
	}
	require.EqualValuesf(t, 300, n, "%d chunks, want 300", n)
}

// A plain request whose input is more than the sockets hold, to a child
// that answers each chunk before it reads the next (echo), and stops
// reading while its answers are not read: the caller is not held in the
// request's write (it holds the read turn), so its Recv reads the answers
// while the Writer's flusher writes the rest of the request. Before, the
// write waited for a full socket and the call stayed stuck until its
// context ended.
func TestPlainRequestLargeInput(t *testing.T) {
	h, _ := testHost(t, realConfig(), time.Minute)
	ctx := callCtx(t, 30*time.Second)
	const n = 60 // 60 × 16 KiB: more than both sockets and the child's queues hold
	text := strings.Repeat("y", 16<<10)
	input := make([]frame.Payload, n)
	for i := range input {
		input[i] = frame.MustPayload(map[string]any{"text": text})
	}
	// Stuck, the call would go on when its deadline handed the reading
	// over: 30 s. It takes well under a second.
	start := time.Now()
	c, err := h.Call(ctx, "echo", nil, WithInput(input...))
	require.NoError(t, err)
	var chunks int
	for f, err := range c.Frames() {
		require.NoError(t, err)
		switch f.Kind {
		case frame.KindChunk:
			chunks++
		case frame.KindFailed, frame.KindCancelled:
			require.FailNow(t, fmt.Sprintf("call ended %v (synthetic %v) after %d chunks: %v", f.Kind, f.Synthetic, chunks, f.Error))
		}
	}
	require.Falsef(t, chunks != n, "%d chunks, want %d", chunks, n)
	if d := time.Since(start); d > 5*time.Second {
		require.FailNow(t, fmt.Sprintf("the call took %v: it waited for its deadline", d))
	}
}
