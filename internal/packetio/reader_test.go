package packetio

import (
	"bytes"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/stretchr/testify/require"
)

func TestReaderRecycle(t *testing.T) {
	var stream []byte
	for _, n := range []int{100, 50, 200, 100} {
		stream = append(stream, inlinePacket(t, bytes.Repeat([]byte{byte(n)}, n))...)
	}
	r := NewReader(bytes.NewReader(stream), wire.Limits{})
	data := func() []byte {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		return p.(*wire.Frame).Media.(*frame.InlineMedia).Data
	}
	first := data() // 100 bytes, new
	require.Equal(t, bytes.Repeat([]byte{100}, 100), first)
	r.Recycle(nil) // no-op
	r.Recycle(first)
	second := data() // 50 bytes: read into the recycled buffer
	require.Equal(t, bytes.Repeat([]byte{50}, 50), second)
	require.Same(t, &first[0], &second[0], "the recycled buffer was reused")
	r.Recycle(second)
	third := data() // 200 bytes: the recycled buffer is too small
	require.Equal(t, bytes.Repeat([]byte{200}, 200), third)
	require.NotSame(t, &first[0], &third[0])
	r.Recycle(third)
	fourth := data() // 100 bytes: the smallest recycled buffer that fits
	require.Same(t, &first[0], &fourth[0])
	require.Equal(t, bytes.Repeat([]byte{100}, 100), fourth)

	for range 10 {
		r.Recycle(make([]byte, 8))
	}
	require.Len(t, r.free, maxRecycled, "recycled buffers are bounded")
}

// TestReaderRecycleKeepsLarger fills the recycled buffers with small
// ones, as a connection that carried small attachments leaves them, and
// checks that large attachments after them are still read into a recycled
// buffer instead of a new one each time.
func TestReaderRecycleKeepsLarger(t *testing.T) {
	const large = 64 << 10
	var stream []byte
	for range 3 {
		stream = append(stream, inlinePacket(t, bytes.Repeat([]byte{7}, large))...)
	}
	r := NewReader(bytes.NewReader(stream), wire.Limits{})
	data := func() []byte {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		return p.(*wire.Frame).Media.(*frame.InlineMedia).Data
	}
	for range maxRecycled {
		r.Recycle(make([]byte, 64))
	}
	first := data() // no recycled buffer fits: new
	require.Len(t, first, large)
	r.Recycle(first)
	require.Len(t, r.free, maxRecycled, "recycled buffers are bounded")
	second := data()
	require.Same(t, &first[0], &second[0], "the large buffer was kept and reused")
	r.Recycle(second)
	r.Recycle(make([]byte, 64)) // smaller than every kept buffer but the others: one of those goes
	third := data()
	require.Same(t, &first[0], &third[0], "a small buffer never displaces the large one")
}

// inlinePacket is a chunk frame packet carrying data as inline media.
func inlinePacket(t *testing.T, data []byte) []byte {
	t.Helper()
	f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: data, MediaType: "a/b"})
	require.NoError(t, err)
	b, err := Encode(&wire.Frame{Frame: f}, wire.Limits{})
	require.NoError(t, err)
	return b
}
