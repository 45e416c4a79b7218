// Package calllog is Skulk's call event log: every call a host makes
// produces events (started, request, input, output, retry, done, failed,
// cancelled) that can be watched live, given to observers, kept durably in
// a journal and followed by another process across writer restarts.
//
// The host owns a Recorder and, for each call, a Record whose methods it
// calls at each point of the call: Begin (before anything is sent; a
// required journal may refuse the call here), Request (the invoke was
// written), Input (a caller frame), Output (a provider chunk), Retry, and
// End with the outcome — or, from a goroutine that must not block (a
// connection's reader), Finish, with Confirm later on the caller's side for
// a required journal's end barrier. Calls begun with a context carrying a running call
// (Record.Context, Recorder.Program) are its steps: a tree has one log,
// numbered once, and a call's end comes after every step's end. Detached
// starts trees of their own.
//
// Events have a versioned JSON form (Event.MarshalJSON, format 1) specified
// in docs/events.md: the contract other processes read. Stores implement
// EventStore (MemoryStore here; calllog/sqlitestore for an embedded durable
// store); a Follower tails a tree in a store and Replay rebuilds what a
// watcher saw.
//
//	rec, _ := calllog.New(calllog.Options{Journal: &calllog.Journal{Store: store, Required: true}})
//	defer rec.Close(ctx)
//	r, err := rec.Begin(ctx, calllog.CallInfo{ID: id, Tool: "count"})
//	if err != nil { /* refused: do not write the invoke */ }
//	r.Request(calllog.RequestInfo{Child: "c1"})
//	r.Output(chunk)
//	err = r.End(ctx, calllog.OutcomeOf(terminal))
package calllog
