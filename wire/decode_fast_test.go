package wire_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/stretchr/testify/require"
)

// goldenFrameHeaders returns the headers of the golden frame vectors with
// the lengths of their attachments.
func goldenFrameHeaders(t testing.TB) (hdrs [][]byte, atts []uint32) {
	entries, err := os.ReadDir(goldenDir)
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "frame_") || filepath.Ext(e.Name()) != ".bin" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(goldenDir, e.Name()))
		require.NoError(t, err)
		h := binary.BigEndian.Uint32(b)
		hdrs = append(hdrs, b[protocol.PrefixLen:protocol.PrefixLen+h])
		atts = append(atts, binary.BigEndian.Uint32(b[4:]))
	}
	require.NotEqualValues(t, 0, len(hdrs), "no golden frames")
	return hdrs, atts
}

// TestDecodeFrameFastTakesOurFrames: every golden frame (our encoders put
// "t" first) decodes in the single pass, to what the general path gives.
func TestDecodeFrameFastTakesOurFrames(t *testing.T) {
	hdrs, atts := goldenFrameHeaders(t)
	for i, h := range hdrs {
		fast, general := wire.NewTestDecoder(), wire.NewTestDecoder()
		p := fast.DecodeFrameFast(h, atts[i])
		require.NotNil(t, p, "golden frame %d not taken by the single pass", i)
		want, err := general.DecodeGeneral(h, atts[i])
		require.NoError(t, err)
		require.Equal(t, want, wire.Packet(p))
	}
}

// TestCanonicalHead: the headers AppendPacket writes match the canonical
// layout byte for byte; a header with the same fields in another order is
// not matched, and still decodes by its keys to the same frame.
func TestCanonicalHead(t *testing.T) {
	for _, f := range sampleFrames(t) {
		b, _, err := wire.AppendPacket(nil, &wire.Frame{Frame: f}, packetio.DefaultLimits())
		require.NoError(t, err)
		h := b[protocol.PrefixLen : protocol.PrefixLen+binary.BigEndian.Uint32(b)]
		r := mpack.NewReader(h)
		_, err = r.ReadMapLen()
		require.NoError(t, err)
		d := wire.NewTestDecoder()
		p := d.CanonicalHead(&r)
		require.NotNil(t, p, "%s frame", f.Kind)
		require.Equal(t, [4]any{f.CallID, f.Direction, f.Sequence, f.Kind}, [4]any{p.CallID, p.Direction, p.Sequence, p.Kind})
	}
	reordered := hdr("t", "frame", "call_id", "c1", "sequence", 2, "direction", "provider_to_caller",
		"kind", "chunk", "payload", map[string]any{"a": 1})
	r := mpack.NewReader(reordered)
	_, err := r.ReadMapLen()
	require.NoError(t, err)
	d := wire.NewTestDecoder()
	require.Nil(t, d.CanonicalHead(&r), "sequence before direction is not our layout")
	p := d.DecodeFrameFast(reordered, 0)
	require.NotNil(t, p)
	want, err := wire.NewTestDecoder().DecodeGeneral(reordered, 0)
	require.NoError(t, err)
	require.Equal(t, want, wire.Packet(p))
}

// TestDecodeFrameFastDeclines: headers the general path refuses, or reads
// differently from a single pass, are left to it.
func TestDecodeFrameFastDeclines(t *testing.T) {
	cases := map[string][]byte{
		"t not first":        hdr(append([]any{"call_id", "c1"}, frameKV()...)...),
		"t twice":            hdr(frameKV("t", "end")...),
		"not a frame":        hdr("t", "end", "call_id", "c1"),
		"non-string key":     hdr(frameKV(7, "x")...),
		"trailing bytes":     append(hdr(frameKV()...), 0xc0),
		"bad sequence":       hdr(frameKV("sequence", -1)...),
		"unknown kind":       hdr(frameKV("kind", "chunky")...),
		"synthetic":          hdr(frameKV("synthetic", true)...),
		"payload not a map":  hdr(frameKV("payload", "x")...),
		"truncated value":    hdr(frameKV()...)[:20],
		"unknown media kind": hdr(frameKV("media", map[string]any{"kind": "other"})...),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			d := wire.NewTestDecoder()
			require.Nil(t, d.DecodeFrameFast(h, 0))
		})
	}
	d := wire.NewTestDecoder()
	require.Nil(t, d.DecodeFrameFast(hdr(frameKV()...), 3), "an attachment without inline media")
}

// FuzzDecodeFrameFast: whatever header the single pass accepts, the general
// path accepts too and decodes to an equal packet.
func FuzzDecodeFrameFast(f *testing.F) {
	hdrs, atts := goldenFrameHeaders(f)
	for i, h := range hdrs {
		f.Add(h, atts[i])
	}
	f.Add(hdr(frameKV("x-unknown", []any{1, "a", nil}, "payload", nil, "error", nil)...), uint32(0))
	f.Add(hdr(frameKV("media", inlineMedia("sample_rate", 8000), "media", nil)...), uint32(2))
	f.Fuzz(func(t *testing.T, h []byte, att uint32) {
		fast, general := wire.NewTestDecoder(), wire.NewTestDecoder()
		p := fast.DecodeFrameFast(h, att)
		if p == nil {
			return
		}
		want, err := general.DecodeGeneral(h, att)
		require.NoError(t, err, "single pass accepted a header the general path refuses")
		require.Falsef(t, !reflect.DeepEqual(want, wire.Packet(p)), "single pass %#v, general path %#v", p, want)
	})
}

// sampleFrames returns one valid frame of every kind, both directions.
func sampleFrames(t *testing.T) []frame.Frame {
	t.Helper()
	var fs []frame.Frame
	add := func(f frame.Frame, err error) {
		t.Helper()
		require.NoError(t, err)
		fs = append(fs, f)
	}
	add(frame.NewStarted("call-1", frame.CallerToProvider))
	add(frame.NewChunk("call-1", frame.ProviderToCaller, 3, frame.MustPayload(map[string]any{"text": "hi"}), nil))
	add(frame.NewChunk("call-1", frame.ProviderToCaller, 300, nil, &frame.InlineMedia{Data: []byte{1, 2}, MediaType: "audio/pcm"}))
	add(frame.NewCompleted("call-1", frame.CallerToProvider, 70000, nil))
	add(frame.NewFailed("call-1", frame.ProviderToCaller, 4, frame.CodeProviderError, "no"))
	add(frame.NewCancelled("call-1", frame.ProviderToCaller, 5, ""))
	return fs
}

// TestDecoderZeroValue: a zero Decoder, as a caller outside the module
// makes one, decodes every golden frame header as Decode decodes its whole
// packet, with no panic.
func TestDecoderZeroValue(t *testing.T) {
	hdrs, atts := goldenFrameHeaders(t)
	var d wire.Decoder
	for i, h := range hdrs {
		p, err := d.DecodeHeader(h, atts[i], "")
		require.NoError(t, err, "frame %d", i)
		f, ok := p.(*wire.Frame)
		require.True(t, ok, "frame %d: got %T", i, p)
		require.NotEmpty(t, f.CallID, "frame %d", i)
	}
	_, err := d.DecodeHeader([]byte{0xc1}, 0, "")
	require.ErrorIs(t, err, wire.ErrProtocol)
}

// TestDecodeFrameFastRefusesWhatValidateRefuses: the single pass checks
// a frame with frame.Validate (its payload stood in for by an empty
// object, the bytes being checked as they are read), so a frame whose
// shape, media or error breaks the rules is never taken by it, while the
// same frame made valid is. Each bad header is one the general path
// refuses too.
func TestDecodeFrameFastRefusesWhatValidateRefuses(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	blob := func(extra ...any) map[string]any {
		m := map[string]any{"kind": "blob", "blob_id": "b1", "size_bytes": 3, "sha256": sha, "media_type": "audio/pcm"}
		for i := 0; i < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	fail := func(code string) map[string]any { return map[string]any{"code": code, "message": "m"} }
	failed := func(extra ...any) []any { return frameKV(append([]any{"kind", "failed", "payload", nil}, extra...)...) }
	cases := []struct {
		name      string
		bad, good []any
		att       uint32
	}{
		{"inline media sample_rate", frameKV("media", inlineMedia("sample_rate", -1)), frameKV("media", inlineMedia("sample_rate", 8000)), 2},
		{"inline media channels", frameKV("media", inlineMedia("channels", -2)), frameKV("media", inlineMedia("channels", 2)), 2},
		{"inline media codec", frameKV("media", inlineMedia("codec", "\xff")), frameKV("media", inlineMedia("codec", "opus")), 2},
		{"blob media sha256", frameKV("media", blob("sha256", "x")), frameKV("media", blob()), 0},
		{"blob media size_bytes", frameKV("media", blob("size_bytes", -1)), frameKV("media", blob()), 0},
		{"media on completed", frameKV("kind", "completed", "media", blob()), frameKV("kind", "completed"), 0},
		{"error on a chunk", frameKV("error", fail("provider_error")), failed("error", fail("provider_error")), 0},
		{"failed without error", failed(), failed("error", fail("provider_error")), 0},
		{"failed with cancelled", failed("error", fail("cancelled")), failed("error", fail("timeout")), 0},
		{"payload on started", frameKV("kind", "started", "sequence", 0), frameKV("kind", "started", "sequence", 0, "payload", nil), 0},
		{"sequence 0 on a chunk", frameKV("sequence", 0), frameKV("sequence", 2), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotNil(t, wire.NewTestDecoder().DecodeFrameFast(hdr(c.good...), c.att), "the valid frame is taken")
			require.Nil(t, wire.NewTestDecoder().DecodeFrameFast(hdr(c.bad...), c.att), "the invalid frame is left to the general path")
			_, err := wire.NewTestDecoder().DecodeGeneral(hdr(c.bad...), c.att)
			require.ErrorIs(t, err, frame.ErrInvalid, "the general path refuses it")
		})
	}
}
