package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/toolschema"
)

// errArgsClosed is returned by ArgumentStream.Fragment and Done after Done
// or Abort (or after the call's context ended or its arguments were
// refused); it matches ErrSendClosed.
var errArgsClosed = fmt.Errorf("%w: streamed arguments already completed or aborted", ErrSendClosed)

// ArgumentStream is a call whose arguments arrive as fragments of their JSON
// text, as a model streams a tool call token by token. It is in the call
// log from StreamArguments on (a started event with arguments_streamed, then
// one arguments event per fragment); its invoke is written only by Done,
// once the fragments assemble into one JSON object that passes the tool's
// arguments_schema. A partial call is never executed.
//
// An ArgumentStream must end with Done or Abort; if its context ends first it
// ends cancelled by itself. Its methods are safe for concurrent use.
type ArgumentStream struct {
	h   *Host
	t   *toolschema.Tool
	o   *callOptions
	rec *recorder.Record
	max int // bound on the assembled text's bytes: the child's max_header

	mu     sync.Mutex
	buf    strings.Builder // the fragments so far; bounded by max
	closed bool            // Done, Abort, a refusal or the context ended
	stop   func() bool     // stops the context watch
}

// StreamArguments begins a call of tool whose arguments will arrive as
// fragments (ArgumentStream.Fragment), completed by ArgumentStream.Done. The call is
// recorded at once (a step of the running call of ctx, if any; opts as for
// Call). An unknown tool is refused here (ErrUnknownTool, recorded as
// refused); so is a start a required journal did not keep. ctx bounds the
// streaming of the arguments: once it is done before Done, the call ends
// cancelled.
func (h *Host) StreamArguments(ctx context.Context, tool string, opts ...CallOption) (*ArgumentStream, error) {
	t, err := h.lookupTool(tool)
	if err != nil {
		return nil, err
	}
	o := gatherOptions(opts)
	o.streamed = true
	rec, err := h.begin(ctx, tool, t, nil, o)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, h.refuse(ctx, rec, "unknown_tool", frame.CodeInvalidFrame, ErrUnknownTool)
	}
	a := &ArgumentStream{h: h, t: t, o: o, rec: rec, max: int(h.cfg.Limits.MaxHeader)}
	a.mu.Lock()
	a.stop = context.AfterFunc(ctx, func() { // runs once, briefly
		a.abort(context.Background(), recorder.Cancelled("context done before the arguments completed"))
	})
	a.mu.Unlock()
	return a, nil
}

// ID returns the call's id (its invoke's call_id once Done writes it).
func (a *ArgumentStream) ID() string { return a.rec.ID() }

// Fragment appends a fragment of the arguments' JSON text; it is recorded
// as an arguments event. Nothing is parsed or sent before Done. Arguments
// longer in all than the child's max_header end the call refused (a
// *SchemaError). After Done or Abort it returns an error matching ErrSendClosed.
func (a *ArgumentStream) Fragment(text string) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return errArgsClosed
	}
	if a.buf.Len()+len(text) > a.max {
		a.closeLocked()
		a.mu.Unlock()
		err := &SchemaError{Schema: "arguments", Value: "longer than the child's max_header"}
		a.o.endSpanRefused(err)
		return a.h.refuse(context.Background(), a.rec, "schema", frame.CodeInvalidFrame, err)
	}
	a.buf.WriteString(text)
	a.rec.Arguments(text) // under mu: fragments are recorded in the order they were given
	a.mu.Unlock()
	return nil
}

// Done completes the arguments: the fragments must assemble into one JSON
// object that passes the tool's arguments_schema (defaults filled in, as
// Call does); only then is the invoke written, and the running Call is
// returned, governed by ctx as Call's is. Otherwise the call ends refused
// and Done returns a *SchemaError (never quoting the arguments); the
// provider never runs. Refusals and errors after the arguments are
// complete are Call's (ErrPoolDown, a *frame.Error, ...).
func (a *ArgumentStream) Done(ctx context.Context) (*Call, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errArgsClosed
	}
	a.closeLocked()
	text := a.buf.String()
	a.mu.Unlock()
	var args frame.Payload
	var err error
	if !json.Valid([]byte(text)) {
		err = &SchemaError{Schema: "arguments", Value: "fragments do not assemble into one JSON value"}
	} else if args, err = frame.PayloadOf(json.RawMessage([]byte(text))); err != nil {
		err = &SchemaError{Schema: "arguments", Value: "not a JSON object"}
	} else {
		args, err = checkArguments(a.t, args)
	}
	if err != nil {
		a.o.endSpanRefused(err)
		return nil, a.h.refuse(ctx, a.rec, "schema", frame.CodeInvalidFrame, err)
	}
	return a.h.dispatch(ctx, a.rec, a.t, args, a.o)
}

// Abort ends the call cancelled before its arguments completed: no invoke
// is ever written. reason is kept in the log (it must not hold user data).
// It returns a required journal's *calllog.JournalError when the end was
// not confirmed; after Done or Abort it returns an error matching ErrSendClosed.
func (a *ArgumentStream) Abort(reason string) error {
	return a.abort(context.Background(), recorder.Cancelled(reason))
}

func (a *ArgumentStream) abort(ctx context.Context, o calllog.Outcome) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return errArgsClosed
	}
	a.closeLocked()
	a.mu.Unlock()
	a.o.endSpanRefused(context.Canceled) // cancelled before its invoke
	return endWith(ctx, a.rec, o, nil)
}

// closeLocked marks the arguments closed and stops the context watch; mu
// is held. The watch, if it is running, finds closed set and does nothing.
func (a *ArgumentStream) closeLocked() {
	a.closed = true
	if a.stop != nil {
		a.stop()
	}
}
