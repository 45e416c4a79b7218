package asif

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaJSON is the official ASIF 0.5 session schema
// (OndagoAI/agent-session-interchange-format, MIT licence), embedded
// unchanged.
//
//go:embed session.schema.json
var schemaJSON []byte

// schemaID is the $id of the embedded schema.
const schemaID = "urn:asif:0.5:session"

// compiledSchema compiles the embedded schema once; the compiled *Schema is
// immutable and safe for concurrent Validate calls.
var compiledSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, fmt.Errorf("asif: embedded schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(ecmaRegexp)
	if err := c.AddResource(schemaID, doc); err != nil {
		return nil, fmt.Errorf("asif: embedded schema: %w", err)
	}
	return c.Compile(schemaID)
})

// endOfInput is the ECMA-262 idiom the schema uses for "end of the whole
// string" (a negative lookahead for any character). RE2 has no lookahead but
// has \z with exactly that meaning.
const endOfInput = `(?![\s\S])`

// ecmaRegexp compiles the schema's patterns with Go's RE2 after rewriting
// the one lookahead idiom the schema uses. Any other lookaround fails to
// compile, so an unsupported pattern is found when the schema is compiled,
// not silently ignored. (Go's $ without the m flag already means end of
// text, as in ECMA-262.)
func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	return regexp.Compile(strings.ReplaceAll(s, endOfInput, `\z`))
}

// validateSchema checks a decoded document against the embedded schema.
func validateSchema(doc any) error {
	sch, err := compiledSchema()
	if err != nil {
		return err
	}
	err = sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("asif: schema validation: %T", err)
	}
	var all []Violation
	seen := map[Violation]bool{}
	collectLeaves(ve, &all, seen)
	sort.SliceStable(all, func(i, j int) bool {
		return all[i].InstanceLocation < all[j].InstanceLocation
	})
	se := &SchemaError{Total: len(all)}
	if len(all) > MaxViolations {
		all = all[:MaxViolations]
	}
	se.Violations = all
	return se
}

// collectLeaves gathers the deepest causes: they name the precise keyword
// that failed, where the parents only say "allOf failed".
func collectLeaves(ve *jsonschema.ValidationError, out *[]Violation, seen map[Violation]bool) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectLeaves(c, out, seen)
		}
		return
	}
	v := Violation{InstanceLocation: pointer(ve.InstanceLocation), Keyword: keyword(ve)}
	if !seen[v] {
		seen[v] = true
		*out = append(*out, v)
	}
}

func keyword(ve *jsonschema.ValidationError) string {
	if ve.ErrorKind == nil {
		return "unknown"
	}
	path := ve.ErrorKind.KeywordPath()
	if len(path) == 0 {
		return "schema"
	}
	return path[0]
}

// pointer renders an instance location as an RFC 6901 JSON Pointer.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}
