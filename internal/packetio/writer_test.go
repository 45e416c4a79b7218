package packetio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

// TestWriterConcurrentPacketsWhole: packets written by several goroutines
// at once arrive whole, each goroutine's in its order, over a destination
// with a file descriptor (writev) and over one without (net.Pipe).
func TestWriterConcurrentPacketsWhole(t *testing.T) {
	pairs := map[string]func(t *testing.T) (io.WriteCloser, io.ReadCloser){
		"socket": func(t *testing.T) (io.WriteCloser, io.ReadCloser) { return socketPair(t) },
		"pipe":   func(t *testing.T) (io.WriteCloser, io.ReadCloser) { a, b := net.Pipe(); return a, b },
	}
	for name, pair := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t)
			defer b.Close()
			w := NewWriter(a, wire.Limits{})
			const writers, each = 4, 50
			data := bytes.Repeat([]byte{0xab}, 3000)
			var wg sync.WaitGroup
			for g := range writers {
				wg.Add(1)
				go func() { // ends after its packets or a write error
					defer wg.Done()
					for i := range each {
						f, err := frame.NewChunk(string(rune('a'+g)), frame.ProviderToCaller, uint64(i+1), nil,
							&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
						if err == nil {
							err = w.WritePacket(&wire.Frame{Frame: f})
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			go func() { wg.Wait(); a.Close() }() // the reader sees EOF once every writer is done
			next := map[string]uint64{}
			r := NewReader(b, wire.Limits{})
			for {
				p, err := r.ReadPacket()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				f := p.(*wire.Frame)
				next[f.CallID]++
				require.Equal(t, next[f.CallID], f.Sequence, "call %s out of order", f.CallID)
				require.Equal(t, data, f.Media.(*frame.InlineMedia).Data)
			}
			for g := range writers {
				require.Equal(t, uint64(each), next[string(rune('a'+g))])
			}
		})
	}
}

// TestWriterInvalidPacketWritesNothing: a packet the Writer refuses leaves
// the connection untouched and the Writer usable.
func TestWriterInvalidPacketWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, wire.Limits{})
	err := w.WritePacket(&wire.End{})
	var inv *protocol.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Zero(t, buf.Len())
	err = w.WritePacket(&wire.Ping{Nonce: 1}) // still usable
	require.NoError(t, err)
	p, err := wire.Decode(buf.Bytes(), wire.Limits{})
	require.NoError(t, err)
	require.Equal(t, &wire.Ping{Nonce: 1}, p)
}

// failWriter fails every Write after the first n bytes; short makes it
// take less than it was given without an error instead.
type failWriter struct {
	n     int
	short bool
}

var errWrite = errors.New("write failed")

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	k := f.n
	f.n = 0
	if f.short {
		return k, nil
	}
	return k, errWrite
}

// TestWriterErrorIsSticky: after a failed write every later WritePacket
// returns the same error (the connection may hold part of a packet), a
// short write without an error included.
func TestWriterErrorIsSticky(t *testing.T) {
	for _, short := range []bool{false, true} {
		want := errWrite
		if short {
			want = io.ErrShortWrite
		}
		w := NewWriter(&failWriter{n: 10, short: short}, wire.Limits{})
		require.ErrorIs(t, w.WritePacket(&wire.Ping{Nonce: 1}), want)
		require.ErrorIs(t, w.WritePacket(&wire.Ping{Nonce: 2}), want)
	}
}

// TestWriterKeepsNoAttachment: once WritePacket returns, the Writer holds
// no reference to the packet's attachment.
func TestWriterKeepsNoAttachment(t *testing.T) {
	w := NewWriter(io.Discard, wire.Limits{})
	f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: []byte{1, 2, 3}, MediaType: "a/b"})
	require.NoError(t, err)
	require.NoError(t, w.WritePacket(&wire.Frame{Frame: f}))
	for _, piece := range w.iov[:cap(w.iov)] {
		require.Nil(t, piece)
	}
}

// TestWriterPacketsInOneWrite: WritePackets writes its packets in order,
// attachments included, and refuses all of them, writing nothing, when one
// is invalid.
func TestWriterPacketsInOneWrite(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, wire.Limits{})
	chunk, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: []byte("abc"), MediaType: "x/y"})
	require.NoError(t, err)
	done, err := frame.NewCompleted("c1", frame.ProviderToCaller, 2, nil)
	require.NoError(t, err)
	require.ErrorIs(t, w.WritePackets(&wire.Frame{chunk}, &wire.End{}), frame.ErrInvalid)
	require.Zero(t, buf.Len())
	require.NoError(t, w.WritePackets(&wire.Frame{chunk}, &wire.Frame{done}, &wire.End{CallID: "c1"}))
	r := NewReader(&buf, wire.Limits{})
	for _, want := range []wire.Packet{&wire.Frame{chunk}, &wire.Frame{done}, &wire.End{CallID: "c1"}} {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		require.Equal(t, want, p)
	}
}
