// Package calllog is the read side of Skulk's call event log: every call a
// host makes produces events (started, request, input, output, retry,
// arguments, done, failed, cancelled) that can be watched live
// (host.Call.Events), given to observers, kept durably in a journal and
// followed by another process across writer restarts.
//
// Only the host writes events; this package has no method that appends
// one to a host's log. A host is configured with Options
// (host.Config.CallLog): its observers (Observer), its journal (Journal,
// over an EventStore such as calllog/sqlitestore's) and what they are
// given of payloads (Options.FullContent). Programs and calls may add
// observers of their own (host.WithObservers).
//
// Events have a versioned JSON form (Event.MarshalJSON, format 1) specified
// in docs/events.md: the contract other processes read. Follow tails a
// tree in a store, showing gaps and writer takeovers; Events reads a kept
// tree a page at a time; TakeOver lets a new writer continue a tree whose
// writer died. An event a store cannot read is a *CorruptEventError
// (ErrFormat): a loss of that event, which readers show and read past.
// Stores implement EventStore; calllog/calllogtest checks the store rules.
// skulk-host replay rebuilds what each call's caller saw from a kept tree.
//
//	st, _ := sqlitestore.Open("calls.db")
//	h, _ := host.Start(ctx, host.Config{Command: "skulk-child",
//		CallLog: calllog.Options{Journal: &calllog.Journal{Store: st, Required: true}}})
//	// ... calls ...
//	for e, err := range calllog.Follow(ctx, st, tree, 0, 0) { ... }
package calllog
