// Package child is Skulk's provider SDK: a Go program that calls Run (or
// Serve) becomes a well-behaved Skulk child. The package speaks the wire
// protocol of docs/protocol.md with the host: it sends hello with the tools'
// descriptors, waits for startup, answers every ping while handlers run,
// serves calls on stream connections, and handles cancel and drain.
//
// A provider is a list of Tools, each with JSON Schemas and a Handler:
//
//	func main() {
//		os.Exit(child.Run(child.Options{Tools: []child.Tool{{
//			ID:          "upper",
//			Description: "Upper-cases each text chunk.",
//			Handler: func(ctx context.Context, s *child.Stream) (frame.Payload, error) {
//				for f, err := range s.Input() {
//					if err != nil {
//						return nil, err // cancelled: the child writes the terminal
//					}
//					text, _ := f.Payload.Text()
//					if err := s.Send(frame.MustPayload(map[string]any{"text": strings.ToUpper(text)}), nil); err != nil {
//						return nil, err
//					}
//				}
//				return nil, nil // completed
//			},
//		}}}))
//	}
//
// # Guarantees
//
// Each call runs its handler on a goroutine of its own. The handler's
// output is numbered from sequence 1 and carries exactly one terminal: the
// handler's return value (or an explicit Stream.Complete or Stream.Fail), or,
// when the call was cancelled first, the terminal of the cause
// (docs/protocol.md §6 item 4). A second terminal is refused to the
// handler with ErrTerminated. A panic becomes failed provider_error; its
// stack goes to the Logger only.
// The call's end is written only after the handler has returned.
//
// Caller frames are checked (shape and sequence fence) before they reach the
// handler, through a queue of 8 frames; while it is full the connection is
// not read, so the caller's writes block. Backpressure never touches the
// control connection: pongs are written by the control reader itself, so no
// handler, full queue or slow socket can delay one.
//
// The handler's context is cancelled when the caller cancels or fails, the
// host sends cancel, the invoke's timeout_ms passes, an invalid caller frame
// arrives, the connection closes, a drain's grace is over, or the host goes
// away; context.Cause says which (ErrCallerCancelled, ErrCancelRequested,
// ErrTimeout, ErrInvalidInput, ErrConnClosed, ErrDrained). A
// handler still running cancel_grace_ms after its cancellation is reported
// stuck: the child writes its terminal, withholds its end until it returns,
// and counts it in pong.stuck.
//
// # Processes
//
// Run takes the control connection from fd 3 and the stream listener from
// fd 4 (SKULK_CONTROL_FD, SKULK_STREAMS_FD) and returns exit status 0 when
// drained or when the host is gone (within a second, without waiting for
// handlers), and 2 with a one-line reason on stderr when started outside a host, when no
// startup arrives within 10 s, or when startup picks a version the child did
// not offer. Serve does the same work over connections the caller provides,
// for tests and in-process use.
package child
