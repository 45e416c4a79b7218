package mpack

import (
	"encoding/binary"
	"math"
	"slices"
)

// AppendValue appends v, a value of the shapes decoded JSON takes, in the
// canonical encoding the rest of Skulk uses: map keys sorted (byte order),
// integers in their smallest form, floats with an integral value as
// integers. The bytes are those of vmihailenco/msgpack with SetSortMapKeys,
// UseCompactInts and UseCompactFloats (FuzzAppendValue checks), without
// its reflection, which costs several times as much and, cold, a good part
// of a provider's start.
//
// It takes nil, bool, string, every Go integer type, float32, float64,
// []any and map[string]any, nested to MaxDepth. For anything else (a
// struct, a named map type, []byte, deeper nesting) it returns b unchanged
// and false: the caller encodes v with the library instead.
func AppendValue(b []byte, v any) ([]byte, bool) {
	out, ok := appendValue(b, v, 0)
	if !ok {
		return b, false
	}
	return out, true
}

func appendValue(b []byte, v any, depth int) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return AppendNil(b), true
	case bool:
		return AppendBool(b, x), true
	case string:
		return AppendString(b, x), true
	case int:
		return AppendInt(b, int64(x)), true
	case int8:
		return AppendInt(b, int64(x)), true
	case int16:
		return AppendInt(b, int64(x)), true
	case int32:
		return AppendInt(b, int64(x)), true
	case int64:
		return AppendInt(b, x), true
	case uint:
		return AppendUint(b, uint64(x)), true
	case uint8:
		return AppendUint(b, uint64(x)), true
	case uint16:
		return AppendUint(b, uint64(x)), true
	case uint32:
		return AppendUint(b, uint64(x)), true
	case uint64:
		return AppendUint(b, x), true
	case float32:
		// The library's rule, so that the bytes agree: an integral value
		// (and -0) is an integer; NaN and ±Inf are not.
		if n, ok := int64Of(float64(x)); ok {
			return AppendInt(b, n), true
		}
		return binary.BigEndian.AppendUint32(append(b, 0xca), math.Float32bits(x)), true
	case float64:
		if n, ok := int64Of(x); ok {
			return AppendInt(b, n), true
		}
		return AppendFloat64(b, x), true
	case []any:
		if x == nil {
			return AppendNil(b), true
		}
		if depth >= MaxDepth {
			return b, false
		}
		b = AppendArrayHeader(b, len(x))
		for _, e := range x {
			var ok bool
			if b, ok = appendValue(b, e, depth+1); !ok {
				return b, false
			}
		}
		return b, true
	case map[string]any:
		if x == nil {
			return AppendNil(b), true
		}
		if depth >= MaxDepth {
			return b, false
		}
		b = AppendMapHeader(b, len(x))
		var small [16]string // the keys of most maps, on the stack
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = AppendString(b, k)
			var ok bool
			if b, ok = appendValue(b, x[k], depth+1); !ok {
				return b, false
			}
		}
		return b, true
	}
	return b, false
}

// int64Of reports whether f is an integer in int64's range, and returns
// it: the compact encoding writes such a float as that integer. The range
// is checked before converting, because Go leaves the conversion of a
// float out of int64's range to the machine: amd64 yields MinInt64 and
// arm64 saturates to MaxInt64, so the library's own test,
// float64(int64(f)) == f, takes 2^63 for MaxInt64 on arm64 and changes the
// value. -0 is the integer 0; NaN and ±Inf are not integers.
func int64Of(f float64) (int64, bool) {
	if f >= -(1<<63) && f < 1<<63 && f == math.Trunc(f) {
		return int64(f), true
	}
	return 0, false
}
