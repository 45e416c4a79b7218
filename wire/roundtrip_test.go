package wire_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"net"
	"testing"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/wire"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRoundTripOverSocket(t *testing.T) {
	ua, ub := socketPair(t)
	defer ua.Close()
	defer ub.Close()
	r := packetio.NewReader(ub, wire.Limits{})
	data := bytes.Repeat([]byte{7}, 1<<20)
	chunk, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}),
		&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for _, p := range []wire.Packet{&wire.Ping{Nonce: 9}, &wire.Frame{chunk}, &wire.End{CallID: "c1"}} {
			if err := writePacket(ua, p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	p, err := r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, uint64(9), p.(*wire.Ping).Nonce)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	f := p.(*wire.Frame)
	require.Equal(t, data, f.Media.(*frame.InlineMedia).Data)
	txt, ok := f.Payload.Text()
	require.True(t, ok)
	require.Equal(t, "hi", txt)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, "c1", p.(*wire.End).CallID)
	require.NoError(t, <-done)
}

func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	require.NoError(t, err)
	s, err := l.AcceptUnix()
	require.NoError(t, err)
	return c, s
}

// TestAppendToolCanonical: a descriptor encodes to the same bytes however
// its maps were built, nested ones included, and those bytes are what
// hello carries.
func TestAppendToolCanonical(t *testing.T) {
	mk := func(order int) wire.Tool {
		props := map[string]any{}
		schema := map[string]any{}
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		for i := range keys {
			k := keys[(i+order)%len(keys)]
			props[k] = map[string]any{"type": "string", "title": k}
			schema[k+"x"] = len(k)
		}
		schema["properties"] = props
		return wire.Tool{ID: "t", Description: "d", ArgumentsSchema: schema, ResultSchema: map[string]any{"type": "object"}}
	}
	first, err := wire.AppendTool(nil, ptr(mk(0)))
	require.NoError(t, err)
	for order := 1; order < 8; order++ {
		enc, err := wire.AppendTool(nil, ptr(mk(order)))
		require.NoError(t, err)
		require.Equal(t, first, enc, "order %d", order)
	}
	tool := mk(3)
	hello, err := packetio.Encode(&wire.Hello{Protocol: []int64{1}, Tools: []wire.Tool{tool}}, wire.Limits{})
	require.NoError(t, err)
	require.True(t, bytes.Contains(hello, first), "hello carries the canonical encoding")

	_, err = wire.AppendTool(nil, &wire.Tool{ID: ""})
	var fe *frame.FieldError
	require.ErrorAs(t, err, &fe)
}

func ptr[T any](v T) *T { return &v }

// writePacket writes p to w as a connection does: its prefix and header,
// then its attachment, with one vectored write where w is a socket.
func writePacket(w io.Writer, p wire.Packet) error {
	hdr, att, err := wire.AppendPacket(nil, p, wire.Limits{})
	if err != nil {
		return err
	}
	bufs := net.Buffers{hdr, att}
	_, err = bufs.WriteTo(w)
	return err
}

// TestStartupCancelGraceDefault: a startup without cancel_grace_ms decodes
// with the protocol's default of 1000 ms; an explicit 0 stays 0.
func TestStartupCancelGraceDefault(t *testing.T) {
	full, err := packetio.Encode(&wire.Startup{Protocol: 1, ChildID: "c", CancelGraceMS: 0, IngressQueue: protocol.IngressQueue}, wire.Limits{})
	require.NoError(t, err)
	p, err := wire.Decode(full, wire.Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(0), p.(*wire.Startup).CancelGraceMS)

	hdr := mpack.AppendMapHeader(nil, 3)
	hdr = mpack.AppendString(mpack.AppendString(hdr, "t"), "startup")
	hdr = mpack.AppendInt(mpack.AppendString(hdr, "protocol"), 1)
	hdr = mpack.AppendString(mpack.AppendString(hdr, "child_id"), "c")
	b := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))
	b = binary.BigEndian.AppendUint32(b, 0)
	p, err = wire.Decode(append(b, hdr...), wire.Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(protocol.DefaultCancelGraceMS), p.(*wire.Startup).CancelGraceMS)
}

// TestSchemaTwoTo63 decodes a schema's float 2^63 as that float and -2^63
// as the integer: canonicalNumber checks int64's range before converting,
// since the conversion of 2^63 is MinInt64 on amd64 and MaxInt64 on arm64.
func TestSchemaTwoTo63(t *testing.T) {
	raw := mpack.AppendMapHeader(nil, 2)
	raw = mpack.AppendFloat64(mpack.AppendString(raw, "hi"), 1<<63)
	raw = mpack.AppendFloat64(mpack.AppendString(raw, "lo"), -(1 << 63))
	var s map[string]any
	require.NoError(t, wire.DecodeSchema(raw, &s))
	require.Equal(t, float64(1<<63), s["hi"])
	require.Equal(t, int64(math.MinInt64), s["lo"])
}

// TestToolInputFlags: input_media and no_input travel in hello when true,
// are absent when false (a descriptor without them encodes as before they
// existed), and a non-boolean value is refused.
func TestToolInputFlags(t *testing.T) {
	plain, err := wire.AppendTool(nil, &wire.Tool{ID: "t"})
	require.NoError(t, err)
	require.NotContains(t, string(plain), "input_media")
	require.NotContains(t, string(plain), "no_input")
	for _, tool := range []wire.Tool{{ID: "a", InputMedia: true}, {ID: "b", NoInput: true}} {
		b, err := packetio.Encode(&wire.Hello{Protocol: []int64{1}, MaxStreams: 1, Tools: []wire.Tool{tool}}, wire.Limits{})
		require.NoError(t, err)
		p, err := packetio.NewReader(bytes.NewReader(b), wire.Limits{}).ReadPacket()
		require.NoError(t, err)
		require.Equal(t, []wire.Tool{tool}, p.(*wire.Hello).Tools)
	}
	bad := mpack.AppendMapHeader(mpack.AppendArrayHeader(nil, 1), 2)
	bad = mpack.AppendString(mpack.AppendString(bad, "id"), "t")
	bad = mpack.AppendString(mpack.AppendString(bad, "input_media"), "yes")
	r := mpack.NewReader(bad)
	_, err = wire.DecodeTools(&r)
	require.Error(t, err)
}
