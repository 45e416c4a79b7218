package wire_test

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
)

// Limits.check (Decode's first check) refuses each length above its effective limit, and a header
// length of 0, with the error of its rule; it takes every length up to the
// limits.
func TestLimitsCheck(t *testing.T) {
	for _, c := range []struct {
		name   string
		l      wire.Limits
		h, att uint32
	}{
		{"defaults", wire.Limits{}, protocol.DefaultMaxHeader, protocol.DefaultMaxAttachment},
		{"clamped", wire.Limits{MaxHeader: ^uint32(0), MaxAttachment: ^uint32(0)}, protocol.HardMaxHeader, protocol.HardMaxAttachment},
		{"configured", wire.Limits{MaxHeader: 10, MaxAttachment: 20}, 10, 20},
	} {
		require.NoError(t, wire.CheckLengths(c.l, 1, 0), c.name)
		require.NoError(t, wire.CheckLengths(c.l, c.h, c.att), c.name)

		err := wire.CheckLengths(c.l, c.h+1, 0)
		require.ErrorIs(t, err, protocol.ErrHeaderLength, c.name)
		require.ErrorIs(t, err, wire.ErrProtocol, c.name)
		require.ErrorIs(t, err, wire.ErrTooLarge, c.name)

		err = wire.CheckLengths(c.l, 1, c.att+1)
		require.ErrorIs(t, err, protocol.ErrAttachmentLength, c.name)
		require.ErrorIs(t, err, wire.ErrProtocol, c.name)
		require.ErrorIs(t, err, wire.ErrTooLarge, c.name)

		err = wire.CheckLengths(c.l, 0, 0)
		require.ErrorIs(t, err, protocol.ErrHeaderLength, c.name)
		require.NotErrorIs(t, err, wire.ErrTooLarge, c.name)
	}
}

// A Decoder told the call id to expect gives the frames of that call the
// very string it was told, and it gives one *Frame for every frame.
func TestDecoderKnobs(t *testing.T) {
	hdrs, atts := goldenFrameHeaders(t)
	var d wire.Decoder
	p, err := d.DecodeHeader(hdrs[0], atts[0], "")
	require.NoError(t, err)
	id := p.(*wire.Frame).CallID
	want := string([]byte(id)) // a string of its own
	p, err = d.DecodeHeader(hdrs[0], atts[0], want)
	require.NoError(t, err)
	got := p.(*wire.Frame).CallID
	require.Equal(t, want, got)
	require.Same(t, unsafe.StringData(want), unsafe.StringData(got), "the expected call id is shared")

	first := mustDecode(t, &d, hdrs[0], atts[0])
	require.Same(t, first, mustDecode(t, &d, hdrs[1], atts[1]), "one frame is reused")
}

func mustDecode(t *testing.T, d *wire.Decoder, h []byte, att uint32) wire.Packet {
	t.Helper()
	p, err := d.DecodeHeader(h, att, "")
	require.NoError(t, err)
	return p
}

// TestCallIDCheckAgreesWithFrame: the codec refuses exactly the call ids
// frame.Frame.Validate refuses, with the same error.
func TestCallIDCheckAgreesWithFrame(t *testing.T) {
	for _, id := range []string{
		"c", "", "bad \xff", strings.Repeat("x", 128), strings.Repeat("x", 129),
		strings.Repeat("日", 128), strings.Repeat("日", 129),
	} {
		f := frame.Frame{CallID: id, Direction: frame.CallerToProvider, Kind: frame.KindStarted}
		require.Equal(t, f.Validate(), wire.CheckCallID(id), "id %q", id)
	}
}

// TestPayloadCheckAgreesWithFrame: the encoder refuses exactly the
// payloads frame.Frame.Validate refuses, with the same error.
func TestPayloadCheckAgreesWithFrame(t *testing.T) {
	for name, p := range map[string][]byte{
		"object":       frame.MustPayload(map[string]any{"text": "hi"}),
		"array":        {0x90},
		"binary value": {0x81, 0xa1, 'k', 0xc4, 0x01, 0x00},
		"truncated":    {0x81, 0xa1},
		"trailing":     {0x80, 0x80},
	} {
		f := frame.Frame{CallID: "c", Direction: frame.CallerToProvider, Sequence: 1, Kind: frame.KindChunk, Payload: p}
		require.Equal(t, f.Validate(), wire.CheckPayload(p), name)
	}
}
