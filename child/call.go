package child

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/internal/spanctx"
	"github.com/skulkrt/skulk/wire"
	"go.opentelemetry.io/otel/trace"
)

// The keys of the attributes that every log record about a call carries,
// the host's too (docs/operations.md, "Logs").
const (
	logCallID = "call_id"
	logTreeID = "tree_id"
)

// treeOf returns the id of inv's call tree: the invoke's Tree, or the
// call's own id for a call that is its own tree (no Tree given).
func treeOf(inv *wire.Invoke) string {
	if inv.Tree != "" {
		return inv.Tree
	}
	return inv.CallID
}

// call is one call on a stream connection.
//
// The connection's reader owns the ingress side (push, closeInput); the
// runner (below: whichever goroutine calls run, the connection's runner or,
// for a plain request, its reader) calls the handler, then writes the
// terminal for causes and the end; while a cancelled handler runs past
// its grace, graceOver writes the cause's terminal for it. Provider frames
// are written under sendMu, which orders them and their sequence numbers;
// mu guards the small state shared by all of them.
type call struct {
	c    *conn
	inv  *wire.Invoke
	tool *Tool // nil for an unknown tool

	ctx      context.Context // the handler's context; done on every cause of docs/protocol.md §6 item 4
	spanCtx  context.Context // ctx with the handler's server span, when tracing is on; set by run
	cancel   context.CancelCauseFunc
	deadline *deadline // the invoke's timeout_ms in the server's deadlines; nil for none

	// in is the ingress queue: exactly protocol.IngressQueue (8) caller frames.
	// Overflow policy: block. When it is full the reader stops reading the
	// connection, so the host's writes block (backpressure). Written and
	// closed only by the connection's reader, which makes it (input) on the
	// first chunk or before the handler starts: a call whose caller
	// completed before either gets closedInput instead.
	in           chan frame.Frame
	callerResult frame.Payload  // the caller's completed payload; guarded by mu
	fence        sequence.Fence // the caller's direction; owned by the connection's reader

	// Set by the connection's reader before the handler runs: handler,
	// the call has one (it was registered); running, it was handed to the
	// runner or is run by the reader; inline, by the reader (its frames
	// are written as coalesce.Reply).
	handler, running, inline bool

	handedOff bool // the watch gave the connection a new reader while the handler ran inline; guarded by c.mu

	sendMu sync.Mutex
	next   uint64     // next provider sequence; guarded by sendMu
	pkt    wire.Frame // the packet every provider frame is written as; guarded by sendMu
	// terminal: a provider terminal is claimed. Guarded by sendMu, under
	// which every provider frame is written, so a stream's frames take
	// no other lock of the call's.
	terminal bool

	mu        sync.Mutex
	closeConn bool          // close the connection once ended; guarded by mu
	over      atomic.Bool   // set just before the end is written: the next invoke may come
	isEnded   bool          // the end is written (or never will be); guarded by mu
	endWait   chan struct{} // made by an abandon that waits for isEnded, closed when it is set; guarded by mu

	// The cancellation grace (docs/protocol.md §6 item 7) has no goroutine of its
	// own: one timer, whose function reports the handler stuck, is armed
	// by the first cause the child gives (cancelWith; the deadline is one)
	// and moved earlier by each later one that ends sooner. The runner owns
	// it: once the handler returned it stops it, or waits (graceWG) for
	// its function once that started.
	graceWG    sync.WaitGroup // graceOver, from when its timer is armed until it returns or is stopped
	grace      *time.Timer    // the grace timer, once armed; guarded by mu
	graceAt    time.Time      // when grace fires; guarded by mu
	supervised bool           // superviseGrace ran: a cause from now on arms the grace; guarded by mu
	returned   bool           // the handler returned: the clocks do nothing any more; guarded by mu
	stuck      bool           // counted in s.stuck; guarded by mu

	nested nestedSet // calls the handler made through the host that have not ended
}

func newCall(c *conn, inv *wire.Invoke) *call {
	cl := &call{
		c: c, inv: inv, tool: c.s.tool(inv.ToolID),
		next:  1,
		fence: *sequence.New(inv.CallID, frame.CallerToProvider, 0),
	}
	parent := c.s.ctx
	if inv.Trace != nil {
		parent = spanctx.Extract(parent, inv.Trace)
	}
	ctx, cancel := context.WithCancelCause(parent)
	cl.cancel, cl.ctx = cancel, ctx
	if inv.TimeoutMS > 0 {
		at := time.Now().Add(protocol.Millis(inv.TimeoutMS))
		cl.ctx = &deadlineCtx{Context: ctx, at: at}
		cl.deadline = c.s.deadlines.add(cl, at)
	}
	return cl
}

// stop takes the call's deadline, if any, out of the server's deadlines:
// called once the call needs it no more.
func (cl *call) stop() {
	if cl.deadline != nil {
		cl.c.s.deadlines.remove(cl.deadline)
	}
}

// ended reports whether the call has ended, so the connection may take the
// next invoke. Safe for concurrent use.
func (cl *call) ended() bool { return cl.over.Load() }

func (cl *call) markEnded() {
	cl.mu.Lock()
	cl.isEnded = true
	cl.mu.Unlock()
	cl.over.Store(true)
}

// closeAfterEnd asks for the connection to be closed once the call ended,
// and reports whether it has ended already (then the caller closes it).
func (cl *call) closeAfterEnd() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.closeConn = true
	return cl.isEnded
}

// closedInput is the ingress queue of every call whose caller completed
// before a chunk came or its handler started: closed, and never written.
var closedInput = func() chan frame.Frame {
	ch := make(chan frame.Frame)
	close(ch)
	return ch
}()

// input returns the ingress queue, making it first. Called only by the
// connection's reader, and before the handler starts (ensureRunning,
// runInline), so that the handler sees it made.
func (cl *call) input() chan frame.Frame {
	if cl.in == nil {
		cl.in = make(chan frame.Frame, protocol.IngressQueue)
	}
	return cl.in
}

// queueFull reports whether the ingress queue has no room for a chunk.
func (cl *call) queueFull() bool { return cl.in != nil && len(cl.in) == cap(cl.in) }

// push hands a caller chunk to the handler, blocking while the queue is
// full; once the handler's context is done the chunk is discarded.
func (cl *call) push(f frame.Frame) {
	in := cl.input()
	select { // a queue with room takes it without the context's Done channel
	case in <- f:
		return
	default:
	}
	select {
	case in <- f:
	case <-cl.ctx.Done():
	}
}

// closeInput ends the handler's input (the caller's completed half-close).
func (cl *call) closeInput(result frame.Payload) {
	cl.mu.Lock()
	cl.callerResult = result
	cl.mu.Unlock()
	if cl.in == nil {
		cl.in = closedInput
		return
	}
	close(cl.in)
}

// result is what a handler returned.
type result struct {
	payload  frame.Payload
	err      error
	panicked bool
}

// run calls the handler on the connection's runner goroutine (see
// conn.runCall) or, for a plain request, on its reader (conn.runInline),
// then writes the terminal the handler did not and the end. The
// cancellation grace runs beside the handler on clocks, not goroutines
// (superviseGrace). A handler that never returns keeps its goroutine:
// Serve abandons both.
func (cl *call) run() {
	s := cl.c.s
	defer cl.c.release()
	defer s.unregister(cl)
	cl.superviseGrace() // counted in s.running since conn.start
	var span trace.Span
	if tr := cl.c.s.tracer; tr != nil {
		cl.spanCtx, span = cl.startSpan(tr)
	}
	res := cl.callHandler()
	cl.endNested()
	if span != nil {
		cl.endSpan(span, res)
	}
	cl.stopGrace()
	s.running.Add(-1)
	cl.cancel(errHandlerReturned)
	cl.stop()
	cl.finish(res)
}

// superviseGrace arms the cancellation grace before the handler runs: a
// cause that came already starts it now; each cause from now on
// (cancelWith, which the deadline uses too) starts it then. If the handler
// has not returned when it ends, graceOver reports it stuck. The runner
// must call stopGrace once the handler returned. (A cancellation of the
// whole server, the host gone, arms nothing: its connections close at
// once.)
func (cl *call) superviseGrace() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.supervised = true
	if cl.ctx.Err() != nil {
		cl.armGraceLocked(time.Now().Add(cl.c.s.cancelGrace))
	}
}

// cancelWith cancels the handler's context with cause and starts the
// cancellation grace, for a call whose handler runs or will.
func (cl *call) cancelWith(cause error) {
	cl.cancel(cause)
	cl.mu.Lock()
	cl.armGraceLocked(time.Now().Add(cl.c.s.cancelGrace))
	cl.mu.Unlock()
}

// armGraceLocked makes the grace end at at, unless it ends sooner already
// or the handler is not supervised (yet, or any more). cl.mu is held.
func (cl *call) armGraceLocked(at time.Time) {
	if !cl.supervised || cl.returned {
		return
	}
	if cl.grace == nil {
		cl.graceWG.Add(1) // under mu, before returned is set: never racing Wait
		cl.graceAt = at
		// Runs on the timer's goroutine; stopGrace stops it, or waits for it.
		cl.grace = time.AfterFunc(time.Until(at), func() {
			defer cl.graceWG.Done()
			cl.graceOver()
		})
		return
	}
	// A timer that cannot be stopped has fired: graceOver runs already.
	if at.Before(cl.graceAt) && cl.grace.Stop() {
		cl.graceAt = at
		cl.grace.Reset(time.Until(at))
	}
}

// graceOver reports a cancelled handler that is still running after the
// cancel grace stuck, and writes its cause's terminal for it
// (docs/protocol.md §6 item 7): its end waits until it returns. It does
// nothing once the handler returned; if the handler returns while it
// writes, the terminal is claimed once, by whichever of them writes first.
func (cl *call) graceOver() {
	s := cl.c.s
	cl.mu.Lock()
	if cl.returned {
		cl.mu.Unlock()
		return
	}
	cl.stuck = true
	s.stuck.Add(1) // under mu, so that stopGrace, which reads stuck under mu, takes it back
	cl.mu.Unlock()
	s.log.Warn("handler ignores cancellation", logCallID, cl.inv.CallID, logTreeID, treeOf(cl.inv), "tool", cl.inv.ToolID)
	cl.writeCauseTerminal()
}

// stopGrace is called by the runner once the handler returned: the clocks
// do nothing from then on, and it returns after every function of theirs
// that started has returned (graceOver may be writing the cause's terminal:
// finish must not write the end before it). A stuck handler is no longer
// counted.
func (cl *call) stopGrace() {
	cl.mu.Lock()
	cl.returned = true
	grace, stuck := cl.grace, cl.stuck
	cl.mu.Unlock()
	if stuck {
		cl.c.s.stuck.Add(-1)
	}
	// Nothing arms the grace once returned is set.
	if grace != nil && grace.Stop() {
		cl.graceWG.Done() // graceOver never ran
	}
	cl.graceWG.Wait()
}

func (cl *call) callHandler() (res result) {
	defer func() {
		if r := recover(); r != nil {
			// The value and the stack go to the provider's own log only
			// (docs/protocol.md §6 item 3: stderr), never to the caller.
			cl.c.s.log.Error("handler panicked", logCallID, cl.inv.CallID, logTreeID, treeOf(cl.inv), "tool", cl.inv.ToolID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = result{panicked: true}
		}
	}()
	p, err := cl.tool.Handler(cl.handlerCtx(), &Stream{cl: cl})
	return result{payload: p, err: err}
}

// cause returns why the handler's context was cancelled, or nil when it
// was not (or only because the handler returned).
func (cl *call) cause() error {
	err := context.Cause(cl.ctx)
	if errors.Is(err, errHandlerReturned) {
		return nil
	}
	return err
}

// finish writes the handler's terminal (or the cause's), then the end, and
// marks the call ended. The terminal and the end leave in one write, under
// a Cork (coalesce's Writer.Cork says what that saves, measured).
func (cl *call) finish(res result) {
	cl.c.w.Cork()
	if cl.cause() == nil {
		var f frame.Frame
		switch {
		case res.panicked:
			f = failedFrame(frame.CodeProviderError, "handler panicked")
		case res.err != nil:
			f = errorFrame(res.err)
		default:
			f = frame.Frame{Kind: frame.KindCompleted, Payload: res.payload}
		}
		err := cl.write(f, false)
		if err != nil && !errors.Is(err, ErrTerminated) && !isConnErr(err) {
			// The handler's result cannot go on the wire (too large, say).
			cl.c.s.log.Warn("handler result refused", logCallID, cl.inv.CallID, logTreeID, treeOf(cl.inv), "tool", cl.inv.ToolID, "err", err)
			cl.write(failedFrame(frame.CodeProviderError, "handler result could not be sent"), false)
		}
	}
	cl.writeCauseTerminal() // no-op when a terminal is written
	// The host may write the next invoke as soon as it reads the end, so
	// the connection's reader must know the call ended before it is written.
	// It also frees the call's id (see register).
	cl.over.Store(true)
	endQueued := false
	if _, _, _, ok := causeTerminal(cl.cause()); ok {
		endQueued = cl.c.w.Write(context.Background(), coalesce.Stream, &wire.End{CallID: cl.inv.CallID}) == nil
	}
	// Uncork writes the terminal and the end on this goroutine unless a
	// write is under way; Flush then waits for that one.
	writeErr := cl.c.w.Uncork()
	if writeErr == nil && endQueued {
		writeErr = cl.c.w.Flush()
	}
	cl.mu.Lock()
	cl.isEnded = true
	// A connection whose writes fail can carry neither this call's end
	// nor another call: closing it lets the host see the failure at once
	// instead of waiting for an end that never comes.
	closeConn := cl.closeConn || writeErr != nil
	if cl.endWait != nil {
		close(cl.endWait)
	}
	cl.mu.Unlock()
	if closeConn {
		cl.c.close()
	}
}

// isConnErr reports whether err came from the connection rather than from
// the frame.
func isConnErr(err error) bool {
	_, inv := protocol.AsInvalid(err)
	return !inv && !errors.Is(err, wire.ErrTooLarge) && !errors.Is(err, frame.ErrInvalid)
}

// writeCauseTerminal writes the terminal of the cancellation cause unless a
// terminal is already claimed or the cause writes none.
func (cl *call) writeCauseTerminal() {
	if f, ok := cl.causeFrame(); ok {
		cl.write(f, true)
	}
}

// causeFrame returns the terminal the child writes for the call's
// cancellation cause; ok is false when the call was not cancelled or its
// cause writes no terminal.
func (cl *call) causeFrame() (f frame.Frame, ok bool) {
	cause := cl.cause()
	if cause == nil {
		return f, false
	}
	kind, code, msg, ok := causeTerminal(cause)
	if !ok {
		return f, false
	}
	return frame.Frame{Kind: kind, Error: &frame.Error{Code: code, Message: msg}}, true
}

// abandon is called by a drain whose time is up, for a call still in the
// table: it makes sure that the call's terminal, if one is or can be
// claimed, is on the wire when it returns, since the connection is closed
// right after. A call whose handler returned is left to its runner, which
// is writing the terminal and the end, until the end is written. For a
// handler still running, the cause's terminal is written unless one is
// claimed already (by the handler, graceOver or the runner, which may be
// writing it right now), then the connection is flushed. From deadline
// on, the connection's writes give up on a host that does not read them
// (conn.giveUpAt), which also ends a write blocked by such a host (the
// terminal cannot go out then); a child that is merely late, waiting for a
// processor, still gets its terminals out to a host that reads.
func (cl *call) abandon(deadline time.Time) {
	stop := cl.c.giveUpAt(deadline)
	defer stop()
	cl.mu.Lock()
	returned := cl.returned
	var ended chan struct{} // stays nil when the end is written already
	if returned && !cl.isEnded {
		if cl.endWait == nil {
			cl.endWait = make(chan struct{})
		}
		ended = cl.endWait
	}
	cl.mu.Unlock()
	if returned {
		if ended != nil {
			// The runner's writes end as the connection's do (giveUpAt);
			// the timer bounds a runner that is elsewhere.
			// Counted from now when the drain runs past deadline.
			from := deadline
			if now := time.Now(); now.After(from) {
				from = now
			}
			t := time.NewTimer(time.Until(from.Add(connWriteGrace)))
			select {
			case <-ended:
			case <-t.C:
			}
			t.Stop()
		}
		return
	}
	// Waits for sendMu: a writer that holds it is bounded as the
	// connection's writes are.
	cl.writeCauseTerminal()
	// Whoever claimed the terminal queued it under sendMu, before
	// writeCauseTerminal could take it: this flush covers it.
	cl.c.w.Flush()
}

// write sends one provider frame (its call id, direction and sequence are
// filled in here). byCause is true for the terminal the child writes for a
// cancellation cause; a handler's frames are refused once a terminal is
// claimed (ErrTerminated) or the context is done (its cause).
func (cl *call) write(f frame.Frame, byCause bool) error {
	f.CallID, f.Direction = cl.inv.CallID, frame.ProviderToCaller
	cl.sendMu.Lock()
	defer cl.sendMu.Unlock()
	return cl.writeLocked(f, byCause)
}

// writeLocked is write with sendMu held. f is validated once, whole, by
// the Writer, which queues nothing when it refuses a frame (the sequence
// and the terminal are then freed below): checked here as well, every
// frame's call id and shape were checked twice.
func (cl *call) writeLocked(f frame.Frame, byCause bool) error {
	// live: the context is not done, so there is no cause. Err is one
	// atomic load, where a cause is a lookup under the context's lock:
	// a stream's frames ask only this.
	live := cl.ctx.Err() == nil
	if cl.terminal {
		return ErrTerminated
	}
	if !byCause && !live {
		if cause := cl.cause(); cause != nil {
			return cause
		}
	}
	if f.Kind.IsTerminal() {
		cl.terminal = true
	}
	f.Sequence = cl.next
	// Write has encoded the packet when it returns (it waits for an
	// attachment to be written), so one packet serves every frame; it is
	// cleared so that it keeps no payload or media alive.
	cl.pkt.Frame = f
	// The frames of a running handler wait for room in the queue only
	// while the call lives: a cancelled handler blocked by backpressure
	// gets its cause back from Send (docs/protocol.md §6 item 5). What is
	// written once the handler returned (its result's terminal, written
	// by the runner with the context already done by errHandlerReturned)
	// and the cause's terminal wait as long as it takes: a terminal given
	// up on there would leave the end to go out alone. A chunk with inline
	// media is written by this goroutine, and ctx's end interrupts that
	// write (coalesce's writeCurContext says what that saves, measured).
	abortable := !byCause && (live || !errors.Is(context.Cause(cl.ctx), errHandlerReturned))
	ctx := context.Background()
	if abortable {
		ctx = cl.ctx
	}
	// A plain request's handler runs on the connection's reader and
	// answers a request: its frames are replies. A streamed call's are a
	// stream, which the Writer's flusher coalesces.
	mode := coalesce.Stream
	if cl.inline {
		mode = coalesce.Reply
	}
	err := cl.c.w.Write(ctx, mode, &cl.pkt)
	cl.pkt.Frame = frame.Frame{}
	if de, ok := err.(*coalesce.DetachedError); ok {
		// Cancelled while its media was being written: the frame goes out
		// whole from the Writer's copy, so its sequence is used, and the
		// handler is given the cause at once instead of waiting for a
		// host that does not read. A Send of a goroutine that outlived its
		// handler was not cancelled: its chunk goes out before the
		// terminal, which the runner writes after it (sendMu).
		cl.next++
		if de.Cause == errHandlerReturned {
			return nil
		}
		return de.Cause
	}
	stopped := err != nil && abortable && cl.ctx.Err() != nil && err == context.Cause(cl.ctx)
	if stopped || err != nil && !isConnErr(err) {
		// Nothing was queued: the sequence and the terminal stay free.
		if f.Kind.IsTerminal() {
			cl.terminal = false
		}
		if err == errHandlerReturned { // a Send racing its handler's return
			return ErrTerminated
		}
		return err
	}
	cl.next++
	return err
}

func failedFrame(code frame.Code, msg string) frame.Frame {
	return frame.Frame{Kind: frame.KindFailed, Error: &frame.Error{Code: code, Message: protocol.SanitizeMessage(msg)}}
}

// errorFrame turns a handler's error into its terminal: a *frame.Error keeps
// its code (cancelled gives a cancelled frame) and one without a valid code
// becomes provider_error with its message; anything else is provider_error
// with the error's text.
func errorFrame(err error) frame.Frame {
	var ce *callError
	if errors.As(err, &ce) {
		// The outcome of a call this handler made, returned as is.
		return failedFrame(frame.CodeProviderError, err.Error())
	}
	var fe *frame.Error
	if errors.As(err, &fe) && !protocol.KnownCode(fe.Code) {
		msg := fe.Message
		if msg == "" {
			msg = "failed"
		}
		return failedFrame(frame.CodeProviderError, msg)
	}
	if fe != nil {
		if fe.Code == frame.CodeCancelled {
			f := frame.Frame{Kind: frame.KindCancelled}
			if fe.Message != "" {
				f.Error = &frame.Error{Code: frame.CodeCancelled, Message: protocol.SanitizeMessage(fe.Message)}
			}
			return f
		}
		return failedFrame(fe.Code, fe.Message)
	}
	return failedFrame(frame.CodeProviderError, err.Error())
}
