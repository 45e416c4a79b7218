// Package asif reads and checks ASIF 0.5 session documents (Agent
// Session Interchange Format, a public JSON format for captured agent
// sessions), with the asif.streams/0.1 and asif.external-bindings/0.1
// features. Skulk uses it to hand over captured call evidence — including
// calls whose arguments were still streaming, or that began before the
// capture — in a format other tools read.
//
// # Checking
//
// Check refuses a document in layers, each with its own error type:
//
//   - strict JSON (*ReadError): input over MaxDocumentBytes, nesting over
//     MaxDepth, more than MaxValues values, duplicate object keys, NaN and
//     Infinity, invalid UTF-8 and unpaired surrogate escapes; numbers keep
//     their exact text (json.Number);
//   - version (*VersionError): asif_version must be "0.5"; other drafts
//     are refused, never reinterpreted;
//   - the official JSON Schema, embedded in the binary (*SchemaError,
//     violations by instance location and keyword, never values);
//   - the semantic rules the schema cannot express (*RuleError, one per
//     refusal, all of them joined with errors.Join): resource integrity,
//     references among events, branches and checkpoints, tool-call
//     progression, task revisions and dependencies, streams and external
//     bindings. Each Rule constant is also the sentinel for errors.Is.
//
// Some rule families of ASIF 0.5 are not checked (UncheckedFamilies:
// contexts, configurations, executions, decisions and others). A document
// that holds their records lists them in Report.Unchecked and is not
// established valid even when nothing is refused: Report.Valid(err) says
// whether it is.
//
// A document that reaches the semantic layer yields a *Report: every
// stream's Assembly (contiguous prefix bytes, status, whether it may be used
// as an executable call), each branch's selected call states, and the
// unchecked families present.
//
//	report, err := asif.Check(data, asif.Options{})
//	var re *asif.RuleError
//	if errors.As(err, &re) {
//		fmt.Println(re.Rule, re.ObjectID) // first refusal; err holds all
//	}
//	if report != nil {
//		for _, s := range report.Streams {
//			fmt.Println(s.StreamID, s.Status, s.Size, s.Executable)
//		}
//	}
//
// # Writing
//
// Package asif/export writes Skulk's call trees as session documents, and
// checks each with Check before returning it.
//
// Nothing in this package executes tools, fetches external references or
// synthesizes events: an external binding is reported as such (CallState
// External), never as a local call event.
package asif
