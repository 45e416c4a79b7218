package toolschema

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// fastSchemas are schemas inside fastNode's subset, as tools write them.
var fastSchemas = map[string]map[string]any{
	"any-object": {"type": "object"},
	"empty":      {},
	"count-output": {"type": "object", "additionalProperties": false, "required": []any{"i"},
		"properties": map[string]any{"i": map[string]any{"type": "integer", "minimum": int64(0)}, "pad": map[string]any{"type": "string"}}},
	"bounds": {"type": "object", "properties": map[string]any{
		"n":  map[string]any{"type": "number", "exclusiveMinimum": 0.5, "maximum": int64(10)},
		"k":  map[string]any{"type": "integer", "minimum": int64(-3), "exclusiveMaximum": uint64(7)},
		"s":  map[string]any{"type": "string", "minLength": int64(2), "maxLength": int64(3), "description": "chars, not bytes"},
		"a":  map[string]any{"type": "array", "minItems": int64(1), "maxItems": int64(2), "items": map[string]any{"type": []any{"string", "null"}}},
		"o":  map[string]any{"type": "object", "required": []any{"x"}, "additionalProperties": map[string]any{"type": "boolean"}},
		"no": false,
		"ok": true,
	}},
	"required-only": {"required": []any{"a", "b"}, "properties": map[string]any{"a": map[string]any{}}},
}

func TestFastSchemaAgreesWithLibrary(t *testing.T) {
	type row struct {
		schema  string
		payload map[string]any
		valid   bool
		unsure  bool // the shortcut may defer to the library
	}
	rows := []row{
		{"any-object", map[string]any{}, true, false},
		{"any-object", map[string]any{"x": []any{1, "y", nil}}, true, false},
		{"empty", map[string]any{"x": 1}, true, false},
		{"count-output", map[string]any{"i": 0}, true, false},
		{"count-output", map[string]any{"i": int64(math.MaxInt64), "pad": "xx"}, true, false},
		{"count-output", map[string]any{"i": uint64(math.MaxUint64)}, true, false},
		{"count-output", map[string]any{"i": -1}, false, false},
		{"count-output", map[string]any{"pad": "x"}, false, false},
		{"count-output", map[string]any{"i": 1, "other": 1}, false, false},
		{"count-output", map[string]any{"i": "1"}, false, false},
		{"count-output", map[string]any{"i": 1.5}, false, false},
		{"count-output", map[string]any{"i": 2.0}, true, true},
		{"count-output", map[string]any{"i": 1, "pad": 3}, false, false},
		{"bounds", map[string]any{"n": 0.75, "k": -3, "s": "éé", "a": []any{"x", nil}, "o": map[string]any{"x": true, "y": false}, "ok": []any{}}, true, false},
		{"bounds", map[string]any{"n": 10}, true, false},
		{"bounds", map[string]any{"n": 10.0}, true, false},
		{"bounds", map[string]any{"n": 10.5}, false, false},
		{"bounds", map[string]any{"n": 0.5}, false, false},
		{"bounds", map[string]any{"n": 1}, true, false},
		{"bounds", map[string]any{"n": 0}, false, false},
		{"bounds", map[string]any{"k": 7}, false, false},
		{"bounds", map[string]any{"k": 6}, true, false},
		{"bounds", map[string]any{"k": -4}, false, false},
		{"bounds", map[string]any{"s": "é"}, false, false},
		{"bounds", map[string]any{"s": "éééé"}, false, false},
		{"bounds", map[string]any{"s": "abc"}, true, false},
		{"bounds", map[string]any{"a": []any{}}, false, false},
		{"bounds", map[string]any{"a": []any{"a", "b", "c"}}, false, false},
		{"bounds", map[string]any{"a": []any{1}}, false, false},
		{"bounds", map[string]any{"o": map[string]any{}}, false, false},
		{"bounds", map[string]any{"o": map[string]any{"x": 1}}, false, false}, // additionalProperties applies to x
		{"bounds", map[string]any{"o": map[string]any{"x": false}}, true, false},
		{"bounds", map[string]any{"o": map[string]any{"x": 1, "y": "no"}}, false, false},
		{"bounds", map[string]any{"no": nil}, false, false},
		{"bounds", map[string]any{"extra": map[string]any{"deep": []any{map[string]any{}}}}, true, false},
		{"required-only", map[string]any{"a": 1, "b": 2}, true, false},
		{"required-only", map[string]any{"a": 1}, false, false},
	}
	vals := map[string]*Validator{}
	for name, s := range fastSchemas {
		v, err := newValidator("output", s)
		require.Falsef(t, err != nil || v.fast == nil, "%s: %v, fast %v", name, err, v != nil && v.fast != nil)
		vals[name] = v
	}
	for _, r := range rows {
		v := vals[r.schema]
		p := frame.MustPayload(r.payload)
		lib := v.validateLib(p) == nil
		fast := v.anyObject || v.fast.accepts(p)
		assert.Falsef(t, lib != r.valid, "%s %v: library says valid=%v, table %v", r.schema, r.payload, lib, r.valid)
		assert.Falsef(t, fast && !lib, "%s %v: the shortcut accepts what the library refuses", r.schema, r.payload)
		assert.Falsef(t, !r.unsure && fast != lib, "%s %v: shortcut %v, library %v", r.schema, r.payload, fast, lib)
		if got := v.Validate(p) == nil; got != lib {
			assert.Fail(t, fmt.Sprintf("%s %v: validate %v, library %v", r.schema, r.payload, got, lib))
		}
	}
}

// Schemas outside the subset are left to the library alone.
func TestFastSchemaFallsBack(t *testing.T) {
	for _, s := range []map[string]any{
		{"type": "object", "properties": map[string]any{"s": map[string]any{"pattern": "^a"}}},
		{"enum": []any{"a"}},
		{"$ref": "#/$defs/x", "$defs": map[string]any{"x": map[string]any{}}},
		{"properties": map[string]any{"n": map[string]any{"multipleOf": int64(2)}}},
		{"prefixItems": []any{map[string]any{}}},
		{"format": "email"},
	} {
		v, err := newValidator("output", s)
		require.NoErrorf(t, err, "%v", s)
		assert.Falsef(t, v.fast != nil, "%v: compiled to the shortcut", s)
	}
}

// Random payloads: whatever the shortcut accepts, the library accepts, and
// the two agree on almost everything.
func TestFastSchemaRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) any
	var object func(depth int) map[string]any
	value = func(depth int) any {
		switch k := rng.IntN(9); {
		case k == 0:
			return nil
		case k == 1:
			return rng.IntN(2) == 0
		case k == 2:
			return rng.Int64N(20) - 5
		case k == 3:
			return float64(rng.IntN(40))/4 - 1
		case k == 4:
			return []string{"", "a", "ab", "abc", "abcd", "é", "éé"}[rng.IntN(7)]
		case k == 5 && depth < 3:
			a := make([]any, rng.IntN(4))
			for i := range a {
				a[i] = value(depth + 1)
			}
			return a
		case k >= 6 && depth < 3:
			return object(depth + 1)
		}
		return "x"
	}
	object = func(depth int) map[string]any {
		keys := []string{"i", "pad", "n", "k", "s", "a", "o", "x", "y", "no", "ok", "b"}
		m := map[string]any{}
		for range rng.IntN(4) {
			m[keys[rng.IntN(len(keys))]] = value(depth)
		}
		return m
	}
	agree, total := 0, 0
	for name, s := range fastSchemas {
		v, err := newValidator("output", s)
		require.NoError(t, err)
		for range 3000 {
			p := frame.MustPayload(object(1))
			lib := v.validateLib(p) == nil
			fast := v.anyObject || v.fast.accepts(p)
			require.Falsef(t, fast && !lib, "%s: the shortcut accepts a payload the library refuses", name)
			total++
			if fast == lib {
				agree++
			}
		}
	}
	assert.Falsef(t, agree < total*95/100, "the shortcut agrees on %d of %d payloads only", agree, total)
}

// The defaults worked out at catalogue time fill in what withDefaults
// fills in, byte for byte for canonical payloads.
func TestArgDefaultsAgree(t *testing.T) {
	schemas := []map[string]any{
		nil,
		{"type": "object"},
		{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}, "size": map[string]any{"type": "integer", "default": int64(0)}}},
		{"properties": map[string]any{"b": map[string]any{"default": "x"}, "a": map[string]any{"default": []any{int64(1)}}, "z": map[string]any{}}},
		{"properties": map[string]any{"o": map[string]any{"properties": map[string]any{"d": map[string]any{"default": true}}}}},
	}
	args := []frame.Payload{nil, frame.MustPayload(map[string]any{}),
		frame.MustPayload(map[string]any{"n": 1}), frame.MustPayload(map[string]any{"n": 1, "size": 5}),
		frame.MustPayload(map[string]any{"zz": 1, "a": "given", "0": nil}), frame.MustPayload(map[string]any{"o": map[string]any{}}),
		frame.MustPayload(map[string]any{"b": map[string]any{"deep": []any{1.5}}})}
	for i, s := range schemas {
		d := newArgDefaults(s)
		for j, a := range args {
			want, werr := withDefaults(s, a)
			got, gerr := d.apply(a)
			assert.Falsef(t, (werr == nil) != (gerr == nil) || string(got) != string(want), "schema %d args %d: got %x %v, want %x %v", i, j, got, gerr, want, werr)
		}
	}
	if d := newArgDefaults(schemas[2]); d.general || len(d.top) != 1 {
		assert.Fail(t, fmt.Sprintf("top-level defaults taken for nested ones: %+v", d))
	}
	if d := newArgDefaults(schemas[4]); !d.general {
		assert.Fail(t, "nested defaults not left to withDefaults")
	}
}

// A schema of the shortcut's subset is compiled by the library only when a
// payload first needs it, so the subset must hold only schemas the library
// compiles; the malformed ones go to the library at once and fail there.
func TestFastSchemaSubsetCompiles(t *testing.T) {
	for name, s := range fastSchemas {
		v, err := newValidator("output", s)
		require.NoErrorf(t, err, "%s", name)
		if v.fast == nil {
			assert.Fail(t, fmt.Sprintf("%s: not in the shortcut's subset", name))
			continue
		}
		if _, err := v.library(); err != nil {
			assert.Fail(t, fmt.Sprintf("%s: the library does not compile it: %v", name, err))
		}
	}
	for _, s := range []map[string]any{
		{"type": []any{"string", "string"}},
		{"required": []any{"a", "a"}},
		{"title": int64(5)},
		{"description": true},
		{"$comment": []any{}},
		{"deprecated": "yes"},
		{"readOnly": int64(1)},
		{"examples": "x"},
		{"properties": map[string]any{"a": map[string]any{"title": false}}},
		{"minimum": float32(math.NaN())},
	} {
		if v, err := newValidator("output", s); err == nil {
			assert.Fail(t, fmt.Sprintf("%v: compiled (shortcut %v)", s, v.fast != nil))
		}
	}
	if _, err := NewCatalog([]wire.Tool{{ID: "t", ArgumentsSchema: map[string]any{"type": "object", "title": int64(5)}}}); err == nil {
		assert.Fail(t, "a malformed schema compiled")
	}
}

// A payload the shortcut cannot accept compiles the library's schema on
// first use and gets its explanation.
func TestFastSchemaLibraryOnDemand(t *testing.T) {
	v, err := newValidator("arguments", map[string]any{"type": "object", "required": []any{"n"}, "properties": map[string]any{"n": map[string]any{"type": "integer"}}})
	require.NoError(t, err)
	require.False(t, v.lib != nil, "the library's schema was compiled before any payload needed it")
	err = v.Validate(frame.MustPayload(map[string]any{"n": "x"}))
	var se *Error
	require.Falsef(t, !errors.As(err, &se) || se.Field != "/n" || se.Keyword != "type", "got %#v, want an Error for /n, type", err)
	assert.False(t, v.lib == nil, "the library's schema is still not compiled")
}
