package mpack

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// canonical encodes v with the generic codec in its smallest forms, the way
// the appenders must.
func canonical(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	require.NoError(t, enc.Encode(v))
	return buf.Bytes()
}

func TestAppendersMatchTheSpec(t *testing.T) {
	for _, v := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		require.Equal(t, canonical(t, v), AppendInt(nil, v), "int %d", v)
		r := NewReader(AppendInt(nil, v))
		got, err := r.ReadInt()
		require.NoError(t, err)
		require.Equal(t, v, got)
		require.Zero(t, r.Remaining())
	}
	for _, v := range []uint64{0, 127, 128, 255, 256, math.MaxUint16, math.MaxUint16 + 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		require.Equal(t, canonical(t, v), AppendUint(nil, v), "uint %d", v)
		r := NewReader(AppendUint(nil, v))
		got, err := r.ReadUint()
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("s", n)
		require.Equal(t, canonical(t, s), AppendString(nil, s), "string of %d", n)
		r := NewReader(AppendString(nil, s))
		got, err := r.ReadStr()
		require.NoError(t, err)
		require.Equal(t, s, string(got))
	}
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		b := AppendMapHeader(nil, n)
		r := NewReader(b)
		got, err := r.ReadMapLen()
		require.NoError(t, err)
		require.Equal(t, n, got)
		b = AppendArrayHeader(nil, n)
		r = NewReader(b)
		got, err = r.ReadArrayLen()
		require.NoError(t, err)
		require.Equal(t, n, got)
	}
	require.Equal(t, canonical(t, 1.5), AppendFloat64(nil, 1.5))
	require.Equal(t, canonical(t, true), AppendBool(nil, true))
	require.Equal(t, canonical(t, false), AppendBool(nil, false))
	require.Equal(t, canonical(t, nil), AppendNil(nil))
}

func TestReaderTypesAndErrors(t *testing.T) {
	r := NewReader([]byte{0xc0, 0xc3, 0xc2, 0xca, 0x3f, 0xc0, 0, 0, 0x05, 0xd0, 0xfb})
	require.True(t, r.IsNil())
	require.False(t, r.IsNil())
	b, err := r.ReadBool()
	require.NoError(t, err)
	require.True(t, b)
	b, err = r.ReadBool()
	require.NoError(t, err)
	require.False(t, b)
	f, err := r.ReadFloat()
	require.NoError(t, err)
	require.Equal(t, 1.5, f)
	f, err = r.ReadFloat()
	require.NoError(t, err)
	require.Equal(t, 5.0, f)
	i, err := r.ReadInt()
	require.NoError(t, err)
	require.Equal(t, int64(-5), i)
	require.Equal(t, 11, r.Offset())
	_, err = r.ReadInt()
	require.ErrorIs(t, err, ErrShort)

	cases := []struct {
		name string
		b    []byte
		read func(*Reader) error
		want error
	}{
		{"str from int", []byte{0x01}, func(r *Reader) error { _, err := r.ReadStr(); return err }, ErrType},
		{"str truncated", []byte{0xa3, 'a'}, func(r *Reader) error { _, err := r.ReadStr(); return err }, ErrShort},
		{"str32 length truncated", []byte{0xdb, 0, 0}, func(r *Reader) error { _, err := r.ReadStr(); return err }, ErrShort},
		{"str32 huge", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, func(r *Reader) error { _, err := r.ReadStr(); return err }, ErrShort},
		{"int from str", []byte{0xa0}, func(r *Reader) error { _, err := r.ReadInt(); return err }, ErrType},
		{"int from uint64 too big", []byte{0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0}, func(r *Reader) error { _, err := r.ReadInt(); return err }, ErrRange},
		{"uint from negative", []byte{0xff}, func(r *Reader) error { _, err := r.ReadUint(); return err }, ErrRange},
		{"uint truncated", []byte{0xcd, 1}, func(r *Reader) error { _, err := r.ReadUint(); return err }, ErrShort},
		{"int16 truncated", []byte{0xd1, 1}, func(r *Reader) error { _, err := r.ReadInt(); return err }, ErrShort},
		{"float truncated", []byte{0xcb, 1, 2}, func(r *Reader) error { _, err := r.ReadFloat(); return err }, ErrShort},
		{"float32 truncated", []byte{0xca, 1}, func(r *Reader) error { _, err := r.ReadFloat(); return err }, ErrShort},
		{"bool from nil", []byte{0xc0}, func(r *Reader) error { _, err := r.ReadBool(); return err }, ErrType},
		{"map from array", []byte{0x90}, func(r *Reader) error { _, err := r.ReadMapLen(); return err }, ErrType},
		{"array from map", []byte{0x80}, func(r *Reader) error { _, err := r.ReadArrayLen(); return err }, ErrType},
		{"map16 truncated", []byte{0xde, 0}, func(r *Reader) error { _, err := r.ReadMapLen(); return err }, ErrShort},
		{"empty", nil, func(r *Reader) error { _, err := r.ReadMapLen(); return err }, ErrShort},
		{"skip never-used", []byte{0xc1}, func(r *Reader) error { _, err := r.Skip(); return err }, ErrType},
		{"skip huge map", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0x01}, func(r *Reader) error { _, err := r.Skip(); return err }, ErrShort},
		{"skip huge bin", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, func(r *Reader) error { _, err := r.Skip(); return err }, ErrShort},
		{"skip ext32 truncated", []byte{0xc9, 0, 0, 0, 2, 1, 2}, func(r *Reader) error { _, err := r.Skip(); return err }, ErrShort},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(c.b)
			require.ErrorIs(t, c.read(&r), c.want)
		})
	}
}

func TestSkipEveryType(t *testing.T) {
	values := []any{nil, true, false, 1, -1, -100, 200, 300, -200, 70000, -70000, 1 << 40, -(1 << 40), uint64(math.MaxUint64),
		float32(1.5), 2.5, "s", strings.Repeat("x", 40), strings.Repeat("x", 300), strings.Repeat("x", 70000),
		[]byte{1}, make([]byte, 300), make([]byte, 70000), []any{1, []any{2}}, make([]any, 20), make([]any, 70000),
		map[string]any{"a": map[string]any{"b": 1}}, msgpack.RawMessage{0xd4, 1, 2}, msgpack.RawMessage{0xd5, 1, 2, 3},
		msgpack.RawMessage{0xd6, 1, 1, 2, 3, 4}, msgpack.RawMessage{0xd7, 1, 1, 2, 3, 4, 5, 6, 7, 8},
		msgpack.RawMessage{0xd8, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		msgpack.RawMessage{0xc7, 1, 5, 9}, msgpack.RawMessage{0xc8, 0, 1, 5, 9}, msgpack.RawMessage{0xc9, 0, 0, 0, 1, 5, 9}}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		b = append(b, 0xc0) // a following value must be left alone
		r := NewReader(b)
		got, err := r.Skip()
		require.NoError(t, err, "%T", v)
		require.Equal(t, b[:len(b)-1], got, "%T", v)
		require.Equal(t, 1, r.Remaining())
		for cut := range len(b) - 1 {
			if len(b) > 1024 && cut > 16 && cut < len(b)-16 {
				continue // big values: the ends are where the lengths are
			}
			r := NewReader(b[:cut])
			_, err := r.Skip()
			require.ErrorIs(t, err, ErrShort, "%T cut at %d", v, cut)
		}
	}
}

func nest(depth int) []byte {
	var b []byte
	for range depth - 1 {
		b = AppendString(AppendMapHeader(b, 1), "k")
	}
	return AppendMapHeader(b, 0)
}

func nestArrays(depth int) []byte {
	b := AppendString(AppendMapHeader(nil, 1), "k")
	for range depth - 2 {
		b = AppendArrayHeader(b, 1)
	}
	return AppendArrayHeader(b, 0)
}

func TestCheckObject(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty map", []byte{0x80}, nil},
		{"JSON values", enc(map[string]any{"s": "é", "i": -3, "u": uint64(math.MaxUint64), "f": 1.25, "f32": float32(2),
			"n": nil, "b": true, "a": []any{1, "x", map[string]any{}}, "m": map[string]any{"x": []any{}}}), nil},
		{"map16", enc(func() map[string]any {
			m := map[string]any{}
			for i := range 20 {
				m[strings.Repeat("k", i+1)] = i
			}
			return m
		}()), nil},
		{"depth MaxDepth", nest(MaxDepth), nil},
		{"depth MaxDepth with arrays", nestArrays(MaxDepth), nil},
		{"depth MaxDepth+1", nest(MaxDepth + 1), ErrDepth},
		{"depth MaxDepth+1 with arrays", nestArrays(MaxDepth + 1), ErrDepth},
		// CheckObject starts with a stack of shallowDepth and starts
		// again with the full one past it: same results either side.
		{"depth shallowDepth", nest(shallowDepth), nil},
		{"depth shallowDepth+1", nest(shallowDepth + 1), nil},
		{"depth shallowDepth+1 with arrays", nestArrays(shallowDepth + 1), nil},
		{"bad key before going deep", append([]byte{0x82, 0xa1, 0xff, 0x01, 0xa1, 'k'}, nest(MaxDepth)...), ErrNotJSON},
		{"bad value after going deep", append(append([]byte{0x82, 0xa1, 'k'}, nest(shallowDepth+2)...), 0xa1, 'f', 0xc1), ErrNotJSON},
		{"trailing after going deep", append(nest(shallowDepth+2), 0xc0), ErrTrailing},
		{"long UTF-8 strings", enc(map[string]any{strings.Repeat("é", 15): strings.Repeat("日本", 5)}), nil},
		{"long invalid UTF-8 value", enc(map[string]any{"k": strings.Repeat("x", 20) + "\xff"}), ErrNotJSON},
		{"short string truncated", []byte{0x81, 0xa1, 'a', 0xa5, 'x'}, ErrShort},
		{"not a map: array", enc([]any{}), ErrType},
		{"not a map: string", enc("x"), ErrType},
		{"not a map: nil", []byte{0xc0}, ErrType},
		{"empty input", nil, ErrShort},
		{"trailing", []byte{0x80, 0xc0}, ErrTrailing},
		{"truncated", []byte{0x81, 0xa1, 'a'}, ErrShort},
		{"huge count", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 0x01}, ErrShort},
		{"huge array count", []byte{0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrShort},
		{"int key", []byte{0x81, 0x01, 0x01}, ErrNotJSON},
		{"nil key", []byte{0x81, 0xc0, 0x01}, ErrNotJSON},
		{"map key", []byte{0x81, 0x80, 0x01}, ErrNotJSON},
		{"invalid UTF-8 key", []byte{0x81, 0xa1, 0xff, 0x01}, ErrNotJSON},
		{"invalid UTF-8 value", []byte{0x81, 0xa1, 'a', 0xa2, 0xc3, 0x28}, ErrNotJSON},
		{"binary value", enc(map[string]any{"b": []byte{1}}), ErrNotJSON},
		{"extension value", []byte{0x81, 0xa1, 'a', 0xd4, 0x01, 0x02}, ErrNotJSON},
		{"timestamp extension", enc(map[string]any{"t": msgpack.RawMessage{0xd6, 0xff, 0, 0, 0, 1}}), ErrNotJSON},
		{"never-used byte", []byte{0x81, 0xa1, 'a', 0xc1}, ErrNotJSON},
		{"NaN", enc(map[string]any{"f": math.NaN()}), ErrNotJSON},
		{"+Inf float32", enc(map[string]any{"f": float32(math.Inf(1))}), ErrNotJSON},
		{"-Inf in array", enc(map[string]any{"a": []any{math.Inf(-1)}}), ErrNotJSON},
		{"float truncated", []byte{0x81, 0xa1, 'f', 0xcb, 0, 0}, ErrShort},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckObject(c.b)
			// ReadObject checks the same and stops after the map.
			r := NewReader(c.b)
			raw, rerr := r.ReadObject()
			switch c.want {
			case nil:
				require.NoError(t, err)
				require.NoError(t, rerr)
				require.Equal(t, c.b, raw)
				after := NewReader(append(append([]byte{}, c.b...), 0xc3))
				raw, rerr = after.ReadObject()
				require.NoError(t, rerr)
				require.Equal(t, c.b, raw, "ReadObject spans the map alone")
				require.Equal(t, 1, after.Remaining(), "what follows is left unread")
			case ErrTrailing:
				require.ErrorIs(t, err, c.want)
				require.NoError(t, rerr, "ReadObject does not look past the map")
				require.Less(t, len(raw), len(c.b))
				require.Equal(t, len(c.b)-len(raw), r.Remaining())
			default:
				require.ErrorIs(t, err, c.want)
				require.ErrorIs(t, rerr, c.want)
			}
		})
	}
}

func TestCheckObjectAllocatesNothing(t *testing.T) {
	b, err := msgpack.Marshal(map[string]any{"a": []any{1, "x", map[string]any{"b": 2.5}}, "n": nest(MaxDepth)})
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = CheckObject(b) }))
	deep := nest(MaxDepth)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = CheckObject(deep) }))
}

func TestReaderAllocatesNothing(t *testing.T) {
	b := AppendString(AppendMapHeader(nil, 2), "key")
	b = AppendString(b, "value")
	b = AppendInt(AppendString(b, "n"), -70000)
	allocs := testing.AllocsPerRun(100, func() {
		r := NewReader(b)
		n, _ := r.ReadMapLen()
		for range n {
			_, _ = r.ReadStr()
			_, _ = r.Skip()
		}
	})
	require.Zero(t, allocs)
}

func TestMapString(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		v      any
		want   string
		wantOK bool
	}{
		{map[string]any{"text": "a"}, "a", true},
		{map[string]any{"i": 70000, "text": "b"}, "b", true},
		{map[string]any{"n": -100, "f": 1.5, "s": long, "t": true, "z": nil, "text": "c"}, "c", true},
		{map[string]any{"nested": map[string]any{"text": "no"}, "l": []any{"text"}}, "", false},
		{map[string]any{"k": "text"}, "", false},
		{map[string]any{"text": 7}, "", false},
		{map[string]any{long: 1, "text": long}, long, true},
		{[]any{"text", "a"}, "", false},
		{"text", "", false},
	} {
		b, err := msgpack.Marshal(c.v)
		require.NoError(t, err)
		got, ok := MapString(b, "text")
		require.Equal(t, c.wantOK, ok, "%v", c.v)
		require.Equal(t, c.want, string(got), "%v", c.v)
		for cut := range len(b) { // a cut input gives the value whole or nothing
			if got, ok := MapString(b[:cut], "text"); ok {
				require.Equal(t, c.want, string(got), "%v cut at %d", c.v, cut)
			}
		}
	}
}

// validUTF8 agrees with utf8.Valid for every length around its strides
// and every place of a multi-byte rune, a cut one or an invalid byte.
func TestValidUTF8(t *testing.T) {
	for n := range 80 {
		ascii := []byte(strings.Repeat("a", n))
		require.True(t, validUTF8(ascii), "%d ASCII bytes", n)
		for i := range n + 1 {
			for _, ins := range []string{"é", "\xff", "\xc3", "日", "\x00"} {
				s := append(append(append([]byte(nil), ascii[:i]...), ins...), ascii[i:]...)
				require.Equal(t, utf8.Valid(s), validUTF8(s), "%q at %d of %d", ins, i, n)
			}
		}
	}
}
