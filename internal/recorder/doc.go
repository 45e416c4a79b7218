// Package recorder is the write side of the call log (package calllog,
// docs/events.md): the only code that numbers and appends events. Package
// host owns a Recorder and, for each call, a Record whose methods it calls
// at each point of the call: Begin (before anything is sent; a required
// journal may refuse the call here), Request (the invoke is written),
// Input (a caller frame), OutputAt (a provider chunk), Retry, Arguments,
// and End with the outcome — or, from a goroutine that must not block (a
// connection's reader), Finish, with Confirm later on the caller's side for
// a required journal's end barrier. Calls begun with a context carrying a
// running call (Record.Context, Recorder.Program) are its steps: a tree has
// one log, numbered once, and a call's end comes after every step's end.
// Detached starts trees of their own.
//
// It is internal so that no code outside the module can write an event:
// what the log shows is what the host did. Users configure it through
// host.Config.CallLog (a calllog.Options) and read it through
// calllog's types.
//
//	rec, _ := recorder.New(calllog.Options{Journal: &calllog.Journal{Store: store, Required: true}}, nil)
//	defer rec.Close(ctx)
//	r, err := rec.Begin(ctx, recorder.CallInfo{ID: id, Tool: "count"})
//	if err != nil { /* refused: do not write the invoke */ }
//	r.Request(recorder.RequestInfo{Child: "c1"})
//	r.Output(chunk)
//	err = r.End(ctx, recorder.OutcomeOf(terminal))
package recorder
