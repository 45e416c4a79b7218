package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/toolschema"
)

// errArgsClosed is what an argument stream's fragment and done return
// after it was completed or aborted (the call's context ended or its
// arguments were refused); it matches ErrSendClosed.
var errArgsClosed = fmt.Errorf("%w: streamed arguments already completed or aborted", ErrSendClosed)

// WithArgumentFragments makes the call's arguments the JSON text fragments
// yields, piece by piece, as a model streams a tool call token by token.
// Call gives no arguments of its own (nil; a payload as well refuses the
// call with a *SchemaError). The call is recorded at once (a started
// event with arguments_streamed, then one arguments event per fragment),
// and Call ranges over fragments; its invoke is written only once the
// range ends and the fragments assemble into one JSON object that passes
// the tool's arguments_schema (defaults filled in). A partial call is
// never executed: fragments that do not assemble, break the schema or grow
// longer in all than the child's max_header end the call refused (a
// *SchemaError, never quoting the arguments), and a ctx that ends first
// ends it cancelled (Call returns ctx's error, joined with a required
// journal's *calllog.JournalError when the end was not confirmed, as
// every path that ends a call does). Call does not return
// before fragments does; fragments should stop once ctx is done. The
// refusals and errors after the arguments are complete are Call's.
func WithArgumentFragments(fragments iter.Seq[string]) CallOption {
	return func(o *callOptions) { o.fragments = fragments }
}

// argumentStream is a call whose arguments arrive as fragments of their
// JSON text (WithArgumentFragments). Its methods are safe for concurrent
// use: the context watch aborts it from another goroutine.
type argumentStream struct {
	h   *Host
	t   *toolschema.Tool
	o   *callOptions
	rec *recorder.Record
	max int // bound on the assembled text's bytes: the child's max_header

	mu       sync.Mutex
	buf      strings.Builder // the fragments so far; bounded by max
	closed   bool            // done, abort, a refusal or the context ended
	aborting bool            // closed by abort: ended and endErr follow
	stop     func() bool     // stops the context watch

	ended  chan struct{} // closed by abort once endErr is set
	endErr error         // the abort's end: a required journal's error or nil
}

// callStreamed is Call with WithArgumentFragments: it records the call,
// ranges over the fragments and then completes the arguments. t is the
// tool (nil: unknown); args must be nil.
func (h *Host) callStreamed(ctx context.Context, tool string, t *toolschema.Tool, args frame.Payload, o *callOptions) (*Call, error) {
	o.streamed = true
	rec, err := h.begin(ctx, tool, t, nil, o)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, h.refuse(ctx, rec, "unknown_tool", frame.CodeInvalidFrame, ErrUnknownTool)
	}
	if args != nil {
		err := &SchemaError{Schema: "arguments", Value: "given whole and as fragments"}
		o.endSpanRefused(err)
		return nil, h.refuse(ctx, rec, "schema", frame.CodeInvalidFrame, err)
	}
	a := &argumentStream{h: h, t: t, o: o, rec: rec, max: int(h.cfg.Limits.MaxHeader), ended: make(chan struct{})}
	a.mu.Lock()
	a.stop = context.AfterFunc(ctx, func() { // runs once, briefly
		a.abort(context.Background(), recorder.Cancelled("context done before the arguments completed"))
	})
	a.mu.Unlock()
	for text := range o.fragments {
		if ctx.Err() != nil {
			break // the fragments after ctx ended are not asked for
		}
		if err := a.fragment(text); err != nil {
			if errors.Is(err, errArgsClosed) {
				return nil, a.cancelled(ctx)
			}
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, a.cancelled(ctx)
	}
	c, err := a.done(ctx)
	if errors.Is(err, errArgsClosed) {
		return nil, a.cancelled(ctx)
	}
	return c, err
}

// cancelled ends the call cancelled because ctx ended before its arguments
// completed (unless the context watch did already), waits until its end
// is recorded and returns ctx's error, joined with a required journal's
// *calllog.JournalError when the end was not confirmed (whichever of the
// two aborted it), as the other cancelled paths do.
func (a *argumentStream) cancelled(ctx context.Context) error {
	jerr := a.abort(context.Background(), recorder.Cancelled("context done before the arguments completed"))
	if errors.Is(jerr, errArgsClosed) {
		a.mu.Lock()
		aborting := a.aborting
		a.mu.Unlock()
		jerr = nil
		if aborting { // the context watch ended it: take its journal's word
			<-a.ended
			jerr = a.endErr
		}
	}
	<-a.rec.Done()
	if jerr != nil {
		return errors.Join(ctx.Err(), jerr)
	}
	return ctx.Err()
}

// fragment appends a fragment of the arguments' JSON text; it is recorded
// as an arguments event. Nothing is parsed or sent before done. Arguments
// longer in all than the child's max_header end the call refused (a
// *SchemaError). After done or abort it returns errArgsClosed.
func (a *argumentStream) fragment(text string) error {
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

// done completes the arguments: the fragments must assemble into one JSON
// object that passes the tool's arguments_schema (defaults filled in, as
// Call does); only then is the invoke written, and the running Call is
// returned, governed by ctx as Call's is. Otherwise the call ends refused
// and done returns a *SchemaError (never quoting the arguments); the
// provider never runs. Refusals and errors after the arguments are
// complete are Call's (ErrPoolDown, a *frame.Error, ...).
func (a *argumentStream) done(ctx context.Context) (*Call, error) {
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

// abort ends the call cancelled with o before its arguments completed: no
// invoke is ever written. It returns a required journal's
// *calllog.JournalError when the end was not confirmed, errArgsClosed
// after done or abort.
func (a *argumentStream) abort(ctx context.Context, o calllog.Outcome) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return errArgsClosed
	}
	a.closeLocked()
	a.aborting = true
	a.mu.Unlock()
	a.o.endSpanRefused(context.Canceled) // cancelled before its invoke
	a.endErr = endWith(ctx, a.rec, o, nil)
	close(a.ended)
	return a.endErr
}

// closeLocked marks the arguments closed and stops the context watch; mu
// is held. The watch, if it is running, finds closed set and does nothing.
func (a *argumentStream) closeLocked() {
	a.closed = true
	if a.stop != nil {
		a.stop()
	}
}
