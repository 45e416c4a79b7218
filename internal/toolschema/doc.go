// Package toolschema is the host's JSON Schema engine for tool schemas: it
// compiles the schemas of a child's tools (NewCatalog, from the child's
// hello), fills in argument defaults (Tool.WithDefaults) and checks
// payloads against a tool's arguments, input, output and result schemas
// (Validator.Validate).
//
// Schemas are JSON Schema 2020-12 with no external references. Every
// refusal and its explanation come from github.com/santhosh-tekuri/jsonschema;
// a shortcut that reads MessagePack directly accepts most valid payloads
// of the keywords tool schemas mostly use without decoding them (fastNode),
// and falls back to the library whenever it cannot tell. A refusal is an
// *Error that names the schema, the field and the keyword and describes
// the value by its JSON type and size, never by its content.
package toolschema
