package child_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/skulktest"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// A plain request is a call whose invoke, caller frames and caller
// terminal arrive in one write: its handler runs on the connection's
// reader (see conn.runInline). These tests write requests that way, so
// that they take that path every time.

// TestPlainRequests runs plain requests and streamed calls in turn on one
// connection: each gets its own output, terminal and end, in order.
func TestPlainRequests(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		for i := range 20 {
			id := fmt.Sprintf("pr%d", i)
			text := fmt.Sprintf("chunk %d", i)
			if i%2 == 0 {
				require.NoError(t, s.Request(id, "echo", nil, payload(map[string]any{"text": text})))
			} else {
				begin(t, s, id, "echo", nil)
				require.NoError(t, s.Chunk(id, 1, payload(map[string]any{"text": text}), nil))
				require.NoError(t, s.Complete(id, 2, nil))
			}
			res := readCall(t, s, id)
			requireTerminal(t, res, frame.KindCompleted, 0)
			require.True(t, res.End)
			chunks := res.Chunks()
			require.Len(t, chunks, 1)
			require.Equal(t, text, decode(t, chunks[0].Payload)["text"])
		}
	})
}

// TestPlainRequestConnectionClosedCancels closes the connection under a
// plain request's long handler: the reader that runs it reads nothing, so
// the server's watch must give the connection another reader, which sees
// the close and cancels the handler, well within a second.
func TestPlainRequestConnectionClosedCancels(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		require.NoError(t, s.Request("pc1", "sleep", map[string]any{"ms": 60_000}))
		pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
		start := time.Now()
		s.Close()
		pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 0 })
		// The watch looks every 50 ms; a second look hands over. The rest
		// is margin for a loaded machine under -race.
		require.Less(t, time.Since(start), time.Second)
	})
}

// TestPlainRequestLongHandlerKeepsConnection: a plain request that runs
// long enough to be handed over to a new reader still ends as usual, and
// its connection serves the next call.
func TestPlainRequestLongHandlerKeepsConnection(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		require.NoError(t, s.Request("pl1", "sleep", map[string]any{"ms": 300}))
		res := readCall(t, s, "pl1")
		requireTerminal(t, res, frame.KindCompleted, 0)
		require.True(t, res.End)
		require.Equal(t, int64(300), num(t, decode(t, res.Terminal.Payload)["slept_ms"]))
		require.NoError(t, s.Request("pl2", "echo", nil, payload(map[string]any{"text": "after"})))
		res = readCall(t, s, "pl2")
		requireTerminal(t, res, frame.KindCompleted, 0)
		require.Len(t, res.Chunks(), 1)
		requireCountCompletes(t, s, "pl3")
	})
}

// TestPlainRequestAfterHandOver: after a plain request long enough to be
// handed to a new reader, the next plain request on the connection is
// watched in turn: closing the connection under it cancels it. The next
// request comes right after the end, while the first reader is finishing:
// a race, so several rounds.
func TestPlainRequestAfterHandOver(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		for i := range 4 {
			s := dial(t, h)
			id := fmt.Sprintf("ho%d", i)
			require.NoError(t, s.Request(id, "sleep", map[string]any{"ms": 150}))
			requireTerminal(t, readCall(t, s, id), frame.KindCompleted, 0)
			require.NoError(t, s.Request(id+"-next", "sleep", map[string]any{"ms": 60_000}))
			pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 1 })
			start := time.Now()
			s.Close()
			pingUntil(t, h, func(p *wire.Pong) bool { return p.Streams == 0 })
			require.Less(t, time.Since(start), time.Second, "round %d", i)
		}
	})
}

// TestPlainRequestStuckOnControlEOF: a plain request's handler that
// ignores cancellation runs on its connection's reader, yet Serve still
// returns promptly once the control connection reaches EOF.
func TestPlainRequestStuckOnControlEOF(t *testing.T) {
	serveReturnsOnControlEOF(t, func(s *skulktest.StreamConn) error { return s.Request("ps1", "stubborn", nil) })
}

// TestPlainRequestInvalidFrame: a plain request with a caller frame that
// breaks the fence ends failed invalid_frame with its end, as a streamed
// call does, and its connection closes.
func TestPlainRequestInvalidFrame(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		h, _ := tg.start(t, config{})
		s := dial(t, h)
		inv, err := frame.PayloadOf(map[string]any{})
		require.NoError(t, err)
		started, err := frame.NewStarted("pi1", frame.CallerToProvider)
		require.NoError(t, err)
		gap, err := frame.NewChunk("pi1", frame.CallerToProvider, 5, payload(map[string]any{"text": "x"}), nil)
		require.NoError(t, err)
		var b []byte
		for _, p := range []wire.Packet{&wire.Invoke{CallID: "pi1", ToolID: "echo", Arguments: inv},
			&wire.Frame{Frame: started}, &wire.Frame{Frame: gap}} {
			b, _, err = wire.AppendPacket(b, p, wire.Limits{})
			require.NoError(t, err)
		}
		require.NoError(t, s.WriteRaw(b))
		res := readCall(t, s, "pi1")
		requireTerminal(t, res, frame.KindFailed, frame.CodeInvalidFrame)
		require.True(t, res.End)
		requireClosed(t, s)
	})
}
