package mpack

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// libCanonical is the library's canonical encoding (as frame.PayloadOf
// configures it), which AppendValue must reproduce byte for byte.
func libCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.UseCompactInts(true)
	enc.UseCompactFloats(true)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

// holdsTwoTo63 reports whether v holds the float 2^63, which the library
// encodes as MaxInt64 on arm64 (TestAppendValueTwoTo63): there AppendValue
// is right and the library is not.
func holdsTwoTo63(v any) bool {
	switch x := v.(type) {
	case float64:
		return x == 1<<63
	case float32:
		return x == 1<<63
	case []any:
		return slices.ContainsFunc(x, holdsTwoTo63)
	case map[string]any:
		for _, e := range x {
			if holdsTwoTo63(e) {
				return true
			}
		}
	}
	return false
}

// libEncode is libCanonical for values it must take.
func libEncode(t testing.TB, v any) []byte {
	b, err := libCanonical(v)
	require.NoError(t, err)
	return b
}

// manyKeys returns a map with n keys, inserted in reverse order.
func manyKeys(n int) map[string]any {
	m := map[string]any{}
	for i := n; i > 0; i-- {
		m[strings.Repeat("k", i)] = i
	}
	return m
}

func TestAppendValue(t *testing.T) {
	values := []any{
		nil, true, false, "", "é", strings.Repeat("s", 31), strings.Repeat("s", 32),
		strings.Repeat("s", 255), strings.Repeat("s", 256), strings.Repeat("s", 1<<16),
		0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64,
		int8(-5), int16(300), int32(-70000), int64(1 << 40), uint(7), uint8(200), uint16(60000), uint32(1 << 31), uint64(math.MaxUint64),
		0.0, math.Copysign(0, -1), 1.0, -1.0, 1.5, 1e20, -1e20, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.NaN(), math.Inf(1), math.Inf(-1), 9.007199254740993e15,
		float32(0), float32(2), float32(2.5), float32(-1e30), float32(math.Inf(1)),
		[]any{}, []any(nil), []any{1, "a", nil, []any{true}}, make([]any, 15), make([]any, 16), make([]any, 70000),
		map[string]any{}, map[string]any(nil), manyKeys(15), manyKeys(16), manyKeys(40),
		map[string]any{"b": 1, "a": map[string]any{"z": []any{1.5, map[string]any{"y": nil, "x": "x"}}}},
	}
	for i, v := range values {
		got, ok := AppendValue([]byte{0xff}, v)
		require.True(t, ok, "value %d (%T)", i, v)
		require.Equal(t, append([]byte{0xff}, libEncode(t, v)...), got, "value %d (%T)", i, v)
	}
}

// TestAppendValueDeclines: what is not of decoded JSON's shapes, or nests
// deeper than MaxDepth, is left to the library: b comes back unchanged.
func TestAppendValueDeclines(t *testing.T) {
	type named map[string]any
	deep := any(1)
	for range MaxDepth + 1 {
		deep = []any{deep}
	}
	for _, v := range []any{
		struct{ A int }{1}, []byte("x"), named{"a": 1}, map[string]string{"a": "b"}, []string{"a"},
		map[string]any{"ok": 1, "bad": struct{}{}}, []any{1, []byte{1}}, deep,
	} {
		got, ok := AppendValue([]byte{1, 2}, v)
		require.False(t, ok, "%T", v)
		require.Equal(t, []byte{1, 2}, got, "%T", v)
	}
	atBound := any(1)
	for range MaxDepth {
		atBound = []any{atBound}
	}
	_, ok := AppendValue(nil, atBound)
	require.True(t, ok, "MaxDepth levels are taken")
}

// FuzzAppendValue: every value the library decodes from a checked object
// is encoded by AppendValue as the library encodes it, or declined.
func FuzzAppendValue(f *testing.F) {
	for _, v := range []any{
		map[string]any{"a": 1, "b": []any{1.5, "x", nil, true}},
		map[string]any{"n": -129, "f": float32(2.5), "u": uint64(math.MaxUint64)},
		[]any{map[string]any{"z": 1, "y": 2}},
	} {
		f.Add(libEncode(f, v))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Only what CheckObject takes: the library would believe an
		// array's declared length and allocate it before reading it.
		if CheckObject(data) != nil {
			return
		}
		var v any
		if err := msgpack.Unmarshal(data, &v); err != nil {
			return
		}
		got, ok := AppendValue(nil, v)
		if !ok {
			return
		}
		want, err := libCanonical(v)
		require.NoError(t, err, "AppendValue took a value the library cannot encode")
		require.Falsef(t, !bytes.Equal(got, want) && !holdsTwoTo63(v), "AppendValue %x, the library %x", got, want)
	})
}

// TestInt64OfRange: the floats the compact encoding writes as integers are
// exactly the integral ones in int64's range. 2^63 is not one of them, on
// every machine: Go's conversion of it to int64 is MinInt64 on amd64 and
// MaxInt64 on arm64, so a test by round trip would differ between them.
func TestInt64OfRange(t *testing.T) {
	below := math.Nextafter(1<<63, 0) // 2^63 - 1024, the largest float below 2^63
	for _, tc := range []struct {
		f  float64
		n  int64
		ok bool
	}{
		{0, 0, true},
		{math.Copysign(0, -1), 0, true},
		{-1, -1, true},
		{1.5, 0, false},
		{below, int64(below), true},
		{1 << 63, 0, false},
		{-(1 << 63), math.MinInt64, true},
		{math.Nextafter(-(1 << 63), math.Inf(-1)), 0, false},
		{1e19, 0, false},
		{math.NaN(), 0, false},
		{math.Inf(1), 0, false},
		{math.Inf(-1), 0, false},
	} {
		n, ok := int64Of(tc.f)
		require.Equal(t, tc.ok, ok, "int64Of(%v)", tc.f)
		require.Equal(t, tc.n, n, "int64Of(%v)", tc.f)
	}
}

// TestAppendValueTwoTo63 encodes 2^63 as a float, which decodes to itself,
// and -2^63 as the integer it is.
func TestAppendValueTwoTo63(t *testing.T) {
	for _, f := range []float64{1 << 63, -(1 << 63)} {
		b, ok := AppendValue(nil, map[string]any{"x": f})
		require.True(t, ok)
		var m map[string]any
		require.NoError(t, msgpack.Unmarshal(b, &m))
		switch v := m["x"].(type) {
		case float64:
			require.Equal(t, f, v)
		case int64:
			require.Equal(t, f, float64(v))
			require.Equal(t, int64(math.MinInt64), v)
		default:
			require.FailNow(t, fmt.Sprintf("2^63's sign %v decoded as %T", math.Signbit(f), v))
		}
	}
	b, _ := AppendValue(nil, float64(1<<63))
	require.Equal(t, byte(0xcb), b[0], "2^63 is written as a float64")
	b, _ = AppendValue(nil, float32(1<<63))
	require.Equal(t, byte(0xca), b[0], "2^63 is written as a float32")
}
