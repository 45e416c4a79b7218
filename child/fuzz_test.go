package child_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/skulkrt/skulk/child"
	"github.com/skulkrt/skulk/child/demotools"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// FuzzStreamConnection writes arbitrary bytes on a stream connection of an
// in-process child, then half-closes it. Whatever the bytes, the child
// writes only well-formed packets, closes the connection or answers, and
// every handler it started returns (pong.streams goes back to 0): nothing
// hangs, nothing leaks. Seeds: plain requests (the reader runs the
// handler), streamed calls, and requests broken in the ways the reader
// must refuse.
func FuzzStreamConnection(f *testing.F) {
	enc := func(ps ...wire.Packet) []byte {
		var b []byte
		for _, p := range ps {
			var err error
			if b, _, err = wire.AppendPacket(b, p, wire.Limits{}); err != nil {
				f.Fatal(err)
			}
		}
		return b
	}
	args := func(m map[string]any) frame.Payload { return frame.MustPayload(m) }
	inv := func(id, tool string, a frame.Payload) wire.Packet {
		return &wire.Invoke{CallID: id, ToolID: tool, Arguments: a}
	}
	fr := func(f frame.Frame, err error) wire.Packet {
		if err != nil {
			panic(err)
		}
		return &wire.Frame{Frame: f}
	}
	text := args(map[string]any{"text": "hi"})
	started := func(id string) wire.Packet { return fr(frame.NewStarted(id, frame.CallerToProvider)) }
	chunk := func(id string, seq uint64) wire.Packet {
		return fr(frame.NewChunk(id, frame.CallerToProvider, seq, text, nil))
	}
	done := func(id string, seq uint64) wire.Packet {
		return fr(frame.NewCompleted(id, frame.CallerToProvider, seq, nil))
	}
	f.Add(enc(inv("a", "echo", args(map[string]any{})), started("a"), chunk("a", 1), done("a", 2)))
	f.Add(enc(inv("a", "echo", args(map[string]any{})), started("a"), chunk("a", 1)))
	f.Add(enc(inv("a", "sleep", args(map[string]any{"ms": 60_000})), started("a"), done("a", 1)))
	f.Add(enc(inv("a", "count", args(map[string]any{"n": 50})), started("a"), done("a", 1),
		inv("b", "upper", args(map[string]any{})), started("b"), chunk("b", 1), done("b", 2)))
	f.Add(enc(inv("a", "echo", args(map[string]any{})), started("a"), chunk("a", 3), done("a", 4)))
	f.Add(enc(inv("a", "echo", args(map[string]any{})), started("a"), done("a", 1), inv("b", "echo", args(map[string]any{}))))
	f.Add(enc(inv("a", "nope", args(map[string]any{})), started("a"), done("a", 1)))
	f.Add([]byte("\x00\x00\x00\x02\x00\x00\x00\x00\x81\xa1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := serveChild(t, config{}, child.Options{Tools: demotools.Tools(demotools.Options{})})
		_, err := srv.host.Handshake(ctxT(t), nil)
		require.NoError(t, err)
		s := dial(t, srv.host)
		// A child that stops reading (its ingress queue full) blocks the
		// write: that is backpressure, and the write gives up.
		if err := s.WriteRawBy(data, time.Now().Add(200*time.Millisecond)); err == nil {
			s.Conn.CloseWrite()
		}
		// The child's output: well-formed packets up to its close, or a
		// deadline (a handler still running, as a sleep does, is ended
		// by the close below).
		until := time.Now().Add(200 * time.Millisecond)
		for {
			_, err := s.ReadBy(until)
			if err == nil {
				continue
			}
			var ne net.Error
			if !errors.Is(err, io.EOF) && !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, net.ErrClosed) {
				require.NotErrorIs(t, err, wire.ErrProtocol, "the child wrote a malformed packet")
			}
			break
		}
		s.Close()
		pingUntil(t, srv.host, func(p *wire.Pong) bool { return p.Streams == 0 })
	})
}
