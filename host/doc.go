// Package host is Skulk's supervisor: it starts provider children, keeps
// them healthy, and drives streaming calls to them over Unix sockets, as
// docs/protocol.md describes for the host side.
//
// # Processes
//
// Start runs Config.PoolSize children of Config.Command at once, each in
// its own process group with a private 0700 directory holding its stream
// listener (fd 4) and a control socketpair (fd 3), and completes each
// handshake (hello, then startup) before it returns; the first child that
// fails to start fails Start, and the others are stopped. The children's
// stdout and stderr are forwarded line by line to Config.Logger, tagged
// with the child's id and pid; the last 64 KiB of stderr ride along on the
// error of any call that fails because its child died.
//
// Each child with calls in flight is pinged every Config.HealthInterval, an
// idle one every Config.IdleHealthInterval and as soon as a call is routed
// to it (docs/operations.md, Health). A child that answers no
// ping within Config.HealthTimeout, whose control connection ends, or whose
// process exits is dead: every call in flight on it gets a synthetic failed
// unreachable (after the frames the child wrote before it exited: its
// stream connections are read to EOF first, for 500 ms at most; a child
// that stopped answering is cut off at once), its process group gets
// SIGTERM then SIGKILL, and it is
// restarted under Config.Restart (exponential backoff with jitter, giving
// up after too many restarts in a window; a pool whose every slot gave up
// refuses calls with ErrPoolDown). A child whose pong reports stuck
// handlers is recycled gracefully (drain, then a fresh child). Close
// drains every child, then SIGTERM, then SIGKILL; it reaps every process
// and removes every directory.
//
// # Calls
//
// Host.Call validates the arguments against the tool's arguments_schema
// (filling in defaults), takes a stream slot on the least loaded child
// (never more than its max_streams; further calls wait, bounded by their
// context), writes the invoke on an idle or new stream connection and
// returns a *Call. The caller sends input with Call.Send and Call.CloseSend
// and reads the output with Call.Recv, Call.Frames or Call.Wait: the
// provider's started (sequence 0), its chunks, exactly one terminal, then
// io.EOF. Output is flow-controlled: at most 64 frames (and 16 MiB of
// payload and media) wait for a caller that does not read, then the
// connection is not read and the child's writes block.
//
// Every provider frame is checked (shape, sequence fence, output and result
// schemas). Whatever goes wrong, the caller still gets exactly one
// terminal: one the host makes up (frame.Frame.Synthetic) when the
// provider broke the protocol (invalid_frame), the stream broke
// (transport_error), the child died (unreachable), the deadline plus
// CancelGrace plus 1 s passed (timeout), or a cancel got no answer
// (cancelled). A synthetic terminal's sequence follows the last frame the
// caller was given.
//
// A Call's context works as exec.CommandContext's: its deadline becomes
// the invoke's timeout_ms, and cancelling it cancels the call. A call
// whose input is known when it is made (or is empty) is best made
// WithInput: its input goes with the invoke in one write, the child
// answers it without switching goroutines, and the caller's Recv reads
// the answer from the connection itself. Until the caller reads, the
// answer waits in the connection; Cancel, the context and the deadline
// still end the call as they come.
//
//	h, err := host.Start(ctx, host.Config{Command: "skulk-child"})
//	if err != nil { ... }
//	defer h.Close(ctx)
//	c, err := h.Call(ctx, "count", frame.MustPayload(map[string]any{"n": 3}))
//	if err != nil { ... } // ErrUnknownTool, *SchemaError, ErrPoolDown, ...
//	for f, err := range c.Frames() { ... }
//
// # The call log
//
// Every call, refused ones included, is recorded in the host's call log
// (Config.CallLog; docs/events.md): started, request, input, output, the
// end, each event naming the tool version that answered. Only the host
// writes it; package calllog has its read side. Call.Events and Call.Wait
// watch one call. Host.Program runs Go code whose calls (made
// with the context it is given) are its steps, in one tree; Detached
// starts trees of their own. Observers (the host's, a program's, a
// call's: WithObservers) add up and never slow a call; Host.FlushObservers waits
// for them. With a required journal a call whose start is not kept is
// refused before its invoke is written (calllog.ErrJournalStart), and an
// end that is not confirmed reaches the caller as a *calllog.JournalError
// after the terminal (calllog.ErrJournalEnd; its JournalError.Kept says later
// whether it was kept).
// A call made WithArgumentFragments takes its arguments as fragments of
// their JSON text: its invoke is written only once they assemble into valid
// arguments.
//
// # Errors
//
// Refusals come back from Call before anything is sent: ErrUnknownTool, a
// *SchemaError (the schema, the field as a JSON pointer, the keyword; see
// its Example), ErrPoolDown, ErrClosed. A call that ended otherwise than
// completed gives Wait a *frame.Error carrying the frame.Code, whether it is
// synthetic, and the stderr tail when the child died. Messages name fields
// and describe values (type, size), never print them.
package host
