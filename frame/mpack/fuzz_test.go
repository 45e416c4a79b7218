package mpack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/vmihailenco/msgpack/v5"
)

// jsonDepth returns v's nesting depth (a map or array is one deeper than
// what it holds) and whether v has a JSON form in Skulk's sense.
func jsonDepth(v any) (int, bool) {
	switch v := v.(type) {
	case nil, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return 0, true
	case float32:
		f := float64(v)
		return 0, !math.IsNaN(f) && !math.IsInf(f, 0)
	case float64:
		return 0, !math.IsNaN(v) && !math.IsInf(v, 0)
	case string:
		return 0, utf8.ValidString(v)
	case []any:
		d := 0
		for _, e := range v {
			ed, ok := jsonDepth(e)
			if !ok {
				return 0, false
			}
			d = max(d, ed)
		}
		return d + 1, true
	case map[string]any:
		d := 0
		for k, e := range v {
			ed, ok := jsonDepth(e)
			if !ok || !utf8.ValidString(k) {
				return 0, false
			}
			d = max(d, ed)
		}
		return d + 1, true
	}
	return 0, false
}

// FuzzCheckObject checks CheckObject against the generic codec: what it
// accepts must decode to exactly one JSON-able map no deeper than MaxDepth
// that encoding/json can marshal, and Skip must span all of it. It must
// never panic.
func FuzzCheckObject(f *testing.F) {
	for _, v := range []any{
		map[string]any{}, map[string]any{"a": 1, "b": []any{"x", 1.5, nil, true, map[string]any{"c": -1}}},
		map[string]any{"f": float32(2)}, []any{1}, "s", map[string]any{"b": []byte{1}},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(nest(MaxDepth))
	f.Add(nest(MaxDepth + 1))
	f.Add([]byte{0x81, 0xa1, 'a', 0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})

	f.Add([]byte{0x82, 0xa1, 'i', 0xce, 0, 0, 1, 2, 0xa3, 'p', 'a', 'd', 0xd9, 2, 'x', 'y'})
	f.Add([]byte{0x81, 0x01, 0x02})
	f.Add([]byte{0x83, 0xa1, 'n', 0xcd, 1, 2, 0xa1, 's', 0xd9, 1, 'x', 0xa4, 't', 'e', 'x', 't', 0xa1, 'y'})

	f.Fuzz(func(t *testing.T, b []byte) {
		// The flat shortcut takes only what the general walk takes, and
		// ends where it does.
		if len(b) > 0 {
			flat := NewReader(b)
			if flat.checkFlat() {
				gen := NewReader(b)
				var st [MaxDepth + 1]level
				if err := gen.checkValue(st[:]); err != nil || gen.off != flat.off {
					require.FailNow(t, fmt.Sprintf("checkFlat took %d bytes; checkValue: %v at %d", flat.off, err, gen.off))
				}
			}
		}
		r := NewReader(b)
		_, rerr := r.ReadObject()
		if whole := rerr == nil && r.Remaining() == 0; whole != (CheckObject(b) == nil) {
			require.FailNow(t, fmt.Sprintf("ReadObject of the whole input (%v, %d left) disagrees with CheckObject", rerr, r.Remaining()))
		}
		if CheckObject(b) != nil {
			return // the generic codec may trust sizes: do not feed it refused input
		}
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		dec.UseLooseInterfaceDecoding(true)
		v, decErr := dec.DecodeInterface()
		require.NoError(t, decErr, "CheckObject accepted what the codec cannot decode")
		require.EqualValuesf(t, 0, dec.Buffered().(*bytes.Reader).Len(), "CheckObject accepted trailing bytes")
		m, ok := v.(map[string]any)
		require.Falsef(t, !ok, "CheckObject accepted a %T", v)
		d, ok := jsonDepth(m)
		require.Falsef(t, !ok, "CheckObject accepted a value with no JSON form")
		require.Falsef(t, d > MaxDepth, "CheckObject accepted depth %d", d)
		if _, err := json.Marshal(m); err != nil {
			require.FailNow(t, fmt.Sprintf("encoding/json refuses what CheckObject accepted: %v", err))
		}
		r = NewReader(b)
		raw, err := r.Skip()
		require.Falsef(t, err != nil || len(raw) != len(b), "Skip disagrees with CheckObject: %v", err)
		// MapString finds what the codec decodes (with keys given once:
		// the codec keeps a repeated key's last value, MapString its first).
		r = NewReader(b)
		if n, _ := r.ReadMapLen(); n == len(m) {
			want, wantOK := m["text"].(string)
			got, ok := MapString(b, "text")
			require.Falsef(t, ok != wantOK || string(got) != want, "MapString = %q, %v; the codec has %q, %v", got, ok, want, wantOK)
		}
	})
}
