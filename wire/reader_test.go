package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unsafe"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// raw is msgpack bytes put into a header as they are.
type raw []byte

// appendAny appends v: raw as is, strings, integers, booleans, nil, and
// anything else through the generic codec.
func appendAny(b []byte, v any) []byte {
	switch v := v.(type) {
	case raw:
		return append(b, v...)
	case string:
		return mpack.AppendString(b, v)
	case int:
		return mpack.AppendInt(b, int64(v))
	case bool:
		return mpack.AppendBool(b, v)
	case nil:
		return mpack.AppendNil(b)
	}
	// Sorted map keys: the bytes are the same on every run, so the
	// negative vectors built from these tables do not change.
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return append(b, buf.Bytes()...)
}

// hdr builds a header map from key, value, key, value... in that order, so
// tests control key order, duplicates and key types.
func hdr(kv ...any) []byte {
	b := mpack.AppendMapHeader(nil, len(kv)/2)
	for _, v := range kv {
		b = appendAny(b, v)
	}
	return b
}

// pkt frames header h and attachment att with their length prefix.
func pkt(h, att []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(h)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(att)))
	return append(append(b, h...), att...)
}

// prefix is a bare length prefix.
func prefix(h, a uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, h), a)
}

// frameKV is a valid provider chunk's header fields; tests append or
// override (a later duplicate key wins).
func frameKV(extra ...any) []any {
	kv := []any{"t", "frame", "call_id", "c1", "direction", "provider_to_caller", "sequence", 1, "kind", "chunk",
		"payload", map[string]any{"text": "x"}}
	return append(kv, extra...)
}

func inlineMedia(extra ...any) map[string]any {
	m := map[string]any{"kind": "inline", "media_type": "audio/pcm"}
	for i := 0; i < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

func readAll(t *testing.T, r *packetio.Reader) []wire.Packet {
	t.Helper()
	var ps []wire.Packet
	for {
		p, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			return ps
		}
		require.NoError(t, err)
		ps = append(ps, p)
	}
}

func TestReaderOneByteAtATime(t *testing.T) {
	all, want := goldenStream(t)
	r := packetio.NewReader(iotest.OneByteReader(bytes.NewReader(all)), wire.Limits{})
	require.Equal(t, want, readAll(t, r))
	_, err := r.ReadPacket()
	require.ErrorIs(t, err, io.EOF, "EOF is sticky")
}

func TestReaderSplitAtEveryPoint(t *testing.T) {
	all, want := goldenStream(t)
	for i := 0; i <= len(all); i++ {
		r := packetio.NewReader(io.MultiReader(bytes.NewReader(all[:i]), bytes.NewReader(all[i:])), wire.Limits{})
		got := readAll(t, r)
		require.Equal(t, len(want), len(got), "split at %d", i)
		require.Equal(t, want, got, "split at %d", i)
	}
}

func TestReaderHalfAndErrReaders(t *testing.T) {
	all, want := goldenStream(t)
	for name, src := range map[string]io.Reader{
		"half":    iotest.HalfReader(bytes.NewReader(all)),
		"dataerr": iotest.DataErrReader(bytes.NewReader(all)),
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, want, readAll(t, packetio.NewReader(src, wire.Limits{})))
		})
	}
}

func TestReaderLargeHeaderGrowsBuffer(t *testing.T) {
	big := strings.Repeat("x", packetio.ReadBufSize*2)
	p := mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": big}), nil))
	b, err := packetio.Encode(p, wire.Limits{})
	require.NoError(t, err)
	stream := append(append([]byte{}, b...), b...)
	r := packetio.NewReader(iotest.HalfReader(bytes.NewReader(stream)), wire.Limits{})
	got := readAll(t, r)
	require.Equal(t, []wire.Packet{p, p}, got)
}

func TestReaderTruncated(t *testing.T) {
	b, err := packetio.Encode(goldenPackets()[13].p, wire.Limits{}) // frame_chunk_inline
	require.NoError(t, err)
	require.Greater(t, len(b), protocol.PrefixLen+24)
	for n := 1; n < len(b); n++ {
		r := packetio.NewReader(bytes.NewReader(b[:n]), wire.Limits{})
		_, err := r.ReadPacket()
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", n)
	}
	_, err = packetio.NewReader(bytes.NewReader(nil), wire.Limits{}).ReadPacket()
	require.ErrorIs(t, err, io.EOF)
}

func TestReaderReturnsReadError(t *testing.T) {
	boom := errors.New("boom")
	r := packetio.NewReader(iotest.ErrReader(boom), wire.Limits{})
	_, err := r.ReadPacket()
	require.ErrorIs(t, err, boom)
	_, err = r.ReadPacket()
	require.ErrorIs(t, err, boom, "read errors are sticky")
}

func TestLimitsEffective(t *testing.T) {
	require.Equal(t, packetio.DefaultLimits(), packetio.Effective(wire.Limits{}))
	require.Equal(t, wire.Limits{MaxHeader: protocol.HardMaxHeader, MaxAttachment: protocol.HardMaxAttachment},
		packetio.Effective(wire.Limits{MaxHeader: math.MaxUint32, MaxAttachment: math.MaxUint32}))
	require.Equal(t, wire.Limits{MaxHeader: 10, MaxAttachment: 20}, packetio.Effective(wire.Limits{MaxHeader: 10, MaxAttachment: 20}))
	require.Equal(t, wire.Limits{MaxHeader: 10, MaxAttachment: protocol.DefaultMaxAttachment},
		packetio.MinLimits(wire.Limits{MaxHeader: 10}, wire.Limits{MaxHeader: 1 << 30, MaxAttachment: 1 << 30}))
	require.Equal(t, wire.Limits{MaxHeader: protocol.DefaultMaxHeader, MaxAttachment: 5},
		packetio.MinLimits(wire.Limits{}, wire.Limits{MaxAttachment: 5}))
}

// limitCase is one case of TestLimits: b read with limits l gives the
// protocol error want, or, when want is nil, the packet accept.
type limitCase struct {
	name   string
	b      []byte
	l      wire.Limits
	want   error
	accept wire.Packet
}

// limitCases are TestLimits' cases, also published as negative vectors.
func limitCases() []limitCase {
	ping := hdr("t", "ping", "nonce", 1)
	inline := hdr(frameKV("media", inlineMedia())...)
	return []limitCase{
		{"header length 0", prefix(0, 0), wire.Limits{}, protocol.ErrHeaderLength, nil},
		{"header over default", prefix(protocol.DefaultMaxHeader+1, 0), wire.Limits{}, protocol.ErrHeaderLength, nil},
		{"header over configured", pkt(ping, nil), wire.Limits{MaxHeader: uint32(len(ping)) - 1}, protocol.ErrHeaderLength, nil},
		{"header over hard ceiling", prefix(protocol.HardMaxHeader+1, 0), wire.Limits{MaxHeader: math.MaxUint32}, protocol.ErrHeaderLength, nil},
		{"header max uint32", prefix(math.MaxUint32, 0), wire.Limits{}, protocol.ErrHeaderLength, nil},
		{"attachment over default", prefix(uint32(len(inline)), protocol.DefaultMaxAttachment+1), wire.Limits{}, protocol.ErrAttachmentLength, nil},
		{"attachment over configured", pkt(inline, make([]byte, 11)), wire.Limits{MaxAttachment: 10}, protocol.ErrAttachmentLength, nil},
		{"attachment over hard ceiling", prefix(uint32(len(inline)), protocol.HardMaxAttachment+1), wire.Limits{MaxAttachment: math.MaxUint32}, protocol.ErrAttachmentLength, nil},
		{"attachment max uint32", prefix(10, math.MaxUint32), wire.Limits{}, protocol.ErrAttachmentLength, nil},
		{"header at configured limit", pkt(ping, nil), wire.Limits{MaxHeader: uint32(len(ping))}, nil, &wire.Ping{Nonce: 1}},
		{"attachment at configured limit", pkt(inline, make([]byte, 10)), wire.Limits{MaxAttachment: 10}, nil,
			mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "x"}),
				&frame.InlineMedia{Data: make([]byte, 10), MediaType: "audio/pcm"}))},
	}
}

// TestLimits is the negative test for every limit, with the accepted value
// just under each one.
func TestLimits(t *testing.T) {
	for _, c := range limitCases() {
		t.Run(c.name, func(t *testing.T) {
			// Followed by junk: a refusal must not depend on what comes next.
			r := packetio.NewReader(bytes.NewReader(append(c.b, 0xff, 0xff)), c.l)
			p, err := r.ReadPacket()
			if c.want == nil {
				require.NoError(t, err)
				require.Equal(t, c.accept, p)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, wire.ErrProtocol)
			_, err2 := r.ReadPacket()
			require.Equal(t, err, err2, "protocol errors are sticky")
		})
	}
}

func TestEncodeLimits(t *testing.T) {
	p := mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, 1, nil,
		&frame.InlineMedia{Data: make([]byte, 100), MediaType: "audio/pcm"}))
	b, att, err := wire.AppendPacket(nil, p, wire.Limits{MaxAttachment: 100})
	require.NoError(t, err)
	require.Len(t, att, 100)
	_, _, err = wire.AppendPacket(nil, p, wire.Limits{MaxAttachment: 99})
	require.ErrorIs(t, err, protocol.ErrAttachmentLength)
	_, _, err = wire.AppendPacket(nil, p, wire.Limits{MaxHeader: uint32(len(b) - protocol.PrefixLen - 1)})
	require.ErrorIs(t, err, protocol.ErrHeaderLength)
	// A refused packet leaves the buffer as it was.
	buf := []byte("keep")
	out, _, err := wire.AppendPacket(buf, p, wire.Limits{MaxAttachment: 1})
	require.Error(t, err)
	require.Equal(t, []byte("keep"), out)
}

// allocBytes returns the bytes allocated per call of fn, averaged over runs.
func allocBytes(runs int, fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// countingReader counts the bytes handed out of an endless source of 0xff
// after a fixed prefix.
type countingReader struct {
	prefix []byte
	n      int
}

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		if c.n < len(c.prefix) {
			p[i] = c.prefix[c.n]
		} else {
			p[i] = 0xff
		}
		c.n++
	}
	return len(p), nil
}

// overLimitLimits are the limits of overLimitCases: the hard ceilings.
var overLimitLimits = wire.Limits{MaxHeader: math.MaxUint32, MaxAttachment: math.MaxUint32}

// overLimitCases are TestOverLimitRefusedWithoutAllocating's cases, read
// with overLimitLimits; also published as negative vectors.
func overLimitCases() map[string]struct {
	b    []byte
	want error
} {
	return map[string]struct {
		b    []byte
		want error
	}{
		"header":     {prefix(math.MaxUint32, 0), protocol.ErrHeaderLength},
		"attachment": {prefix(16, protocol.HardMaxAttachment+1), protocol.ErrAttachmentLength},
	}
}

// TestOverLimitRefusedWithoutAllocating shows that a declared length over
// the limit is refused from the 8-byte prefix: nothing of the declared size
// is allocated or read.
func TestOverLimitRefusedWithoutAllocating(t *testing.T) {
	for name, c := range overLimitCases() {
		t.Run(name, func(t *testing.T) {
			l := overLimitLimits
			var err error
			allocs := testing.AllocsPerRun(100, func() { _, err = wire.Decode(c.b, l) })
			require.ErrorIs(t, err, c.want)
			require.LessOrEqual(t, allocs, 1.0, "only the error value may be allocated")
			require.Less(t, allocBytes(100, func() { _, _ = wire.Decode(c.b, l) }), uint64(1024))

			src := &countingReader{prefix: c.b}
			r := packetio.NewReader(src, l)
			perRead := allocBytes(1, func() { _, err = r.ReadPacket() })
			require.ErrorIs(t, err, c.want)
			require.LessOrEqual(t, src.n, packetio.ReadBufSize, "read no further than one buffer")
			require.Less(t, perRead, uint64(64<<10), "allocated no more than an error")
		})
	}
}

// protocolErrorCase is one case of TestProtocolErrors: reading b with the
// default limits gives the protocol error want.
type protocolErrorCase struct {
	name string
	b    []byte
	want error
}

// protocolErrorCases are TestProtocolErrors' cases, also published as
// negative vectors.
func protocolErrorCases() []protocolErrorCase {
	return []protocolErrorCase{
		{"header is an array", pkt(raw{0x91, 0x01}, nil), protocol.ErrMalformedHeader},
		{"header is a string", pkt(mpack.AppendString(nil, "frame"), nil), protocol.ErrMalformedHeader},
		{"header is nil", pkt(raw{0xc0}, nil), protocol.ErrMalformedHeader},
		{"map truncated", pkt(raw{0x82, 0xa1, 't', 0xa4, 'p', 'i', 'n', 'g'}, nil), protocol.ErrMalformedHeader},
		{"value truncated", pkt(raw{0x81, 0xa1, 't', 0xa4, 'p', 'i'}, nil), protocol.ErrMalformedHeader},
		{"trailing bytes", pkt(append(hdr("t", "ping", "nonce", 1), 0xc0), nil), protocol.ErrMalformedHeader},
		{"two maps", pkt(append(hdr("t", "ping"), hdr("t", "ping")...), nil), protocol.ErrMalformedHeader},
		{"integer key", pkt(hdr("t", "ping", 7, 1), nil), protocol.ErrMalformedHeader},
		{"nil key", pkt(hdr(nil, 1, "t", "ping"), nil), protocol.ErrMalformedHeader},
		{"binary key", pkt(hdr(raw{0xc4, 0x01, 't'}, "ping"), nil), protocol.ErrMalformedHeader},
		{"never-used byte", pkt(raw{0x81, 0xa1, 't', 0xc1}, nil), protocol.ErrMalformedHeader},
		{"huge declared map", pkt(raw{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 't'}, nil), protocol.ErrMalformedHeader},
		{"huge declared string", pkt(raw{0x81, 0xa1, 't', 0xdb, 0xff, 0xff, 0xff, 0xff}, nil), protocol.ErrMalformedHeader},
		{"no t", pkt(hdr("nonce", 1), nil), protocol.ErrUnknownType},
		{"empty map", pkt(hdr(), nil), protocol.ErrUnknownType},
		{"unknown t", pkt(hdr("t", "pingg"), nil), protocol.ErrUnknownType},
		{"t not a string", pkt(hdr("t", 1), nil), protocol.ErrUnknownType},
		{"t nil", pkt(hdr("t", nil), nil), protocol.ErrUnknownType},
		{"t upper case", pkt(hdr("t", "PING"), nil), protocol.ErrUnknownType},
		{"attachment on ping", pkt(hdr("t", "ping", "nonce", 1), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"attachment on end", pkt(hdr("t", "end", "call_id", "c1"), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"attachment on invoke", pkt(hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"attachment on payload frame", pkt(hdr(frameKV()...), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"attachment on blob frame", pkt(hdr(frameKV("media", map[string]any{"kind": "blob", "blob_id": "b", "size_bytes": 1,
			"sha256": strings.Repeat("a", 64), "media_type": "x/y"})...), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"attachment on invalid media", pkt(hdr(frameKV("media", 5)...), []byte{1}), protocol.ErrUnexpectedAttachment},
		{"ping nonce negative", pkt(hdr("t", "ping", "nonce", -1), nil), protocol.ErrBadField},
		{"ping nonce string", pkt(hdr("t", "ping", "nonce", "1"), nil), protocol.ErrBadField},
		{"pong streams negative", pkt(hdr("t", "pong", "nonce", 1, "streams", -1, "stuck", 0), nil), protocol.ErrBadField},
		{"pong stuck string", pkt(hdr("t", "pong", "nonce", 1, "streams", 0, "stuck", "0"), nil), protocol.ErrBadField},
		{"cancel without call id", pkt(hdr("t", "cancel"), nil), protocol.ErrBadField},
		{"cancel call id too long", pkt(hdr("t", "cancel", "call_id", strings.Repeat("é", 129)), nil), protocol.ErrBadField},
		{"cancel reason int", pkt(hdr("t", "cancel", "call_id", "c", "reason", 1), nil), protocol.ErrBadField},
		{"drain grace negative", pkt(hdr("t", "drain", "grace_ms", -5), nil), protocol.ErrBadField},
		{"bye reason map", pkt(hdr("t", "bye", "reason", map[string]any{}), nil), protocol.ErrBadField},
		{"startup limits not a map", pkt(hdr("t", "startup", "protocol", 1, "limits", 5), nil), protocol.ErrBadField},
		{"startup limit negative", pkt(hdr("t", "startup", "limits", map[string]any{"max_header": -1}), nil), protocol.ErrBadField},
		{"startup child id int", pkt(hdr("t", "startup", "child_id", 1), nil), protocol.ErrBadField},
		{"startup calls not a map", pkt(hdr("t", "startup", "calls", 1), nil), protocol.ErrBadField},
		{"startup calls without socket", pkt(hdr("t", "startup", "calls", map[string]any{"max_depth": 1, "max_in_flight": 1}), nil), protocol.ErrBadField},
		{"startup calls socket too long", pkt(hdr("t", "startup", "calls", map[string]any{"socket": strings.Repeat("s", 108), "max_depth": 1, "max_in_flight": 1}), nil), protocol.ErrBadField},
		{"startup calls max_depth 0", pkt(hdr("t", "startup", "calls", map[string]any{"socket": "/s", "max_depth": 0, "max_in_flight": 1}), nil), protocol.ErrBadField},
		{"startup calls max_in_flight missing", pkt(hdr("t", "startup", "calls", map[string]any{"socket": "/s", "max_depth": 1}), nil), protocol.ErrBadField},
		{"startup calls tool without id", pkt(hdr("t", "startup", "calls", map[string]any{"socket": "/s", "max_depth": 1, "max_in_flight": 1, "tools": []any{map[string]any{}}}), nil), protocol.ErrBadField},
		{"startup calls tools not an array", pkt(hdr("t", "startup", "calls", map[string]any{"socket": "/s", "max_depth": 1, "max_in_flight": 1, "tools": 3}), nil), protocol.ErrBadField},
		{"hello max_streams 0", pkt(hdr("t", "hello", "protocol", []int{1}, "max_streams", 0), nil), protocol.ErrBadField},
		{"hello max_streams missing", pkt(hdr("t", "hello", "protocol", []int{1}), nil), protocol.ErrBadField},
		{"hello protocol not array", pkt(hdr("t", "hello", "protocol", 1, "max_streams", 1), nil), protocol.ErrBadField},
		{"hello protocol too long", pkt(hdr("t", "hello", "protocol", make([]int, 65), "max_streams", 1), nil), protocol.ErrBadField},
		{"hello tool without id", pkt(hdr("t", "hello", "max_streams", 1, "tools", []any{map[string]any{}}), nil), protocol.ErrBadField},
		{"hello tool version too long", pkt(hdr("t", "hello", "max_streams", 1, "tools",
			[]any{map[string]any{"id": "x", "version": strings.Repeat("v", 129)}}), nil), protocol.ErrBadField},
		{"hello tool schema not a map", pkt(hdr("t", "hello", "max_streams", 1, "tools",
			[]any{map[string]any{"id": "x", "input_schema": []int{1}}}), nil), protocol.ErrBadField},
		{"hello tool schema with binary", pkt(hdr("t", "hello", "max_streams", 1, "tools",
			[]any{map[string]any{"id": "x", "input_schema": map[string]any{"b": []byte{1}}}}), nil), protocol.ErrBadField},
		{"hello tools not array", pkt(hdr("t", "hello", "max_streams", 1, "tools", map[string]any{}), nil), protocol.ErrBadField},
		{"tools over 4096", pkt(hdr("t", "tools", "tools", manyTools(4097)), nil), protocol.ErrBadField},
		{"tools tool without id", pkt(hdr("t", "tools", "tools", []any{map[string]any{"id": "x"}, map[string]any{}}), nil), protocol.ErrBadField},
		{"tools tool id too long", pkt(hdr("t", "tools", "tools", []any{map[string]any{"id": strings.Repeat("i", 129)}}), nil), protocol.ErrBadField},
		{"tools tool id invalid utf 8", pkt(hdr("t", "tools", "tools", []any{map[string]any{"id": "a\xffb"}}), nil), protocol.ErrBadField},
		{"tools not an array", pkt(hdr("t", "tools", "tools", map[string]any{}), nil), protocol.ErrBadField},
		{"startup tools_updates not bool", pkt(hdr("t", "startup", "protocol", 1, "tools_updates", 1), nil), protocol.ErrBadField},
	}
}

func TestProtocolErrors(t *testing.T) {
	for _, c := range protocolErrorCases() {
		t.Run(c.name, func(t *testing.T) {
			r := packetio.NewReader(bytes.NewReader(c.b), wire.Limits{})
			p, err := r.ReadPacket()
			require.Nil(t, p)
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, wire.ErrProtocol)
			var inv *protocol.InvalidError
			require.False(t, errors.As(err, &inv), "a protocol error is not an invalid frame")
			_, err2 := r.ReadPacket()
			require.Equal(t, err, err2, "protocol errors are sticky")

			_, err = wire.Decode(c.b, wire.Limits{})
			require.ErrorIs(t, err, c.want, "Decode agrees with Reader")
		})
	}
}

// invalidPacketCase is one case of TestInvalidPackets: the packet of
// header h and attachment att is an invalid packet of type typ whose
// field is at fault, with call id callID (empty when unreadable).
type invalidPacketCase struct {
	name   string
	h      []byte
	att    []byte
	typ    protocol.Type
	field  string
	callID string
}

// invalidPacketCases are TestInvalidPackets' cases, also published as
// negative vectors.
func invalidPacketCases() []invalidPacketCase {
	longID := strings.Repeat("é", 129)
	// {kind: inline, media_type: a/b, 1: 1}
	mediaIntKey := raw(append(append(mpack.AppendMapHeader(nil, 3), hdr("kind", "inline", "media_type", "a/b")[1:]...), 0x01, 0x01))
	return []invalidPacketCase{
		{"synthetic true", hdr(frameKV("synthetic", true)...), nil, protocol.TypeFrame, "synthetic", "c1"},
		{"synthetic not bool", hdr(frameKV("synthetic", 1)...), nil, protocol.TypeFrame, "synthetic", "c1"},
		{"unknown kind", hdr(frameKV("kind", "chonk")...), nil, protocol.TypeFrame, "kind", "c1"},
		{"kind not a string", hdr(frameKV("kind", 2)...), nil, protocol.TypeFrame, "kind", "c1"},
		{"kind missing", hdr("t", "frame", "call_id", "c1", "direction", "provider_to_caller", "sequence", 1), nil, protocol.TypeFrame, "kind", "c1"},
		{"unknown direction", hdr(frameKV("direction", "sideways")...), nil, protocol.TypeFrame, "direction", "c1"},
		{"direction not a string", hdr(frameKV("direction", 1)...), nil, protocol.TypeFrame, "direction", "c1"},
		{"direction missing", hdr("t", "frame", "call_id", "c1", "sequence", 1, "kind", "started"), nil, protocol.TypeFrame, "direction", "c1"},
		{"payload is an int", hdr(frameKV("payload", 5)...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload is an array", hdr(frameKV("payload", []int{1})...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload is a string", hdr(frameKV("payload", "{}")...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload has binary", hdr(frameKV("payload", map[string]any{"b": []byte{1}})...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload has int key", hdr(frameKV("payload", raw{0x81, 0x01, 0x01})...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload has NaN", hdr(frameKV("payload", map[string]any{"x": math.NaN()})...), nil, protocol.TypeFrame, "payload", "c1"},
		{"payload too deep", hdr(frameKV("payload", deep(mpack.MaxDepth+1))...), nil, protocol.TypeFrame, "payload", "c1"},
		{"sequence negative", hdr(frameKV("sequence", -1)...), nil, protocol.TypeFrame, "sequence", "c1"},
		{"sequence string", hdr(frameKV("sequence", "1")...), nil, protocol.TypeFrame, "sequence", "c1"},
		{"sequence 0 on chunk", hdr(frameKV("sequence", 0)...), nil, protocol.TypeFrame, "sequence", "c1"},
		{"started with payload", hdr(frameKV("sequence", 0, "kind", "started")...), nil, protocol.TypeFrame, "payload", "c1"},
		{"call id missing", hdr("t", "frame", "direction", "provider_to_caller", "sequence", 1, "kind", "completed"), nil, protocol.TypeFrame, "call_id", ""},
		{"call id too long", hdr(frameKV("call_id", longID)...), nil, protocol.TypeFrame, "call_id", ""},
		{"call id not a string", hdr(frameKV("call_id", 5)...), nil, protocol.TypeFrame, "call_id", ""},
		{"call id invalid UTF-8", hdr(frameKV("call_id", "c\xff")...), nil, protocol.TypeFrame, "call_id", ""},
		{"media not a map", hdr(frameKV("media", 5)...), nil, protocol.TypeFrame, "media", "c1"},
		{"media kind unknown", hdr(frameKV("media", map[string]any{"kind": "url"})...), nil, protocol.TypeFrame, "media.kind", "c1"},
		{"media with data key", hdr(frameKV("media", inlineMedia("data", []byte{1}))...), nil, protocol.TypeFrame, "media.data", "c1"},
		{"media int key", hdr(frameKV("media", mediaIntKey)...), nil, protocol.TypeFrame, "media", "c1"},
		{"error int key", hdr(frameKV("kind", "failed", "payload", nil, "error", raw{0x81, 0x01, 0x01})...), nil, protocol.TypeFrame, "error", "c1"},
		{"sample_rate 0", hdr(frameKV("media", inlineMedia("sample_rate", 0))...), nil, protocol.TypeFrame, "media.sample_rate", "c1"},
		{"sample_rate negative", hdr(frameKV("media", inlineMedia("sample_rate", -1))...), []byte{1, 2}, protocol.TypeFrame, "media.sample_rate", "c1"},
		{"channels 0", hdr(frameKV("media", inlineMedia("channels", 0))...), nil, protocol.TypeFrame, "media.channels", "c1"},
		{"timestamp negative", hdr(frameKV("media", inlineMedia("timestamp_seconds", -0.5))...), nil, protocol.TypeFrame, "media.timestamp_seconds", "c1"},
		{"duration infinite", hdr(frameKV("media", inlineMedia("duration_seconds", math.Inf(1)))...), nil, protocol.TypeFrame, "media.duration_seconds", "c1"},
		{"duration string", hdr(frameKV("media", inlineMedia("duration_seconds", "1s"))...), nil, protocol.TypeFrame, "media.duration_seconds", "c1"},
		{"media_type missing", hdr(frameKV("media", map[string]any{"kind": "inline"})...), []byte{1}, protocol.TypeFrame, "media.media_type", "c1"},
		{"blob sha256 upper", hdr(frameKV("media", map[string]any{"kind": "blob", "blob_id": "b", "size_bytes": 1,
			"sha256": strings.Repeat("A", 64), "media_type": "x/y"})...), nil, protocol.TypeFrame, "media.sha256", "c1"},
		{"blob size missing", hdr(frameKV("media", map[string]any{"kind": "blob", "blob_id": "b",
			"sha256": strings.Repeat("a", 64), "media_type": "x/y"})...), nil, protocol.TypeFrame, "media.size_bytes", "c1"},
		{"error code unknown", hdr(frameKV("kind", "failed", "payload", nil, "error", map[string]any{"code": "oops", "message": ""})...), nil, protocol.TypeFrame, "error.code", "c1"},
		{"error not a map", hdr(frameKV("kind", "failed", "payload", nil, "error", "boom")...), nil, protocol.TypeFrame, "error", "c1"},
		{"error message too long", hdr(frameKV("kind", "failed", "payload", nil, "error", map[string]any{"code": "timeout",
			"message": strings.Repeat("é", 2049)})...), nil, protocol.TypeFrame, "error.message", "c1"},
		{"failed with cancelled", hdr(frameKV("kind", "failed", "payload", nil, "error", map[string]any{"code": "cancelled"})...), nil, protocol.TypeFrame, "error.code", "c1"},
		{"invoke without arguments", hdr("t", "invoke", "call_id", "c1", "tool_id", "x"), nil, protocol.TypeInvoke, "arguments", "c1"},
		{"invoke arguments nil", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", nil), nil, protocol.TypeInvoke, "arguments", "c1"},
		{"invoke arguments array", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", []int{}), nil, protocol.TypeInvoke, "arguments", "c1"},
		{"invoke without tool", hdr("t", "invoke", "call_id", "c1", "arguments", map[string]any{}), nil, protocol.TypeInvoke, "tool_id", "c1"},
		{"invoke timeout negative", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "timeout_ms", -1), nil, protocol.TypeInvoke, "timeout_ms", "c1"},
		{"invoke trace not strings", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "trace", map[string]any{"a": 1}), nil, protocol.TypeInvoke, "trace", "c1"},
		{"invoke parent too long", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "parent", longID), nil, protocol.TypeInvoke, "parent", "c1"},
		{"invoke call id missing", hdr("t", "invoke", "tool_id", "x", "arguments", map[string]any{}), nil, protocol.TypeInvoke, "call_id", ""},
		{"invoke depth negative", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "depth", -1), nil, protocol.TypeInvoke, "depth", "c1"},
		{"invoke depth string", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "depth", "1"), nil, protocol.TypeInvoke, "depth", "c1"},
		{"invoke detached int", hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{}, "detached", 1), nil, protocol.TypeInvoke, "detached", "c1"},
		{"end without call id", hdr("t", "end"), nil, protocol.TypeEnd, "call_id", ""},
		{"end call id int", hdr("t", "end", "call_id", 1), nil, protocol.TypeEnd, "call_id", ""},
	}
}

func TestInvalidPackets(t *testing.T) {
	for _, c := range invalidPacketCases() {
		t.Run(c.name, func(t *testing.T) { requireInvalid(t, c) })
	}
}

// requireInvalid checks that c's packet, read a byte at a time, is the
// invalid packet c says, and that the packet after it still reads.
func requireInvalid(t *testing.T, c invalidPacketCase) {
	t.Helper()
	ping := pkt(hdr("t", "ping", "nonce", 77), nil)
	b := append(pkt(c.h, c.att), ping...)
	r := packetio.NewReader(iotest.OneByteReader(bytes.NewReader(b)), wire.Limits{})
	p, err := r.ReadPacket()
	require.Nil(t, p)
	var inv *protocol.InvalidError
	require.ErrorAs(t, err, &inv)
	require.ErrorIs(t, err, frame.ErrInvalid)
	require.NotErrorIs(t, err, wire.ErrProtocol)
	require.Equal(t, c.typ, inv.Type)
	require.Equal(t, c.callID, inv.CallID)
	var fe *frame.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, c.field, fe.Field)
	require.ErrorContains(t, err, c.field)
	require.NotContains(t, err.Error(), "é", "the message never echoes the value")

	// The packet was consumed whole: the reader is still in step.
	p, err = r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, uint64(77), p.(*wire.Ping).Nonce)
}

// deep returns a payload map nesting n maps deep (the outer one included).
func deep(n int) raw {
	var b []byte
	for range n - 1 {
		b = mpack.AppendString(mpack.AppendMapHeader(b, 1), "a")
	}
	return mpack.AppendMapHeader(b, 0)
}

func TestPayloadDepthLimit(t *testing.T) {
	_, err := wire.Decode(pkt(hdr(frameKV("payload", deep(mpack.MaxDepth))...), nil), wire.Limits{})
	require.NoError(t, err, "MaxDepth levels are allowed")
	_, err = wire.Decode(pkt(hdr(frameKV("payload", deep(mpack.MaxDepth+1))...), nil), wire.Limits{})
	require.ErrorIs(t, err, frame.ErrInvalid)
}

// acceptCase is a packet a reader takes: b decodes to want.
type acceptCase struct {
	name string
	b    []byte
	want wire.Packet
}

// chunkX is the provider chunk frameKV describes, with media m (nil for
// none) and sequence seq.
func chunkX(seq uint64, m frame.Media) *wire.Frame {
	return mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, seq, frame.MustPayload(map[string]any{"text": "x"}), m))
}

// failedKV is a provider failed frame whose error map holds code twice,
// first code1, then code2.
func failedKV(code1, code2 string) []byte {
	kv := []any{"t", "frame", "call_id", "c1", "direction", "provider_to_caller", "sequence", 1, "kind", "failed",
		"error", raw(hdr("code", code1, "message", "m", "code", code2))}
	return hdr(kv...)
}

// errMap is an error map of code with message "m".
func errMap(code string) raw { return raw(hdr("code", code, "message", "m")) }

// failedHdr is a provider failed frame with two error maps, e1 then e2.
func failedHdr(e1, e2 raw) []byte {
	return hdr("t", "frame", "call_id", "c1", "direction", "provider_to_caller", "sequence", 1,
		"kind", "failed", "error", e1, "error", e2)
}

// keyRuleAccepts are TestHeaderKeyRules' packets a reader must take: keys
// in any order, unknown keys, duplicate keys (the last wins), optional
// keys given as nil, numbers in any encoding. Also published as negative
// vectors.
func keyRuleAccepts() []acceptCase {
	inline := &frame.InlineMedia{Data: []byte{}, MediaType: "audio/pcm"}
	return []acceptCase{
		{"t at any position", pkt(hdr("call_id", "c1", "direction", "caller_to_provider", "sequence", 0, "kind", "started", "t", "frame"), nil),
			mustFrame(frame.NewStarted("c1", frame.CallerToProvider))},
		{"unknown keys ignored", pkt(hdr(frameKV("x-extra", map[string]any{"deep": []any{1, "a"}}, "future", raw{0xc4, 0x01, 0x00})...), nil),
			chunkX(1, nil)},
		{"unknown key on ping", pkt(hdr("t", "ping", "nonce", 3, "zzz", 1), nil), &wire.Ping{Nonce: 3}},
		{"duplicate nonce", pkt(hdr("t", "ping", "nonce", 1, "nonce", 2), nil), &wire.Ping{Nonce: 2}},
		{"duplicate t", pkt(hdr("t", "pong", "t", "ping", "nonce", 5), nil), &wire.Ping{Nonce: 5}},
		{"duplicate payload", pkt(hdr(frameKV("payload", map[string]any{"text": "second"})...), nil),
			mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "second"}), nil))},
		// An unknown name is overridden by a later known one, for every
		// enumerated string (the other way round is in keyRuleRefusals).
		{"duplicate kind unknown then known", pkt(hdr(frameKV("kind", "bogus", "kind", "chunk")...), nil), chunkX(1, nil)},
		{"duplicate direction unknown then known", pkt(hdr(frameKV("direction", "sideways", "direction", "provider_to_caller")...), nil),
			chunkX(1, nil)},
		{"duplicate error code unknown then known", pkt(failedKV("oops", "provider_error"), nil),
			mustFrame(frame.NewFailed("c1", frame.ProviderToCaller, 1, frame.CodeProviderError, "m"))},
		// So do whole media and error maps, nil included.
		{"duplicate media then nil", pkt(hdr(frameKV("media", inlineMedia("kind", "bogus"), "media", nil)...), nil), chunkX(1, nil)},
		{"duplicate media bad then good", pkt(hdr(frameKV("media", map[string]any{"kind": "blob"}, "media", inlineMedia())...), nil),
			chunkX(1, inline)},
		{"duplicate error bad then good", pkt(failedHdr(errMap("oops"), errMap("timeout")), nil),
			mustFrame(frame.NewFailed("c1", frame.ProviderToCaller, 1, frame.CodeTimeout, "m"))},
		{"optional frame keys nil", pkt(hdr(frameKV("synthetic", nil, "media", nil, "error", nil)...), nil), chunkX(1, nil)},
		{"optional invoke keys nil", pkt(hdr("t", "invoke", "call_id", "c1", "tool_id", "x", "arguments", map[string]any{},
			"timeout_ms", nil, "trace", nil, "tree", nil, "parent", nil, "depth", nil, "detached", nil), nil),
			&wire.Invoke{CallID: "c1", ToolID: "x", Arguments: frame.Payload{0x80}}},
		{"tools without tools", pkt(hdr("t", "tools"), nil), &wire.Tools{}},
		{"optional startup tools_updates nil", pkt(hdr("t", "startup", "protocol", 1, "tools_updates", true, "tools_updates", nil), nil),
			&wire.Startup{Protocol: 1, CancelGraceMS: protocol.DefaultCancelGraceMS}},
		{"optional startup calls nil", pkt(hdr("t", "startup", "protocol", 1, "calls", nil), nil),
			&wire.Startup{Protocol: 1, CancelGraceMS: protocol.DefaultCancelGraceMS}},
		{"startup calls unknown key", pkt(hdr("t", "startup", "protocol", 1, "calls",
			map[string]any{"socket": "/s", "max_depth": 2, "max_in_flight": 3, "future": []any{1}}), nil),
			&wire.Startup{Protocol: 1, CancelGraceMS: protocol.DefaultCancelGraceMS, Calls: &wire.Calls{Socket: "/s", MaxDepth: 2, MaxInFlight: 3}}},
		{"optional media keys nil", pkt(hdr(frameKV("media", inlineMedia("codec", nil, "sample_rate", nil, "timestamp_seconds", nil))...), nil),
			chunkX(1, inline)},
		{"synthetic false", pkt(hdr(frameKV("synthetic", false)...), nil), chunkX(1, nil)},
		// sequence as uint64, timestamp as float32 and as an integer.
		{"numbers in any encoding", pkt(hdr(frameKV("sequence", raw{0xcf, 0, 0, 0, 0, 0, 0, 0, 9},
			"media", inlineMedia("timestamp_seconds", float32(0.5), "duration_seconds", 2, "sample_rate", int16(256)))...), nil),
			chunkX(9, &frame.InlineMedia{Data: []byte{}, MediaType: "audio/pcm", SampleRate: 256,
				TimestampSeconds: f64(0.5), DurationSeconds: f64(2)})},
		{"inline frame without attachment", pkt(hdr(frameKV("media", inlineMedia())...), nil), chunkX(1, inline)},
		{"hello schema numbers", pkt(hdr("t", "hello", "protocol", []int{1}, "max_streams", 1, "tools",
			[]any{map[string]any{"id": "x", "result_schema": map[string]any{"minimum": -3, "maximum": 1.5}}}), nil),
			&wire.Hello{Protocol: []int64{1}, MaxStreams: 1,
				Tools: []wire.Tool{{ID: "x", ResultSchema: map[string]any{"minimum": int64(-3), "maximum": 1.5}}}}},
		{"payload at max depth", pkt(hdr(frameKV("payload", deep(mpack.MaxDepth))...), nil),
			mustFrame(frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.Payload(deep(mpack.MaxDepth)), nil))},
	}
}

// keyRuleRefusals are TestHeaderKeyRules' duplicate keys a reader must
// refuse: a known value overridden by an unknown one, or a good map by a
// bad one. Also published as negative vectors.
func keyRuleRefusals() []invalidPacketCase {
	return []invalidPacketCase{
		{"duplicate media good then bad", hdr(frameKV("media", inlineMedia(), "media", inlineMedia("kind", "bogus"))...), nil,
			protocol.TypeFrame, "media.kind", "c1"},
		{"duplicate error good then bad", failedHdr(errMap("timeout"), errMap("oops")), nil, protocol.TypeFrame, "error.code", "c1"},
		{"duplicate kind known then unknown", hdr(frameKV("kind", "chunk", "kind", "bogus")...), nil, protocol.TypeFrame, "kind", "c1"},
		{"duplicate direction known then unknown", hdr(frameKV("direction", "provider_to_caller", "direction", "sideways")...), nil,
			protocol.TypeFrame, "direction", "c1"},
		{"duplicate error code known then unknown", failedKV("provider_error", "oops"), nil, protocol.TypeFrame, "error.code", "c1"},
	}
}

func TestHeaderKeyRules(t *testing.T) {
	for _, c := range keyRuleAccepts() {
		t.Run(c.name, func(t *testing.T) {
			p, err := wire.Decode(c.b, wire.Limits{})
			require.NoError(t, err)
			require.Equal(t, c.want, p)
			p, err = packetio.NewReader(iotest.OneByteReader(bytes.NewReader(c.b)), wire.Limits{}).ReadPacket()
			require.NoError(t, err)
			require.Equal(t, c.want, p)
		})
	}
	for _, c := range keyRuleRefusals() {
		t.Run(c.name, func(t *testing.T) { requireInvalid(t, c) })
	}
}

func TestDecodeWholePacket(t *testing.T) {
	b := pkt(hdr("t", "ping", "nonce", 1), nil)
	_, err := wire.Decode(b[:7], wire.Limits{})
	require.ErrorIs(t, err, protocol.ErrMalformedHeader)
	_, err = wire.Decode(append(b, 0), wire.Limits{})
	require.ErrorIs(t, err, protocol.ErrMalformedHeader)
	_, err = wire.Decode(b[:len(b)-1], wire.Limits{})
	require.ErrorIs(t, err, protocol.ErrMalformedHeader)
}

func TestEncodeRefusesInvalid(t *testing.T) {
	ok, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"a": 1}), nil)
	require.NoError(t, err)
	synth := ok
	synth.Synthetic = true
	noSeq := ok
	noSeq.Sequence = 0
	cases := map[string]struct {
		p     wire.Packet
		field string
	}{
		"synthetic":        {&wire.Frame{synth}, "synthetic"},
		"shape":            {&wire.Frame{noSeq}, "sequence"},
		"end without id":   {&wire.End{}, "call_id"},
		"invoke no tool":   {&wire.Invoke{CallID: "c1"}, "tool_id"},
		"invoke bad args":  {&wire.Invoke{CallID: "c1", ToolID: "t", Arguments: frame.Payload{0x90}}, "arguments"},
		"invoke bad tree":  {&wire.Invoke{CallID: "c1", ToolID: "t", Tree: strings.Repeat("x", 129)}, "tree"},
		"cancel no id":     {&wire.Cancel{}, "call_id"},
		"invoke negative":  {&wire.Invoke{CallID: "c1", ToolID: "t", TimeoutMS: -1}, "timeout_ms"},
		"hello bad tool":   {&wire.Hello{MaxStreams: 1, Tools: []wire.Tool{{}}}, "tools.id"},
		"tools bad tool":   {&wire.Tools{Tools: []wire.Tool{{ID: "ok"}, {}}}, "tools.id"},
		"tools over 4096":  {&wire.Tools{Tools: manyWireTools(4097)}, "tools"},
		"invalid frame id": {&wire.Frame{frame.Frame{Direction: frame.CallerToProvider, Kind: frame.KindStarted}}, "call_id"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := packetio.Encode(c.p, wire.Limits{})
			var fe *frame.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.field, fe.Field)
			require.ErrorIs(t, err, frame.ErrInvalid)
		})
	}
	_, err = packetio.Encode(nil, wire.Limits{})
	require.Error(t, err)
}

func TestInvokeNilArgumentsSentAsEmptyObject(t *testing.T) {
	b, err := packetio.Encode(&wire.Invoke{CallID: "c1", ToolID: "t"}, wire.Limits{})
	require.NoError(t, err)
	p, err := wire.Decode(b, wire.Limits{})
	require.NoError(t, err)
	require.Equal(t, frame.Payload{0x80}, p.(*wire.Invoke).Arguments)
}

func TestTypeString(t *testing.T) {
	for ty := protocol.TypeHello; ty <= protocol.TypeTools; ty++ {
		require.Equal(t, ty, protocol.ParseType([]byte(ty.String())))
	}
	require.Equal(t, "Type(0)", protocol.Type(0).String())
	require.Equal(t, "Type(99)", protocol.Type(99).String())
}

func inlinePacket(t *testing.T, data []byte) []byte {
	t.Helper()
	f, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: data, MediaType: "a/b"})
	require.NoError(t, err)
	b, err := packetio.Encode(&wire.Frame{f}, wire.Limits{})
	require.NoError(t, err)
	return b
}

func TestReaderRecycleConcurrent(t *testing.T) {
	const n = 200
	var stream []byte
	for i := range n {
		stream = append(stream, inlinePacket(t, bytes.Repeat([]byte{byte(i)}, 1000+i))...)
	}
	r := packetio.NewReader(bytes.NewReader(stream), wire.Limits{})
	back := make(chan []byte, 8) // bounded: the consumer hands data back through it
	consumed := make(chan struct{})
	go func() { // stopped by closing back
		defer close(consumed)
		for d := range back {
			r.Recycle(d)
		}
	}()
	for i := range n {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		d := p.(*wire.Frame).Media.(*frame.InlineMedia).Data
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 1000+i), d)
		back <- d
	}
	close(back)
	<-consumed
}

// readCounter counts the Read calls that reach src.
type readCounter struct {
	src   io.Reader
	reads int
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.reads++
	return c.src.Read(p)
}

// PacketBuffered is true exactly when the next ReadPacket needs no read of
// the connection, wherever the stream is split.
func TestReaderPacketBuffered(t *testing.T) {
	all, want := goldenStream(t)
	for i := 0; i <= len(all); i++ {
		src := &readCounter{src: io.MultiReader(bytes.NewReader(all[:i]), bytes.NewReader(all[i:]))}
		r := packetio.NewReader(src, wire.Limits{})
		require.False(t, r.PacketBuffered(), "split at %d: nothing read yet", i)
		sawTrue := false
		for n := 0; n < len(want); n++ {
			buffered := r.PacketBuffered()
			before := src.reads
			_, err := r.ReadPacket()
			require.NoError(t, err, "split at %d, packet %d", i, n)
			if buffered {
				sawTrue = true
				require.Equal(t, before, src.reads, "split at %d, packet %d: PacketBuffered said whole, yet ReadPacket read", i, n)
			}
		}
		require.False(t, r.PacketBuffered(), "split at %d: the stream is read whole", i)
		if i == 0 || i == len(all) {
			require.True(t, sawTrue, "one read holds every packet: all but the first are buffered")
		}
	}
	r := packetio.NewReader(bytes.NewReader(prefix(0, 0)), wire.Limits{})
	_, err := r.ReadPacket()
	require.ErrorIs(t, err, wire.ErrProtocol)
	require.True(t, r.PacketBuffered(), "a sticky error returns without reading")
}

// With ReuseFrames every frame comes in the same *Frame, and a copy of each
// is what a plain Reader returns; other packets are new as ever.
func TestReaderReuseFrames(t *testing.T) {
	all, want := goldenStream(t)
	r := packetio.NewReader(bytes.NewReader(all), wire.Limits{})
	r.ReuseFrames()
	var reused *wire.Frame
	frames := 0
	for i := 0; ; i++ {
		p, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			require.Equal(t, len(want), i)
			break
		}
		require.NoError(t, err)
		f, ok := p.(*wire.Frame)
		if !ok {
			require.Equal(t, want[i], p)
			continue
		}
		frames++
		if reused == nil {
			reused = f
		}
		require.Same(t, reused, f, "packet %d", i)
		require.Equal(t, want[i].(*wire.Frame).Frame, f.Frame, "packet %d", i)
	}
	require.Greater(t, frames, 1)
}

// A read deadline that passes inside a packet, in its prefix, its header
// or its attachment, leaves the Reader in step: once the deadline is moved
// the same packet comes whole, and the next one after it.
func TestReaderDeadlineKeepsStep(t *testing.T) {
	data := bytes.Repeat([]byte("media"), 20000) // 100,000 bytes, more than the read buffer
	media, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, nil, &frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
	require.NoError(t, err)
	small, err := frame.NewChunk("c1", frame.ProviderToCaller, 2, frame.MustPayload(map[string]any{"text": "after"}), nil)
	require.NoError(t, err)
	var stream []byte
	for _, f := range []frame.Frame{media, small} {
		var att []byte
		stream, att, err = wire.AppendPacket(stream, &wire.Frame{Frame: f}, packetio.DefaultLimits())
		require.NoError(t, err)
		stream = append(stream, att...)
	}
	hdrLen := int(binary.BigEndian.Uint32(stream))
	for _, cut := range []int{3, protocol.PrefixLen + 2, protocol.PrefixLen + hdrLen + 10, protocol.PrefixLen + hdrLen + 60000} {
		a, b := socketPair(t)
		r := packetio.NewReader(b, packetio.DefaultLimits())
		_, err := a.Write(stream[:cut])
		require.NoError(t, err)
		require.NoError(t, b.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		_, err = r.ReadPacket()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "cut at %d", cut)
		require.NoError(t, b.SetReadDeadline(time.Time{}))
		go a.Write(stream[cut:]) // the socket buffer may not take it all at once
		p, err := r.ReadPacket()
		require.NoError(t, err, "cut at %d", cut)
		got := p.(*wire.Frame).Frame
		require.Equal(t, uint64(1), got.Sequence)
		require.Equal(t, data, got.Media.(*frame.InlineMedia).Data, "cut at %d", cut)
		p, err = r.ReadPacket()
		require.NoError(t, err, "cut at %d", cut)
		require.Equal(t, uint64(2), p.(*wire.Frame).Sequence)
		a.Close()
		_, err = r.ReadPacket()
		require.ErrorIs(t, err, io.EOF)
	}
}

// chunkKV is a provider chunk's header fields with payload p and no
// other (frameKV's payload would take room before p's).
func chunkKV(seq int, p frame.Payload) []any {
	return []any{"t", "frame", "call_id", "c1", "direction", "provider_to_caller", "sequence", seq, "kind", "chunk", "payload", raw(p)}
}

// Small payloads are copied into shared blocks, yet each is its own: a
// payload has no room to grow into the next, and writing one changes no
// other, whichever path decoded it (the fast one, or the general one for a
// header whose "t" is not first), and whatever the size.
func TestPayloadsShareNothingWritable(t *testing.T) {
	var stream []byte
	var want []frame.Payload
	sizes := []int{0, 1, 5, 60, 120, 126, 300, 2, 2000, 40}
	for i, n := range sizes {
		p := frame.MustPayload(map[string]any{"s": strings.Repeat("a", n)})
		want = append(want, p)
		kv := chunkKV(i+1, p)
		if i%3 == 1 { // "t" last: the general path
			kv = append(kv[2:], "t", "frame")
		}
		stream = append(stream, pkt(hdr(kv...), nil)...)
	}
	// Many more small frames than one block holds.
	for i := range 200 {
		p := frame.MustPayload(map[string]any{"i": i})
		want = append(want, p)
		stream = append(stream, pkt(hdr(chunkKV(len(sizes)+i+1, p)...), nil)...)
	}
	ps := readAll(t, packetio.NewReader(bytes.NewReader(stream), wire.Limits{}))
	require.Len(t, ps, len(want))
	var got []frame.Payload
	for _, p := range ps {
		got = append(got, p.(*wire.Frame).Payload)
	}
	for i := range got {
		require.Equal(t, want[i], got[i], "payload %d", i)
		_ = append(got[i], 0xff) // must not land in the next payload
		for j := range got[i] {
			got[i][j] ^= 0xff
		}
	}
	for i := range got {
		for j := range got[i] {
			got[i][j] ^= 0xff
		}
		require.Equal(t, want[i], got[i], "payload %d after writing every payload", i)
	}
}

// A frame whose call id is the one ExpectCallID gave shares its string.
func TestExpectCallIDSharesTheString(t *testing.T) {
	id := strings.Clone("c1")
	r := packetio.NewReader(bytes.NewReader(pkt(hdr(chunkKV(1, frame.MustPayload(map[string]any{"a": 1}))...), nil)), wire.Limits{})
	r.ExpectCallID(id)
	p, err := r.ReadPacket()
	require.NoError(t, err)
	got := p.(*wire.Frame).CallID
	require.Equal(t, id, got)
	require.True(t, unsafe.StringData(got) == unsafe.StringData(id), "the call id was copied")
}

// Frames that follow each other with the same call id share one string:
// the Reader allocates a call id once per call, not once per frame.
func TestRepeatedCallIDSharesTheString(t *testing.T) {
	one := pkt(hdr(chunkKV(1, frame.MustPayload(map[string]any{"a": 1}))...), nil)
	r := packetio.NewReader(bytes.NewReader(append(bytes.Clone(one), one...)), wire.Limits{})
	p1, err := r.ReadPacket()
	require.NoError(t, err)
	first := p1.(*wire.Frame).CallID
	p2, err := r.ReadPacket()
	require.NoError(t, err)
	second := p2.(*wire.Frame).CallID
	require.Equal(t, "c1", second)
	require.True(t, unsafe.StringData(first) == unsafe.StringData(second), "the call id was copied")
}

// TestReaderSmallAttachmentsReadInBulk: packets whose attachments fit the
// Reader's buffer are read whole into it, so a stream of small media
// chunks costs one read of the connection per buffer, not an extra small
// read for each attachment that a buffer's end cuts in two.
func TestReaderSmallAttachmentsReadInBulk(t *testing.T) {
	var stream []byte
	var want []*frame.InlineMedia
	for i := range 2000 {
		data := bytes.Repeat([]byte{byte(i)}, 40+i%90)
		m := &frame.InlineMedia{Data: data, MediaType: "application/octet-stream"}
		f, err := frame.NewChunk("c1", frame.ProviderToCaller, uint64(i+1), nil, m)
		require.NoError(t, err)
		hdr, att, err := wire.AppendPacket(stream, &wire.Frame{Frame: f}, wire.Limits{})
		require.NoError(t, err)
		stream = append(hdr, att...)
		want = append(want, m)
	}
	src := &readCounter{src: bytes.NewReader(stream)}
	r := packetio.NewReader(src, wire.Limits{})
	for i, m := range want {
		p, err := r.ReadPacket()
		require.NoError(t, err)
		require.Equal(t, m, p.(*wire.Frame).Media, "frame %d", i+1)
	}
	_, err := r.ReadPacket()
	require.ErrorIs(t, err, io.EOF)
	require.LessOrEqual(t, src.reads, len(stream)/packetio.ReadBufSize+3, "%d bytes in %d reads", len(stream), src.reads)
}

// TestReleaseBuffer gives the read buffer back between packets and goes on
// reading: the packets read before stay whole, a Reader with bytes
// buffered keeps its buffer, and the next read takes one again.
func TestReleaseBufferBetweenPackets(t *testing.T) {
	var stream []byte
	for i := range 3 {
		b, err := packetio.Encode(&wire.Frame{Frame: frame.Frame{CallID: "c1", Direction: frame.ProviderToCaller, Sequence: uint64(i + 1),
			Kind: frame.KindChunk, Payload: frame.MustPayload(map[string]any{"i": i})}}, wire.Limits{})
		require.NoError(t, err)
		stream = append(stream, b...)
	}
	r := packetio.NewReader(bytes.NewReader(stream), wire.Limits{})
	require.False(t, r.ReleaseBuffer(), "a Reader that never read has no buffer to give back")
	p1, err := r.ReadPacket()
	require.NoError(t, err)
	require.False(t, r.ReleaseBuffer(), "two packets are still buffered")
	_, err = r.ReadPacket()
	require.NoError(t, err)
	p3, err := r.ReadPacket()
	require.NoError(t, err)
	require.True(t, r.ReleaseBuffer(), "nothing is buffered after the last packet")
	require.Equal(t, uint64(1), p1.(*wire.Frame).Sequence)
	require.Equal(t, uint64(3), p3.(*wire.Frame).Sequence)
	m, err := p1.(*wire.Frame).Payload.Map()
	require.NoError(t, err)
	require.EqualValues(t, 0, m["i"])
	_, err = r.ReadPacket()
	require.ErrorIs(t, err, io.EOF, "a released Reader reads again")
}

// manyTools returns n tool descriptors ("t0", "t1", ...) as a header
// carries them.
func manyTools(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"id": "t" + strconv.Itoa(i)}
	}
	return out
}

// manyWireTools returns the tools manyTools describes.
func manyWireTools(n int) []wire.Tool {
	out := make([]wire.Tool, n)
	for i := range out {
		out[i] = wire.Tool{ID: "t" + strconv.Itoa(i)}
	}
	return out
}

// TestToolsAtLimit: a tools packet of exactly 4,096 tools encodes and
// decodes to itself (one more is refused: TestProtocolErrors and
// TestEncodeRefusesInvalid).
func TestToolsAtLimit(t *testing.T) {
	p := &wire.Tools{Tools: manyWireTools(4096)}
	b, err := packetio.Encode(p, wire.Limits{})
	require.NoError(t, err)
	got, err := wire.Decode(b, wire.Limits{})
	require.NoError(t, err)
	require.Equal(t, p, got)
}
