package wire_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
)

// Benchmarks of the packet path. docs/performance.md ("Benchmarks of the
// main module") says what each measures and the commands that run them.

// benchChunk is a typical small streamed chunk: a short text payload.
func benchChunk(b testing.TB) *wire.Frame {
	f, err := frame.NewChunk("call-0123456789", frame.ProviderToCaller, 42, frame.MustPayload(map[string]any{"text": "hello, world"}), nil)
	require.NoError(b, err)
	return &wire.Frame{f}
}

// repeatReader yields the same bytes forever.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

// BenchmarkSmallFrameEncode appends a small chunk frame to a reused buffer.
func BenchmarkSmallFrameEncode(b *testing.B) {
	p := benchChunk(b)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, _, err = wire.AppendPacket(buf[:0], p, wire.Limits{})
		require.NoError(b, err)
	}
}

// BenchmarkSmallFrameDecode reads small chunk frames with a Reader, which
// validates each one. Target: at most 2 allocations per frame.
func BenchmarkSmallFrameDecode(b *testing.B) { benchDecode(b, benchChunk(b)) }

// benchDecode reads p, encoded once, over and over with a Reader.
func benchDecode(b *testing.B, p wire.Packet) {
	enc, err := packetio.Encode(p, wire.Limits{})
	require.NoError(b, err)
	r := packetio.NewReader(&repeatReader{b: enc}, wire.Limits{})
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadPacket(); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
	}
}

// BenchmarkRecordFrameDecode reads chunk frames whose payload is a record
// of about 1 KiB (nested maps and arrays, 40 fields): the payload check
// dominates.
func BenchmarkRecordFrameDecode(b *testing.B) {
	rec := map[string]any{}
	for i := range 20 {
		rec[string(rune('a'+i))+"_name"] = "value number " + string(rune('a'+i))
		rec[string(rune('a'+i))+"_list"] = []any{i, float64(i) / 3, map[string]any{"ok": i%2 == 0, "note": "nested"}}
	}
	f, err := frame.NewChunk("call-0123456789", frame.ProviderToCaller, 42, frame.MustPayload(rec), nil)
	require.NoError(b, err)
	benchDecode(b, &wire.Frame{f})
}

// BenchmarkSmallFrameEncodeDecode is one encode and one decode of a small
// chunk frame.
func BenchmarkSmallFrameEncodeDecode(b *testing.B) {
	p := benchChunk(b)
	buf := make([]byte, 0, 256)
	d := wire.NewTestDecoder()
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, _, err = wire.AppendPacket(buf[:0], p, wire.Limits{})
		require.NoError(b, err)
		if _, err := d.Decode(buf[protocol.PrefixLen:], 0); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
	}
}

// discard is io.Discard without its ReaderFrom, so that io.CopyBuffer uses
// the buffer it is given.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkInlineMedia1MiB moves 1 MiB inline-media frames over a Unix
// socket pair: "packet" through Writer and Reader with the reader recycling
// each frame's data, "packet-norecycle" without (a new buffer per frame),
// and "raw" as the same bytes written with io.Copy (one write per packet)
// and read with io.CopyBuffer into a reused 1 MiB buffer. Compare MB/s.
func BenchmarkInlineMedia1MiB(b *testing.B) {
	data := bytes.Repeat([]byte{0x5a}, 1<<20)
	f, err := frame.NewChunk("call-1", frame.ProviderToCaller, 1, nil,
		&frame.InlineMedia{Data: data, MediaType: "audio/pcm", SampleRate: 48000, Channels: 2})
	require.NoError(b, err)
	p := &wire.Frame{f}
	enc, err := packetio.Encode(p, wire.Limits{})
	require.NoError(b, err)

	for _, recycle := range []bool{true, false} {
		name := "packet"
		if !recycle {
			name = "packet-norecycle"
		}
		b.Run(name, func(b *testing.B) { benchInlinePackets(b, p, len(enc), recycle) })
	}

	b.Run("raw", func(b *testing.B) {
		ua, ub := socketPair(b)
		defer ub.Close()
		defer ua.Close()
		buf := make([]byte, len(enc))
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		b.ResetTimer()
		done := make(chan error, 1)
		go func() { // stopped after b.N copies or a write error
			for range b.N {
				if _, err := io.Copy(ua, bytes.NewReader(enc)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		if _, err := io.CopyBuffer(discard{}, io.LimitReader(ub, int64(b.N)*int64(len(enc))), buf); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		require.NoError(b, <-done)
	})
}

// benchInlinePackets writes b.N copies of p, each with one vectored write, and reads them
// with a Reader over a Unix socket pair; with recycle, the reader hands each
// frame's data back (packetio.Reader.Recycle) once it has looked at it, as a consumer
// that forwards media would.
func benchInlinePackets(b *testing.B, p *wire.Frame, size int, recycle bool) {
	ua, ub := socketPair(b)
	defer ub.Close()
	defer ua.Close()
	r := packetio.NewReader(ub, wire.Limits{})
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	go func() { // stopped after b.N packets or a write error
		for range b.N {
			if err := writePacket(ua, p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		q, err := r.ReadPacket()
		require.NoError(b, err)
		if recycle {
			r.Recycle(q.(*wire.Frame).Media.(*frame.InlineMedia).Data)
		}
	}
	require.NoError(b, <-done)
}
