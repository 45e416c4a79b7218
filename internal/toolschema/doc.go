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
//
// The host and the child (its Call.Send checks the input of calls to host
// tools) use this one engine, so their refusals agree. What the engine
// must give is what the tests hold it to: the keyword and the instance
// location of a failure as values (an array item's index, a key only
// additionalProperties describes), schemas the 2020-12 meta-schema
// refuses and references that lead nowhere refused at compile time. The
// library's init compiles every draft's meta-schema in every process that
// links this package, a child's start among them; docs/performance.md
// ("Start to first call") measures that cost and the engines with no such
// init that fall short of the above.
package toolschema
