package child_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/skulktest"
)

// benchSend runs one call whose handler sends b.N chunks of pl (with media
// from mediaOf, nil for none) while the host side discards what it reads.
// Allocations per op are the child's per Send: the host side only copies
// bytes into one buffer.
func benchSend(b *testing.B, pl frame.Payload, media frame.Media) {
	start, done := make(chan struct{}), make(chan error, 1)
	tool := child.Tool{ID: "bench-send", Version: "1", Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
		<-start
		for range b.N {
			if err := s.Send(pl, media); err != nil {
				done <- err
				return nil, err
			}
		}
		done <- s.Flush()
		return nil, nil
	}}
	s := benchStream(b, child.Options{Tools: []child.Tool{tool}})
	require.NoError(b, s.Invoke("b1", "bench-send", nil, 0))
	require.NoError(b, s.Started("b1"))
	drained, buf := make(chan struct{}), make([]byte, 1<<20)
	go func() { // stopped by closing s
		defer close(drained)
		io.CopyBuffer(io.Discard, s.Conn, buf)
	}()
	b.ReportAllocs()
	b.SetBytes(int64(len(pl)))
	b.ResetTimer()
	close(start)
	select {
	case err := <-done:
		require.NoError(b, err)
	case <-time.After(10 * wait):
		require.FailNow(b, "handler did not finish")
	}
	b.StopTimer()
	s.Close()
	<-drained
}

// benchStream serves opts in-process for the benchmark, does the handshake
// and returns one stream connection; Serve is stopped and the connection
// closed when the benchmark ends.
func benchStream(b *testing.B, opts child.Options) *skulktest.StreamConn {
	hostEnd, childEnd := testnet.SocketPair(b)
	ln, path := testnet.Listen(b)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- child.Serve(ctx, childEnd, child.NewListener(ln.Accept, ln.Close), opts) }() // stopped by the cleanup's cancel
	h := skulktest.NewPeer(hostEnd, path)
	b.Cleanup(func() {
		h.Close()
		cancel()
		<-served
	})
	hctx, hcancel := context.WithTimeout(context.Background(), wait)
	defer hcancel()
	if _, err := h.Handshake(hctx, nil); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	s, err := h.Dial(hctx)
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() }) // runs before Serve's cleanup
	return s
}

// BenchmarkCall: one op is one sequential echo call on a reused stream
// connection, in-process: the test host writes invoke, started, one small
// chunk and completed, then reads the echoed chunk, the completed terminal
// and the end. It measures the child's hand-offs per call (reader, handler,
// writer) beside the test host's own writes and reads.
func BenchmarkCall(b *testing.B) {
	s := benchStream(b, demoOptions())
	pl := frame.MustPayload(map[string]any{"text": "hello, world", "n": 42})
	call := func(i int) {
		id := "c" + strconv.Itoa(i)
		err := s.Invoke(id, "echo", nil, 0)
		if err == nil {
			err = s.Started(id)
		}
		if err == nil {
			err = s.Chunk(id, 1, pl, nil)
		}
		if err == nil {
			err = s.Complete(id, 2, nil)
		}
		require.NoError(b, err)
		res, err := s.ReadCall(id, deadline())
		switch {
		case err != nil:
			require.FailNow(b, fmt.Sprint(err))
		case !res.End || res.Terminal == nil || res.Terminal.Kind != frame.KindCompleted || len(res.Frames) != 2:
			require.FailNow(b, fmt.Sprintf("call %s: %d frames, terminal %v, end %v", id, len(res.Frames), res.Terminal, res.End))
		}
	}
	for i := range 100 { // warm up: buffers, the connection
		call(-1 - i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		call(i)
	}
}

// BenchmarkSend: one small chunk per op through Stream.Send, the frame
// validated, encoded and queued on the connection's Writer.
func BenchmarkSend(b *testing.B) {
	benchSend(b, frame.MustPayload(map[string]any{"text": "hello, world", "n": 42, "ok": true}), nil)
}

// BenchmarkSendRecord: one chunk per op with a 1.1 KiB record payload
// (nested map, arrays, a float, a 1 KiB string), where checking the
// payload's bytes weighs more.
func BenchmarkSendRecord(b *testing.B) {
	benchSend(b, frame.MustPayload(map[string]any{
		"id": "rec-0001", "score": 0.875, "tags": []any{"a", "bb", "ccc", "dddd"},
		"counts": []any{1, 2, 3, 400, 50000, -7}, "nested": map[string]any{"x": 1, "y": nil, "z": []any{true, false}},
		"body": strings.Repeat("lorem ipsum ", 85),
	}), nil)
}

// BenchmarkSendInline64KiB: one chunk with 64 KiB of inline media per op.
func BenchmarkSendInline64KiB(b *testing.B) {
	benchSend(b, nil, &frame.InlineMedia{Data: make([]byte, 64<<10), MediaType: "application/octet-stream"})
}

// BenchmarkStartToHello: exec of cmd/skulk-child with its control and
// stream sockets on fds 3 and 4, until its hello is read. The binary is
// the one TestMain built (with GOFLAGS as in the environment), or
// $SKULK_BENCH_CHILD when set, to compare two builds in one run.
func BenchmarkStartToHello(b *testing.B) {
	bin := childBin
	if env := os.Getenv("SKULK_BENCH_CHILD"); env != "" {
		bin = env
	}
	for range b.N {
		p := skulktest.ExecPeer(b, bin, []string{"--test-tools"})
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := p.Hello(ctx)
		cancel()
		if err != nil {
			require.FailNow(b, fmt.Sprintf("%v; child output: %s", err, p.Output()))
		}
		b.StopTimer()
		p.Close()
		p.Signal(syscall.SIGKILL)
		p.Wait(context.Background())
		b.StartTimer()
	}
}
