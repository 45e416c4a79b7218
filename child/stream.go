package child

import (
	"context"
	"iter"

	"github.com/skulkrt/skulk/frame"
)

// Stream is a handler's view of one call: the invoke, the caller's frames,
// and the provider's output.
//
// Send, Complete, Fail and Flush are safe for concurrent use; frames go out
// in the order the calls take effect. Input must be ranged over by one
// goroutine at a time. A Stream must not be used after its handler returned.
type Stream struct {
	cl *call
}

// CallID returns the call's id.
func (s *Stream) CallID() string { return s.cl.inv.CallID }

// ToolID returns the id of the tool called.
func (s *Stream) ToolID() string { return s.cl.inv.ToolID }

// Tree returns the id of the call tree the call belongs to (the call's
// own id for a call that is a tree of its own), the id the host's call
// log and the child's log lines name it by. The call's deadline is its
// context's, and the invoke's trace context is in that context too.
func (s *Stream) Tree() string { return treeOf(s.cl.inv) }

// Arguments returns the call's arguments, a JSON object as a Payload.
// Arguments().Decode(&v) decodes them into v, a struct whose `json` tags
// name the fields or a map; fields the arguments leave out keep the values
// v had.
func (s *Stream) Arguments() frame.Payload { return s.cl.inv.Arguments }

// Input returns the caller's chunks, in order, as they arrive. Each frame is
// the handler's to keep. The sequence ends without an error when the caller
// completed its direction (a half-close: the handler's output goes on); it
// ends with one (zero Frame, error) pair when the call is cancelled, the
// error being the cause (context.Cause of the handler's context).
//
// Caller frames wait in a queue of 8; while it is full the child stops
// reading the connection and the caller's writes block, so a handler that
// does not read its input slows its caller down and nothing else.
func (s *Stream) Input() iter.Seq2[frame.Frame, error] {
	cl := s.cl
	return func(yield func(frame.Frame, error) bool) {
		for {
			if cl.ctx.Err() != nil {
				yield(frame.Frame{}, context.Cause(cl.ctx))
				return
			}
			// A frame already queued (or the queue closed) is taken
			// without the context's Done channel, which costs an
			// allocation the first time.
			var f frame.Frame
			var ok bool
			select {
			case f, ok = <-cl.in:
			default:
				select {
				case f, ok = <-cl.in:
				case <-cl.ctx.Done():
					yield(frame.Frame{}, context.Cause(cl.ctx))
					return
				}
			}
			if !ok || !yield(f, nil) {
				return
			}
		}
	}
}

// CallerResult returns the payload of the caller's completed frame, or nil
// when it had none or the caller has not completed yet. It is meaningful
// once Input ended without an error.
func (s *Stream) CallerResult() frame.Payload {
	s.cl.mu.Lock()
	defer s.cl.mu.Unlock()
	return s.cl.callerResult
}

// Send sends one chunk carrying payload, media, or both (at least one; media
// is *frame.InlineMedia or *frame.BlobMedia). The child numbers it.
//
// Send blocks while the connection does not take the bytes (backpressure).
// It returns once the frame is queued for the connection, its payload
// encoded into the connection's queue (so the caller may reuse the
// payload's bytes for the next chunk), and, for inline media, once the
// media bytes are written or copied into the queue (up to 16 KiB, where
// they leave with the frames around them), so the caller may reuse them.
// A Send blocked by backpressure returns the cancellation cause as soon
// as the call is cancelled (docs/protocol.md §6 item 5: a cancel acts
// while the connection is blocked). Nothing is sent then, except a chunk of inline
// media whose bytes are already being written: that chunk still goes out
// whole, from the child's own copy of the bytes not yet written, so the
// media's buffer is the handler's again when Send returns either way.
//
// Errors: an error matching frame.ErrInvalid for a chunk that breaks the
// frame rules (nothing is sent); ErrTerminated after the call's terminal;
// the cancellation cause (ErrCallerCancelled, ErrTimeout, ...) once the
// handler's context is done; a wire length error for a chunk over the
// limits; the connection's error once it failed.
func (s *Stream) Send(payload frame.Payload, media frame.Media) error {
	return s.cl.write(frame.Frame{Kind: frame.KindChunk, Payload: payload, Media: media}, false)
}

// Complete ends the call successfully with an optional result (nil for
// none). The handler may go on cleaning up; what it returns is then
// ignored. Errors are Send's; a second terminal gives ErrTerminated.
func (s *Stream) Complete(result frame.Payload) error {
	return s.cl.write(frame.Frame{Kind: frame.KindCompleted, Payload: result}, false)
}

// Fail ends the call with err as its failure, as a handler returning err
// would: a *frame.Error keeps its code, any other error becomes
// provider_error with the error's text, sanitized (so it must not carry
// secrets). Errors are Send's; a second terminal gives ErrTerminated.
func (s *Stream) Fail(err error) error {
	if err == nil {
		err = &frame.Error{Code: frame.CodeProviderError, Message: "failed"}
	}
	return s.cl.write(errorFrame(err), false)
}

// Flush waits until every frame sent so far has been written to the
// connection, and returns the connection's error if there was one.
func (s *Stream) Flush() error { return s.cl.c.w.Flush() }
