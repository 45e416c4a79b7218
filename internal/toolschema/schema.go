package toolschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// Error reports a payload that breaks one of a tool's schemas. It names
// the schema, the field (a JSON pointer into the payload, "" for the whole
// payload), the keyword that failed and what the value is (its JSON type
// and size), never the value itself, so it is safe to log. host gives it
// to its callers as a *host.SchemaError, a type with the same fields.
type Error struct {
	// Schema is "arguments", "input", "output" or "result".
	Schema string
	// Field is the JSON pointer of the offending value ("/options/level");
	// "" means the payload itself.
	Field string
	// Keyword is the JSON Schema keyword that failed ("type", "minimum",
	// "required", …); "" when the payload could not be read at all.
	Keyword string
	// Value describes the offending value: its JSON type and size
	// ("string of 12 bytes", "array of 3 items", "number").
	Value string
}

// Error describes the refusal without a package prefix (host adds its own).
func (e *Error) Error() string {
	field := e.Field
	if field == "" {
		field = "(root)"
	}
	s := e.Schema + " payload breaks its schema at " + field
	if e.Keyword != "" {
		s += " (" + e.Keyword + ")"
	}
	if e.Value != "" {
		s += ": got " + e.Value
	}
	return s
}

// Catalog is the compiled tool list of one child. It is immutable once
// built and safe for concurrent use.
type Catalog struct {
	list  []wire.Tool
	tools map[string]*Tool
}

// Tool is one tool with its compiled schemas. It is immutable and safe for
// concurrent use.
type Tool struct {
	// Desc is the tool as the child described it.
	Desc wire.Tool
	// Arguments, Input, Output and Result are the tool's compiled schemas;
	// nil (the tool has none) accepts any object.
	Arguments, Input, Output, Result *Validator

	defaults *argDefaults // of the arguments schema
}

// Validator is one compiled schema: the JSON Schema library's, which
// decides every refusal and explains it, and the shortcut that accepts
// most valid payloads without decoding them (see fastNode). A nil
// *Validator accepts any object.
type Validator struct {
	which     string    // the schema's name in an Error: "arguments", "input", "output", "result"
	src       []byte    // the schema as JSON
	fast      *fastNode // nil: the schema is outside fastNode's subset
	anyObject bool      // every object is valid: nothing to check

	// The library's compiled schema, which decides whatever the shortcut
	// does not accept (and explains why). A schema outside the subset is
	// compiled by newValidator; one inside it only when first needed, as
	// most payloads never need it and compiling each schema would add to
	// a child's start (compileFast refuses every schema of the
	// subset the library would not compile, see wellFormedValue).
	libOnce sync.Once
	lib     *jsonschema.Schema
	libErr  error
}

// newValidator compiles schema s, named which in its errors.
func newValidator(which string, s map[string]any) (*Validator, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	v := &Validator{which: which, src: raw}
	if fast, ok := compileFast(map[string]any(s), 0); ok {
		v.fast = fast
		v.anyObject = fast.anyObject()
		return v, nil
	}
	lib, err := compileSchema(raw)
	if err != nil {
		return nil, err
	}
	v.libOnce.Do(func() { v.lib = lib })
	return v, nil
}

// library returns the library's compiled schema, compiling it on first use.
func (v *Validator) library() (*jsonschema.Schema, error) {
	v.libOnce.Do(func() { v.lib, v.libErr = compileSchema(v.src) })
	return v.lib, v.libErr
}

// NewCatalog compiles the schemas of tools, a child's hello. Its error
// (a duplicate id, a schema that does not compile) names the tool by
// index and the schema by its key, never the schema's content.
func NewCatalog(tools []wire.Tool) (*Catalog, error) {
	c := &Catalog{list: tools, tools: make(map[string]*Tool, len(tools))}
	for i := range tools {
		d := tools[i]
		if _, dup := c.tools[d.ID]; dup {
			return nil, fmt.Errorf("tools[%d]: duplicate id", i)
		}
		t := &Tool{Desc: d, defaults: newArgDefaults(d.ArgumentsSchema)}
		for _, s := range []struct {
			key, which string
			src        map[string]any
			dst        **Validator
		}{
			{"arguments_schema", "arguments", d.ArgumentsSchema, &t.Arguments}, {"input_schema", "input", d.InputSchema, &t.Input},
			{"output_schema", "output", d.OutputSchema, &t.Output}, {"result_schema", "result", d.ResultSchema, &t.Result},
		} {
			if s.src == nil {
				continue
			}
			sch, err := newValidator(s.which, s.src)
			if err != nil {
				return nil, fmt.Errorf("tools[%d].%s does not compile", i, s.key)
			}
			*s.dst = sch
		}
		c.tools[d.ID] = t
	}
	return c, nil
}

// List returns the tools as the child described them. The slice is
// shared: do not modify it.
func (c *Catalog) List() []wire.Tool { return c.list }

// Tool returns the tool named id, or nil when there is none.
func (c *Catalog) Tool(id string) *Tool { return c.tools[id] }

// WithDefaults returns args with the arguments left out that have a
// "default" in the arguments schema filled in, at the top level and
// inside nested objects the schema describes with "properties": args
// itself when nothing is missing. Its error is an *Error for arguments
// that cannot be read.
func (t *Tool) WithDefaults(args frame.Payload) (frame.Payload, error) {
	return t.defaults.apply(args)
}

// compileSchema compiles a schema decoded from MessagePack, given as JSON
// so that the compiler sees its own value model (json.Number). Only the
// schema itself is loaded: references to other documents fail to compile.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const url = "skulk:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// noLoader refuses every external reference.
type noLoader struct{}

func (noLoader) Load(string) (any, error) {
	return nil, errors.New("external schema references are not loaded")
}

// instance converts a payload to the validator's value model.
func instance(p frame.Payload) (any, error) {
	if p == nil {
		return map[string]any{}, nil
	}
	m, err := p.Map()
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Validate checks p, a checked payload (nil means {}), against v; a nil v
// accepts anything. Its error is an *Error. Payloads the shortcut accepts
// are valid; the library decides on the others.
func (v *Validator) Validate(p frame.Payload) error {
	if v == nil || v.anyObject {
		return nil
	}
	if v.fast != nil && v.fast.accepts(p) {
		return nil
	}
	return v.validateLib(p)
}

// validateLib checks p against the library's compiled schema.
func (v *Validator) validateLib(p frame.Payload) error {
	sch, err := v.library()
	if err != nil {
		// Not reached: compileFast takes only schemas the library compiles.
		return &Error{Schema: v.which, Value: "schema does not compile"}
	}
	inst, err := instance(p)
	if err != nil {
		return &Error{Schema: v.which, Value: "unreadable payload"}
	}
	return schemaError(v.which, inst, sch.Validate(inst))
}

// schemaError turns a validator error into an *Error that describes
// the value without printing it.
func schemaError(which string, v any, err error) error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Error{Schema: which, Value: describe(v)}
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	loc := leaf.InstanceLocation
	keyword := ""
	if kp := leaf.ErrorKind.KeywordPath(); len(kp) > 0 {
		keyword = kp[len(kp)-1]
	}
	switch k := leaf.ErrorKind.(type) {
	case *kind.Required:
		if len(k.Missing) > 0 {
			return &Error{Schema: which, Field: pointer(append(loc[:len(loc):len(loc)], k.Missing[0])), Keyword: "required", Value: "nothing"}
		}
	case *kind.AdditionalProperties:
		if len(k.Properties) > 0 {
			name := k.Properties[0]
			loc = append(loc[:len(loc):len(loc)], name)
			return &Error{Schema: which, Field: pointer(loc), Keyword: "additionalProperties", Value: describe(lookup(v, loc))}
		}
	}
	return &Error{Schema: which, Field: pointer(loc), Keyword: keyword, Value: describe(lookup(v, loc))}
}

// maxFieldToken bounds each token of a field pointer in an error, so a
// peer's huge key cannot blow up a log line.
const maxFieldToken = 64

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if len(t) > maxFieldToken {
			cut := maxFieldToken
			for cut > 0 && !utf8.RuneStart(t[cut]) {
				cut--
			}
			t = t[:cut] + "…"
		}
		t = strings.ReplaceAll(t, "~", "~0")
		t = strings.ReplaceAll(t, "/", "~1")
		b.WriteString("/")
		b.WriteString(t)
	}
	return b.String()
}

func lookup(v any, tokens []string) any {
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			v = x[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// describe names v's JSON type and size.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string of " + strconv.Itoa(len(x)) + " bytes"
	case []any:
		return "array of " + strconv.Itoa(len(x)) + " items"
	case map[string]any:
		return "object of " + strconv.Itoa(len(x)) + " keys"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "integer"
	case float32, float64, json.Number:
		return "number"
	}
	return "value"
}

// withDefaults fills the arguments left out that have a "default" in the
// arguments schema, at the top level and inside nested objects the schema
// describes with "properties". It returns args unchanged when nothing is
// missing.
func withDefaults(schema map[string]any, args frame.Payload) (frame.Payload, error) {
	if schema == nil {
		return args, nil
	}
	m, err := args.Map()
	if err != nil {
		return nil, &Error{Schema: "arguments", Value: "unreadable payload"}
	}
	if m == nil {
		m = map[string]any{}
	}
	if !fillDefaults(schema, m, 0) && args != nil {
		return args, nil
	}
	p, err := frame.PayloadOf(m)
	if err != nil {
		return nil, &Error{Schema: "arguments", Value: "unencodable payload"}
	}
	return p, nil
}

// maxDefaultDepth bounds how deep withDefaults descends into nested objects.
const maxDefaultDepth = 32

func fillDefaults(schema map[string]any, m map[string]any, depth int) bool {
	if depth > maxDefaultDepth {
		return false
	}
	props, _ := schema["properties"].(map[string]any)
	changed := false
	for name, ps := range props {
		sub, ok := ps.(map[string]any)
		if !ok {
			continue
		}
		cur, present := m[name]
		if !present {
			if d, ok := sub["default"]; ok {
				m[name] = d
				changed = true
			}
			continue
		}
		if obj, ok := cur.(map[string]any); ok {
			if fillDefaults(sub, obj, depth+1) {
				changed = true
			}
		}
	}
	return changed
}
