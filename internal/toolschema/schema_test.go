package toolschema

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

func TestSchemaErrors(t *testing.T) {
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":  map[string]any{"type": "string", "maxLength": int8(3), "pattern": "^[a-z]+$"},
			"tags":  map[string]any{"type": "array", "maxItems": int8(1)},
			"words": map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": int8(2)}},
			"env":   map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "integer"}},
			"level": map[string]any{"type": "integer", "minimum": int8(0), "maximum": int8(9)},
			"opts": map[string]any{"type": "object", "properties": map[string]any{
				"depth": map[string]any{"type": "integer", "default": int8(2)},
				"mode":  map[string]any{"enum": []any{"a", "b"}, "default": "a"},
			}},
		},
		"required":             []any{"name"},
		"additionalProperties": false,
	}
	cat, err := NewCatalog([]wire.Tool{{ID: "t", ArgumentsSchema: schema}})
	require.NoError(t, err)
	tl := cat.Tool("t")
	for _, tc := range []struct {
		args  map[string]any
		field string
		kw    string
		value string
	}{
		{map[string]any{}, "/name", "required", "nothing"},
		{map[string]any{"name": "toolong-secret"}, "/name", "maxLength", "string of 14 bytes"},
		{map[string]any{"name": "AB"}, "/name", "pattern", "string of 2 bytes"},
		{map[string]any{"name": "ab", "tags": []any{1, 2}}, "/tags", "maxItems", "array of 2 items"},
		{map[string]any{"name": "ab", "level": 12.5}, "/level", "type", "number"},
		{map[string]any{"name": "ab", "level": 12}, "/level", "maximum", "integer"},
		{map[string]any{"name": "ab", "opts": map[string]any{"mode": "secret"}}, "/opts/mode", "enum", "string of 6 bytes"},
		{map[string]any{"name": "ab", "se/cr~et": true}, "/se~1cr~0et", "additionalProperties", "boolean"},
		// The field is where in the payload the value is: an item's index,
		// a key that only additionalProperties describes.
		{map[string]any{"name": "ab", "words": []any{"ok", "secret"}}, "/words/1", "maxLength", "string of 6 bytes"},
		{map[string]any{"name": "ab", "env": map[string]any{"a": 1, "b": "secret"}}, "/env/b", "type", "string of 6 bytes"},
	} {
		args, err := withDefaults(schema, frame.MustPayload(tc.args))
		require.NoError(t, err)
		err = tl.Arguments.Validate(args)
		var se *Error
		require.ErrorAsf(t, err, &se, "%v", tc.args)
		assert.Falsef(t, se.Field != tc.field || se.Keyword != tc.kw || se.Value != tc.value, "%v: got %+v, want %s %s %s", tc.args, se, tc.field, tc.kw, tc.value)
		assert.Falsef(t, strings.Contains(err.Error(), "secret") && tc.kw != "additionalProperties", "error echoes the value: %v", err)
	}
	// Defaults are filled at the top level and in nested objects the
	// caller gave.
	args, err := withDefaults(schema, frame.MustPayload(map[string]any{"name": "ab", "opts": map[string]any{}}))
	require.NoError(t, err)
	var v struct {
		Opts struct {
			Depth int    `json:"depth"`
			Mode  string `json:"mode"`
		} `json:"opts"`
	}
	if err := args.Decode(&v); err != nil || v.Opts.Depth != 2 || v.Opts.Mode != "a" {
		require.FailNow(t, fmt.Sprintf("defaults: %+v %v", v, err))
	}
	require.NoError(t, tl.Arguments.Validate(args))
	// Nothing to fill: the payload is passed on as it is.
	p := frame.MustPayload(map[string]any{"name": "ab"})
	if got, _ := withDefaults(map[string]any{"type": "object"}, p); string(got) != string(p) {
		require.FailNow(t, "payload rewritten without defaults")
	}
}

func TestCatalogRefusesBadSchemas(t *testing.T) {
	for _, tools := range [][]wire.Tool{
		{{ID: "a"}, {ID: "a"}},
		{{ID: "a", InputSchema: map[string]any{"type": "no-such-type"}}},
		{{ID: "a", OutputSchema: map[string]any{"$ref": "https://example.com/remote.json"}}},
		// Schemas the 2020-12 meta-schema refuses, and references that
		// lead nowhere, do not compile (rather than refuse, or accept,
		// every payload).
		{{ID: "a", InputSchema: map[string]any{"type": "string", "maxLength": int8(-1)}}},
		{{ID: "a", ArgumentsSchema: map[string]any{"type": "object", "required": []any{"a", "a"}}}},
		{{ID: "a", ArgumentsSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "#/$defs/missing"}}}}},
	} {
		if _, err := NewCatalog(tools); err == nil {
			assert.Fail(t, fmt.Sprintf("%+v: compiled", tools))
		}
	}
}
