package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/mpack"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRoundTripOverSocket(t *testing.T) {
	ua, ub := socketPair(t)
	defer ua.Close()
	defer ub.Close()
	w := NewWriter(ua, Limits{})
	r := NewReader(ub, Limits{})
	data := bytes.Repeat([]byte{7}, 1<<20)
	chunk, err := frame.NewChunk("c1", frame.ProviderToCaller, 1, frame.MustPayload(map[string]any{"text": "hi"}),
		&frame.InlineMedia{Data: data, MediaType: "application/octet-stream"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		for _, p := range []Packet{&Ping{Nonce: 9}, &Frame{chunk}, &End{CallID: "c1"}} {
			if err := w.WritePacket(p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	p, err := r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, uint64(9), p.(*Ping).Nonce)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	f := p.(*Frame)
	require.Equal(t, data, f.Media.(*frame.InlineMedia).Data)
	txt, ok := f.Payload.Text()
	require.True(t, ok)
	require.Equal(t, "hi", txt)
	p, err = r.ReadPacket()
	require.NoError(t, err)
	require.Equal(t, "c1", p.(*End).CallID)
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
	mk := func(order int) Tool {
		props := map[string]any{}
		schema := Schema{}
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		for i := range keys {
			k := keys[(i+order)%len(keys)]
			props[k] = map[string]any{"type": "string", "title": k}
			schema[k+"x"] = len(k)
		}
		schema["properties"] = props
		return Tool{ID: "t", Description: "d", ArgumentsSchema: schema, ResultSchema: Schema{"type": "object"}}
	}
	first, err := AppendTool(nil, ptr(mk(0)))
	require.NoError(t, err)
	for order := 1; order < 8; order++ {
		enc, err := AppendTool(nil, ptr(mk(order)))
		require.NoError(t, err)
		require.Equal(t, first, enc, "order %d", order)
	}
	tool := mk(3)
	hello, err := Encode(&Hello{Protocol: []int64{1}, Tools: []Tool{tool}}, Limits{})
	require.NoError(t, err)
	require.True(t, bytes.Contains(hello, first), "hello carries the canonical encoding")

	_, err = AppendTool(nil, &Tool{ID: ""})
	var fe *frame.FieldError
	require.ErrorAs(t, err, &fe)
}

func ptr[T any](v T) *T { return &v }

func TestMillis(t *testing.T) {
	for ms, want := range map[int64]time.Duration{
		-5:            0,
		0:             0,
		1:             time.Millisecond,
		1500:          1500 * time.Millisecond,
		9_223_372_036: 9_223_372_036 * time.Millisecond,
		// Too large for a Duration in nanoseconds: saturated, not wrapped.
		10_000_000_000_000: maxMillis,
		math.MaxInt64:      maxMillis,
	} {
		require.Equal(t, want, Millis(ms), "Millis(%d)", ms)
	}
	sum := maxMillis
	sum += maxMillis
	require.Positive(t, sum, "two of them overflow")
}

// TestStartupCancelGraceDefault: a startup without cancel_grace_ms decodes
// with the protocol's default of 1000 ms; an explicit 0 stays 0.
func TestStartupCancelGraceDefault(t *testing.T) {
	full, err := Encode(&Startup{Protocol: 1, ChildID: "c", CancelGraceMS: 0, IngressQueue: IngressQueue}, Limits{})
	require.NoError(t, err)
	p, err := Decode(full, Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(0), p.(*Startup).CancelGraceMS)

	hdr := mpack.AppendMapHeader(nil, 3)
	hdr = mpack.AppendString(mpack.AppendString(hdr, "t"), "startup")
	hdr = mpack.AppendInt(mpack.AppendString(hdr, "protocol"), 1)
	hdr = mpack.AppendString(mpack.AppendString(hdr, "child_id"), "c")
	b := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))
	b = binary.BigEndian.AppendUint32(b, 0)
	p, err = Decode(append(b, hdr...), Limits{})
	require.NoError(t, err)
	require.Equal(t, int64(DefaultCancelGraceMS), p.(*Startup).CancelGraceMS)
}

// TestSchemaTwoTo63 decodes a schema's float 2^63 as that float and -2^63
// as the integer: canonicalNumber checks int64's range before converting,
// since the conversion of 2^63 is MinInt64 on amd64 and MaxInt64 on arm64.
func TestSchemaTwoTo63(t *testing.T) {
	raw := mpack.AppendMapHeader(nil, 2)
	raw = mpack.AppendFloat64(mpack.AppendString(raw, "hi"), 1<<63)
	raw = mpack.AppendFloat64(mpack.AppendString(raw, "lo"), -(1 << 63))
	var s Schema
	require.NoError(t, decodeSchema(raw, &s))
	require.Equal(t, float64(1<<63), s["hi"])
	require.Equal(t, int64(math.MinInt64), s["lo"])
}

// TestToolInputFlags: input_media and no_input travel in hello when true,
// are absent when false (a descriptor without them encodes as before they
// existed), and a non-boolean value is refused.
func TestToolInputFlags(t *testing.T) {
	plain, err := AppendTool(nil, &Tool{ID: "t"})
	require.NoError(t, err)
	require.NotContains(t, string(plain), "input_media")
	require.NotContains(t, string(plain), "no_input")
	for _, tool := range []Tool{{ID: "a", InputMedia: true}, {ID: "b", NoInput: true}} {
		b, err := Encode(&Hello{Protocol: []int64{1}, MaxStreams: 1, Tools: []Tool{tool}}, Limits{})
		require.NoError(t, err)
		p, err := NewReader(bytes.NewReader(b), Limits{}).ReadPacket()
		require.NoError(t, err)
		require.Equal(t, []Tool{tool}, p.(*Hello).Tools)
	}
	bad := mpack.AppendMapHeader(mpack.AppendArrayHeader(nil, 1), 2)
	bad = mpack.AppendString(mpack.AppendString(bad, "id"), "t")
	bad = mpack.AppendString(mpack.AppendString(bad, "input_media"), "yes")
	r := mpack.NewReader(bad)
	_, err = decodeTools(&r)
	require.Error(t, err)
}
