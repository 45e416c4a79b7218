// Package export turns a kept Skulk call tree — the calllog events of one
// tree, read from a journal that kept full content — into an ASIF 0.5
// session document, so that what happened in the calls can be
// handed to someone else in a format other tools read.
//
// Every call becomes a tool_call event; every provider result a tool_result
// (a chunk that carries more than text, the streamed text of an attempt, and
// the terminal outcome); the text of an attempt's chunks is a
// tool_result_text stream over embedded resources; arguments that arrived as
// fragments are a tool_arguments stream. Whatever ASIF cannot carry is
// recorded as a loss, and nothing is invented: a call that began before the
// exported window is an external binding, never a local call event.
//
//	events, _ := store.EventsAfter(ctx, tree, 0, limit)
//	session, err := export.Export(events, export.Options{After: 40})
//	if err != nil { ... }
//	os.WriteFile("tree.asif.json", session.JSON, 0o644) // passed asif.Check
//
// docs/asif.md ("Exporting Skulk calls") describes the mapping and the losses.
package export
