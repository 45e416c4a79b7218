package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
)

// fuzzLimits are small so that the fuzzer reaches them.
var fuzzLimits = wire.Limits{MaxHeader: 4 << 10, MaxAttachment: 4 << 10}

// FuzzReadPacket feeds arbitrary bytes to a Reader. It must never panic nor
// allocate beyond its limits, and every packet it returns must encode, and
// decode again to an equal packet whose encoding is the same bytes.
func FuzzReadPacket(f *testing.F) {
	entries, _ := os.ReadDir(goldenDir)
	var all []byte
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".bin" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(goldenDir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	f.Add(pkt(hdr(frameKV("synthetic", true)...), nil))
	f.Add(pkt(hdr(frameKV("media", inlineMedia("sample_rate", 0))...), []byte{1, 2, 3}))
	f.Add(pkt(hdr("t", "hello", "max_streams", 1, "tools", []any{map[string]any{"id": "x", "input_schema": map[string]any{"a": []any{1.5}}}}), nil))
	f.Add(pkt(hdr("t", "tools", "tools", []any{map[string]any{"id": "x", "version": "2", "result_schema": map[string]any{"type": "object"}}}), nil))
	f.Add(pkt(hdr("t", "startup", "protocol", 1, "tools_updates", true), nil))
	f.Add(prefix(0xffffffff, 0xffffffff))

	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r := packetio.NewReader(bytes.NewReader(data), fuzzLimits)
		var got []wire.Packet
		var err error
		for {
			var p wire.Packet
			p, err = r.ReadPacket()
			var inv *protocol.InvalidError
			if errors.As(err, &inv) {
				require.Falsef(t, inv.Err == nil || !errors.Is(err, frame.ErrInvalid) || errors.Is(err, wire.ErrProtocol), "malformed InvalidError %#v", inv)
				continue // in step: go on reading
			}
			if err != nil {
				break
			}
			got = append(got, p)
		}
		runtime.ReadMemStats(&after)
		// The reader's buffer, the packets (a generous factor of the input
		// for decoded maps) and the limits bound what may be allocated.
		bound := uint64(packetio.ReadBufSize) + 64*uint64(len(data)) + uint64(fuzzLimits.MaxHeader) + uint64(fuzzLimits.MaxAttachment) + 1<<20
		if n := after.TotalAlloc - before.TotalAlloc; n > bound {
			require.FailNow(t, fmt.Sprintf("allocated %d bytes for %d bytes of input", n, len(data)))
		}
		require.Falsef(t, !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, wire.ErrProtocol), "unexpected error class: %v", err)
		for _, p := range got {
			enc, err := packetio.Encode(p, fuzzLimits)
			if err != nil {
				// The canonical encoding is never longer than what was
				// read (unknown and nil keys are dropped, numbers take
				// their smallest form), so it fits the same limits.
				require.FailNow(t, fmt.Sprintf("re-encode %s: %v", packetio.TypeOf(p), err))
			}
			p2, err := wire.Decode(enc, fuzzLimits)
			if err != nil {
				require.FailNow(t, fmt.Sprintf("decode re-encoded %s: %v", packetio.TypeOf(p), err))
			}
			require.Falsef(t, !reflect.DeepEqual(p, p2), "round trip changed the packet:\n%#v\n%#v", p, p2)
			enc2, err := packetio.Encode(p2, fuzzLimits)
			require.Falsef(t, err != nil || !bytes.Equal(enc, enc2), "encoding is not canonical: %v", err)
			if f, ok := p.(*wire.Frame); ok {
				if m, ok := f.Media.(*frame.InlineMedia); ok && len(m.Data) > int(fuzzLimits.MaxAttachment) {
					require.FailNow(t, fmt.Sprintf("attachment of %d bytes over the limit", len(m.Data)))
				}
			}
		}
		// Decode of a whole single packet agrees with the Reader.
		if len(got) == 1 && r.Buffered() == 0 {
			if p, err := wire.Decode(data, fuzzLimits); err == nil && !reflect.DeepEqual(p, got[0]) {
				require.FailNow(t, fmt.Sprintf("Decode and Reader disagree"))
			}
		}
	})
}

// FuzzFrameValidate builds frames from arbitrary fields. Validate must never
// panic; a frame it accepts must satisfy docs/protocol.md §3 and §4 as written out
// independently here, and must survive the wire unchanged; a frame it
// refuses must be refused by the encoder with the same field.
func FuzzFrameValidate(f *testing.F) {
	f.Add("c1", uint8(2), uint8(2), uint64(1), false, []byte{0x81, 0xa1, 'a', 0x01}, uint8(0), "", "", int64(0), int64(0),
		false, 0.0, false, 0.0, []byte(nil), "", int64(0), uint8(0), "", false)
	f.Add("c1", uint8(2), uint8(2), uint64(3), false, []byte(nil), uint8(1), "audio/pcm", "opus", int64(48000), int64(2),
		true, 1.5, true, 0.02, []byte{1, 2, 3}, "", int64(0), uint8(0), "", false)
	f.Add("c1", uint8(1), uint8(2), uint64(3), false, []byte(nil), uint8(2), "video/mp4", "", int64(0), int64(0),
		false, 0.0, false, 0.0, []byte(nil), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", int64(10), uint8(0), "", false)
	f.Add("c1", uint8(2), uint8(4), uint64(9), false, []byte(nil), uint8(0), "", "", int64(0), int64(0),
		false, 0.0, false, 0.0, []byte(nil), "", int64(0), uint8(1), "boom", true)
	f.Add("c1", uint8(2), uint8(5), uint64(9), true, []byte(nil), uint8(0), "", "", int64(0), int64(0),
		false, 0.0, false, 0.0, []byte(nil), "", int64(0), uint8(4), "", true)
	f.Add("c1", uint8(1), uint8(1), uint64(0), false, []byte(nil), uint8(0), "", "", int64(0), int64(0),
		false, 0.0, false, 0.0, []byte(nil), "", int64(0), uint8(0), "", false)

	f.Fuzz(func(t *testing.T, callID string, dir, kind uint8, seq uint64, synthetic bool, payload []byte,
		mediaKind uint8, mediaType, codec string, rate, channels int64, hasTS bool, ts float64, hasDur bool, dur float64,
		data []byte, sha string, size int64, code uint8, msg string, hasErr bool) {
		fr := frame.Frame{CallID: callID, Direction: frame.Direction(dir), Sequence: seq, Kind: frame.Kind(kind), Synthetic: synthetic}
		if payload != nil {
			fr.Payload = frame.Payload(payload)
		}
		switch mediaKind % 3 {
		case 1:
			m := &frame.InlineMedia{Data: data, MediaType: mediaType, Codec: codec, SampleRate: rate, Channels: channels}
			if hasTS {
				m.TimestampSeconds = &ts
			}
			if hasDur {
				m.DurationSeconds = &dur
			}
			fr.Media = m
		case 2:
			fr.Media = &frame.BlobMedia{BlobID: codec, SizeBytes: size, SHA256: sha, MediaType: mediaType}
		}
		if hasErr {
			fr.Error = &frame.Error{Code: frame.Code(code), Message: msg}
		}
		err := fr.Validate()
		if err != nil {
			var fe *frame.FieldError
			require.ErrorAsf(t, err, &fe, "Validate returned %T", err)
			require.ErrorIsf(t, err, frame.ErrInvalid, "Validate returned %T", err)
			_, encErr := packetio.Encode(&wire.Frame{fr}, hardLimits())
			var fe2 *frame.FieldError
			require.Falsef(t, !errors.As(encErr, &fe2) || fe2.Field != fe.Field, "encoder refused with %v, Validate with %v", encErr, err)
			return
		}
		if reason := violates(&fr); reason != "" {
			require.FailNow(t, fmt.Sprintf("Validate accepted a frame that %s", reason))
		}
		enc, err := packetio.Encode(&wire.Frame{fr}, hardLimits())
		if synthetic {
			var inv *protocol.InvalidError
			require.ErrorAs(t, err, &inv, "a synthetic frame was encoded")
			return
		}
		require.NoError(t, err, "encode a valid frame")
		p, err := wire.Decode(enc, hardLimits())
		require.NoError(t, err, "decode a valid frame")
		want := fr
		if m, ok := want.Media.(*frame.InlineMedia); ok && m.Data == nil {
			c := *m
			c.Data = []byte{}
			want.Media = &c
		}
		if !reflect.DeepEqual(&wire.Frame{want}, p) {
			require.FailNow(t, fmt.Sprintf("the wire changed the frame:\n%#v\n%#v", want, p.(*wire.Frame).Frame))
		}
	})
}

// hardLimits are the largest limits a side may configure.
func hardLimits() wire.Limits {
	return wire.Limits{MaxHeader: protocol.HardMaxHeader, MaxAttachment: protocol.HardMaxAttachment}
}

// violates returns which rule of docs/protocol.md §3 or §4 f breaks, or "".
func violates(f *frame.Frame) string {
	runes := func(s string) int { return utf8.RuneCountInString(s) }
	switch {
	case !utf8.ValidString(f.CallID) || runes(f.CallID) < 1 || runes(f.CallID) > 128:
		return "has a bad call_id"
	case f.Direction != frame.CallerToProvider && f.Direction != frame.ProviderToCaller:
		return "has a bad direction"
	case f.Kind < frame.KindStarted || f.Kind > frame.KindCancelled:
		return "has a bad kind"
	case (f.Sequence == 0) != (f.Kind == frame.KindStarted):
		return "breaks the sequence rule"
	}
	if f.Error != nil && (!utf8.ValidString(f.Error.Message) || runes(f.Error.Message) > 2048 || f.Error.Code < frame.CodeProviderError || f.Error.Code > frame.CodeInvalidFrame) {
		return "has a bad error"
	}
	switch m := f.Media.(type) {
	case *frame.InlineMedia:
		if m.MediaType == "" || runes(m.MediaType) > 256 || m.SampleRate < 0 || m.Channels < 0 ||
			(m.TimestampSeconds != nil && !(*m.TimestampSeconds >= 0)) || (m.DurationSeconds != nil && !(*m.DurationSeconds >= 0)) {
			return "has bad inline media"
		}
	case *frame.BlobMedia:
		if m.BlobID == "" || m.SizeBytes < 0 || len(m.SHA256) != 64 || m.MediaType == "" {
			return "has bad blob media"
		}
		for _, c := range m.SHA256 {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return "has a bad sha256"
			}
		}
	}
	p, m, e := f.Payload != nil, f.Media != nil, f.Error
	ok := false
	switch f.Kind {
	case frame.KindStarted:
		ok = !p && !m && e == nil
	case frame.KindChunk:
		ok = (p || m) && e == nil
	case frame.KindCompleted:
		ok = !m && e == nil
	case frame.KindFailed:
		ok = !p && !m && e != nil && e.Code != frame.CodeCancelled
	case frame.KindCancelled:
		ok = !p && !m && (e == nil || e.Code == frame.CodeCancelled)
	}
	if !ok {
		return "breaks the shape table"
	}
	return ""
}

// FuzzStartupCalls encodes a startup whose calls map is built from the
// fuzzer's values and decodes it back: a map the encoder accepts decodes
// to itself, and one it refuses is one Calls.Validate or appendTool refuses.
func FuzzStartupCalls(f *testing.F) {
	f.Add("/run/skulk/c0.1/calls.sock", int64(8), int64(16), "lookup", true, false)
	f.Add("", int64(0), int64(-1), "", false, true)
	f.Fuzz(func(t *testing.T, socket string, depth, inFlight int64, tool string, withTool, detached bool) {
		c := &wire.Calls{Socket: socket, MaxDepth: depth, MaxInFlight: inFlight}
		if withTool {
			c.Tools = []wire.Tool{{ID: tool}}
		}
		st := &wire.Startup{Protocol: 1, ChildID: "c", Limits: packetio.DefaultLimits(), CancelGraceMS: 5, Calls: c}
		b, err := packetio.Encode(st, packetio.DefaultLimits())
		if err != nil {
			require.True(t, wire.ValidateCalls(c) != nil || wire.CheckCallID(tool) != nil, "refused a valid calls map: %v", err)
			return
		}
		p, err := wire.Decode(b, packetio.DefaultLimits())
		require.NoError(t, err)
		require.Equal(t, c, p.(*wire.Startup).Calls)
		inv := &wire.Invoke{CallID: "c1", ToolID: "t", Parent: "p", Depth: depth, Detached: detached}
		if b, err = packetio.Encode(inv, packetio.DefaultLimits()); err != nil {
			require.Negative(t, depth)
			return
		}
		p, err = wire.Decode(b, packetio.DefaultLimits())
		require.NoError(t, err)
		require.Equal(t, depth, p.(*wire.Invoke).Depth)
		require.Equal(t, detached, p.(*wire.Invoke).Detached)
	})
}
