package coalesce

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/testnet"
	"github.com/skulkrt/skulk/wire"
)

// discard is io.Discard without its ReaderFrom, so io.CopyBuffer really
// reads into its buffer.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkSmallFramesOverSocket sends small chunk frames over a Unix
// socket pair: "stream" through a Writer in Stream mode (the flusher
// coalesces what is queued while a write is under way) and packetio.Reader,
// "plain" as packetio.WritePacket (one write per packet), "raw64" as one
// 64-byte write syscall per message read in bulk. One op is one frame
// written and read. Target: stream at least the raw64 rate
// (docs/performance.md, "Benchmarks of the main module").
func BenchmarkSmallFramesOverSocket(b *testing.B) {
	f, err := frame.NewChunk("call-0123456789", frame.ProviderToCaller, 42, frame.MustPayload(map[string]any{"text": "hello, world"}), nil)
	require.NoError(b, err)
	p := &wire.Frame{Frame: f}
	run := func(b *testing.B, write func(w io.Writer) func() error) {
		ua, ub := testnet.SocketPair(b)
		defer ub.Close()
		defer ua.Close()
		next := write(ua)
		r := packetio.NewReader(ub, wire.Limits{})
		b.ReportAllocs()
		b.ResetTimer()
		done := make(chan error, 1)
		go func() { // stopped after b.N packets or a write error
			for range b.N {
				if err := next(); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for range b.N {
			if _, err := r.ReadPacket(); err != nil {
				require.FailNow(b, fmt.Sprint(err))
			}
		}
		require.NoError(b, <-done)
	}
	b.Run("stream", func(b *testing.B) {
		var w *Writer
		run(b, func(dst io.Writer) func() error {
			w = New(dst, wire.Limits{})
			return func() error { return w.Write(context.Background(), Stream, p) }
		})
		require.NoError(b, w.Close())
	})
	b.Run("plain", func(b *testing.B) {
		run(b, func(dst io.Writer) func() error {
			return func() error { return packetio.WritePacket(dst, p, wire.Limits{}) }
		})
	})
	b.Run("raw64", func(b *testing.B) {
		ua, ub := testnet.SocketPair(b)
		defer ub.Close()
		defer ua.Close()
		msg := make([]byte, 64)
		buf := make([]byte, 64<<10)
		b.ReportAllocs()
		b.ResetTimer()
		done := make(chan error, 1)
		go func() { // stopped after b.N writes or a write error
			for range b.N {
				if _, err := ua.Write(msg); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		if _, err := io.CopyBuffer(discard{}, io.LimitReader(ub, int64(b.N)*64), buf); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		require.NoError(b, <-done)
	})
}
