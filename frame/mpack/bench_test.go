package mpack

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmihailenco/msgpack/v5"
)

// benchObject encodes v compactly, as frame.PayloadOf would.
func benchObject(b *testing.B, v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	require.NoError(b, enc.Encode(v))
	return buf.Bytes()
}

// benchPayloads are typical tool payloads: a small chunk (short keys, short
// text, small integers, a boolean), a larger record with nested maps,
// arrays, floats and a 1 KiB string.
var benchPayloads = []struct {
	name string
	v    any
}{
	{"small", map[string]any{"text": "hello, world", "n": 42, "ok": true}},
	{"record", map[string]any{
		"id": "rec-0001", "score": 0.875, "tags": []any{"a", "bb", "ccc", "dddd"},
		"counts": []any{1, 2, 3, 400, 50000, -7}, "nested": map[string]any{"x": 1, "y": nil, "z": []any{true, false}},
		"body": strings.Repeat("lorem ipsum ", 85),
	}},
}

// BenchmarkCheckObject checks benchPayloads.
func BenchmarkCheckObject(b *testing.B) {
	for _, c := range benchPayloads {
		b.Run(c.name, func(b *testing.B) {
			obj := benchObject(b, c.v)
			b.SetBytes(int64(len(obj)))
			b.ReportAllocs()
			for b.Loop() {
				require.NoError(b, CheckObject(obj))
			}
		})
	}
}

// BenchmarkAppendValue encodes benchPayloads with AppendValue and, as the baseline of the same run, with the library
// configured as frame.PayloadOf configures it.
func BenchmarkAppendValue(b *testing.B) {
	for _, c := range benchPayloads {
		b.Run(c.name+"/mpack", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := AppendValue(make([]byte, 0, 64), c.v); !ok {
					require.FailNow(b, "declined")
				}
			}
		})
		b.Run(c.name+"/library", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := libCanonical(c.v); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
			}
		})
	}
}
