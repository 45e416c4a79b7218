package child

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/sequence"
	"github.com/skulkrt/skulk/wire"
)

// Refusals of Stream.Call made before anything is sent
// (docs/protocol.md §8). Match them with errors.Is.
var (
	// ErrCallsOff: the host offers no calls (its startup has no calls
	// map: it offers nothing, or predates calls).
	ErrCallsOff = errors.New("child: the host offers no calls")
	// ErrNotOffered: the host does not offer the tool.
	ErrNotOffered = errors.New("child: tool not offered by the host")
	// ErrTooManyCalls: the child has the host's max_in_flight calls open
	// already.
	ErrTooManyCalls = errors.New("child: too many calls in flight through the host")
	// ErrArguments: the arguments or an input chunk break the tool's
	// schema; the error wraps one naming the field.
	ErrArguments = errors.New("child: payload breaks the tool's schema")
)

// ErrTooDeep is matched (errors.Is) by the refusal of a call that would sit
// deeper in its tree than the host's max_depth: a loop such as A → B → A
// ends here. The message names the depth and the limit.
var ErrTooDeep = errors.New("child: call too deep")

// depthError is the ErrTooDeep refusal with its numbers.
type depthError struct {
	// Depth is the depth the call would have had.
	Depth int64
	// Limit is the host's max_depth.
	Limit int64
}

func (e *depthError) Error() string {
	return fmt.Sprintf("child: call depth %d is over the host's limit of %d", e.Depth, e.Limit)
}

// Is makes a depthError match ErrTooDeep.
func (e *depthError) Is(target error) bool { return target == ErrTooDeep }

// errCallClosed is Call.Send or CloseSend after the call's direction was
// closed, or after its terminal: ErrTerminated.
var errCallClosed = &kindError{"child: send on a closed call", ErrTerminated}

// callError carries the *frame.Error of a call made through the host that
// did not complete: the host's failed or cancelled terminal, or one this SDK
// made up because the call connection broke first (Synthetic). errors.As
// finds the *frame.Error. A handler that returns it as is fails its own call
// with provider_error and this text (errorFrame), as for any error that is
// not its own *frame.Error.
type callError struct{ err *frame.Error }

func (e *callError) Error() string { return "child: call " + e.err.Error() }

// Unwrap returns the call's *frame.Error.
func (e *callError) Unwrap() error { return e.err }

// offer is what the host's startup offered: nil when nothing.
type offer struct {
	calls *wire.Calls
	cat   *toolschema.Catalog

	mu       sync.Mutex
	inFlight int64
	idle     []Conn             // idle call connections; at most calls.MaxInFlight
	open     map[*Call]struct{} // calls not ended; at most calls.MaxInFlight
}

func newOffer(c *wire.Calls) (*offer, error) {
	if c == nil {
		return nil, nil
	}
	cat, err := toolschema.NewCatalog(c.Tools)
	if err != nil {
		return nil, err
	}
	return &offer{calls: c, cat: cat, open: map[*Call]struct{}{}}, nil
}

// close closes every call connection and waits for the open calls'
// readers; Serve calls it at its end, once the handlers returned or were
// abandoned.
func (o *offer) close() {
	if o == nil {
		return
	}
	o.mu.Lock()
	idle := o.idle
	o.idle = nil
	open := make([]*Call, 0, len(o.open))
	for c := range o.open {
		open = append(open, c)
	}
	o.mu.Unlock()
	for _, nc := range idle {
		nc.Close()
	}
	for _, c := range open {
		c.abandon()
		c.closeConn()
	}
	for _, c := range open {
		<-c.done
	}
}

// detachedKey marks a context made by Detached.
type detachedKey struct{}

// Detached returns ctx marked so that the calls made with it (Stream.Call)
// are trees of their own, meant to outlive the handler's call, as
// host.Detached does for a host's calls: such a call is not a step of the
// handler's, the handler's terminal does not wait for it, and the SDK does
// not cancel it when the handler returns. The context still governs the
// call: give Detached one that outlives the handler's
// (context.WithoutCancel(ctx) with a deadline of its own), and read the
// call from a goroutine the provider owns. The host gives a detached call
// without a deadline one of its own, and cuts a longer one to it
// (docs/protocol.md §8 item 7).
func Detached(ctx context.Context) context.Context {
	return context.WithValue(ctx, detachedKey{}, true)
}

// Call is a call a handler makes through its host (docs/protocol.md §8):
// the same shape as host.Call. Send, CloseSend and Cancel are safe for
// concurrent use with each other and with the reading methods; Recv,
// Frames and Wait must be used by one goroutine at a time. A Call must be
// read to its terminal, or cancelled; a handler that returns with calls
// open has them cancelled, and its own terminal waits for their ends.
type Call struct {
	id    string
	tool  *toolschema.Tool
	o     *offer
	nc    Conn
	w     *coalesce.Writer // the call's packets; closed by readLoop before nc goes back or is closed
	owner *call            // the handler's call; nil once forgotten

	frames chan frame.Frame // provider frames, read by readLoop; unbuffered: the handler's pace is the host's (backpressure)
	done   chan struct{}    // closed when readLoop returned
	quit   chan struct{}    // closed by abandon: nobody reads frames any more
	quitMu sync.Once

	cancelled atomic.Bool // Cancel was called

	ncMu     sync.Mutex
	released bool        // nc went back to the idle list: this call may not close it; guarded by ncMu
	term     frame.Frame // the terminal; set before done is closed
	stop     func() bool // stops the ctx watch

	sendMu   sync.Mutex
	next     uint64 // next caller sequence; guarded by sendMu
	sendDone bool   // the caller terminal was written; guarded by sendMu
	autoDone bool   // readLoop wrote it: the call ended first; guarded by sendMu
	broken   bool   // the connection cannot be reused; guarded by sendMu

	eof bool // Recv gave the terminal; owned by the reader of the call
}

// Call makes a call of tool through the host with args (nil for none), as
// a step of the handler's call: in its tree, with it as parent, ending
// before it ends. ctx governs the call: its deadline becomes the call's
// timeout (the host cuts it to what the handler's call has left), and its
// end cancels the call. Pass the handler's ctx or one derived from it;
// a ctx made by Detached makes a detached call instead.
//
// Refusals come back at once, nothing sent: ErrCallsOff, ErrNotOffered, a
// an error matching ErrTooDeep, ErrTooManyCalls, an error matching ErrArguments; the
// host's own refusals (docs/protocol.md §8) come back as the call's
// *frame.Error. A connection that cannot be dialed gives a synthetic
// *frame.Error (unreachable).
func (s *Stream) Call(ctx context.Context, tool string, args frame.Payload) (*Call, error) {
	detached, _ := ctx.Value(detachedKey{}).(bool)
	cl := s.cl
	of := cl.c.s.offer
	if of == nil {
		return nil, ErrCallsOff
	}
	t := of.cat.Tool(tool)
	if t == nil {
		return nil, ErrNotOffered
	}
	if d := cl.inv.Depth + 1; !detached && d > of.calls.MaxDepth {
		return nil, &depthError{Depth: d, Limit: of.calls.MaxDepth}
	}
	if args == nil {
		args = frame.Payload{0x80}
	}
	if err := args.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrArguments, err)
	}
	args, err := t.WithDefaults(args)
	if err == nil && t.Arguments != nil {
		err = t.Arguments.Validate(args)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrArguments, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inv := &wire.Invoke{CallID: newNestedID(), ToolID: tool, Arguments: args, Parent: cl.inv.CallID, Detached: detached, Trace: cl.inv.Trace}
	if dl, ok := ctx.Deadline(); ok {
		inv.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	of.mu.Lock()
	if of.inFlight >= of.calls.MaxInFlight {
		of.mu.Unlock()
		return nil, ErrTooManyCalls
	}
	of.inFlight++
	var nc Conn
	if n := len(of.idle); n > 0 {
		nc, of.idle = of.idle[n-1], of.idle[:n-1]
	}
	of.mu.Unlock()
	if nc == nil {
		if nc, err = dialUnix(of.calls.Socket); err != nil {
			of.release(nil)
			return nil, &callError{&frame.Error{Code: frame.CodeUnreachable, Message: "dialing the host's call socket failed", Synthetic: true}}
		}
	}
	c := &Call{id: inv.CallID, tool: t, o: of, nc: nc, w: coalesce.New(nc, cl.c.s.limits),
		frames: make(chan frame.Frame), done: make(chan struct{}), quit: make(chan struct{}), next: 1}
	started, _ := frame.NewStarted(c.id, frame.CallerToProvider)
	if err = c.w.Write(context.Background(), coalesce.Request, inv, &wire.Frame{Frame: started}); err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		nc.Close()
		c.w.Close()
		of.release(nil)
		return nil, &callError{&frame.Error{Code: frame.CodeUnreachable, Message: "writing the invoke failed", Synthetic: true}}
	}
	if !detached {
		c.owner = cl
		cl.addNested(c)
	}
	of.mu.Lock()
	of.open[c] = struct{}{}
	of.mu.Unlock()
	c.stop = context.AfterFunc(ctx, c.Cancel)
	go c.readLoop(packetio.NewReader(nc, cl.c.s.limits)) // stopped by the end, or by closing nc; waited for through done
	return c, nil
}

// newNestedID returns a call id for a call connection: "n" and 24 random
// hex digits.
func newNestedID() string {
	var b [12]byte
	rand.Read(b[:])
	return "n" + hex.EncodeToString(b[:])
}

// release gives back an in-flight place and, when not nil, an idle
// connection.
func (o *offer) release(nc Conn) {
	o.mu.Lock()
	o.inFlight--
	if nc != nil && int64(len(o.idle)) < o.calls.MaxInFlight {
		o.idle = append(o.idle, nc)
		nc = nil
	}
	o.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
}

// closeConn closes the call's connection unless it went back to the idle
// list already (the call ended).
func (c *Call) closeConn() {
	c.ncMu.Lock()
	defer c.ncMu.Unlock()
	if !c.released {
		c.nc.Close()
	}
}

// ID returns the call's id on its call connection.
func (c *Call) ID() string { return c.id }

// Send sends one caller chunk: a payload, media, or both. The payload is
// checked against the tool's input_schema first (ErrArguments, nothing
// sent). It blocks while the host does not read (backpressure).
func (c *Call) Send(ctx context.Context, payload frame.Payload, media frame.Media) error {
	if payload != nil {
		if err := payload.Check(); err != nil {
			return err
		}
		if c.tool.Input != nil {
			if err := c.tool.Input.Validate(payload); err != nil {
				return fmt.Errorf("%w: %w", ErrArguments, err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.sendDone {
		return errCallClosed
	}
	select {
	case <-c.done:
		return errCallClosed
	default:
	}
	f, err := frame.NewChunk(c.id, frame.CallerToProvider, c.next, payload, media)
	if err != nil {
		return err
	}
	err = c.w.Write(ctx, coalesce.Request, &wire.Frame{Frame: f})
	if err != nil && ctx.Err() != nil {
		c.broken = true
		c.nc.Close()
		return ctx.Err()
	}
	if err != nil {
		c.broken = true
		return err
	}
	c.next++
	return nil
}

// CloseSend ends the caller's direction (its completed frame): the
// callee's input ends, its output goes on. After the call's end it does
// nothing and returns nil; a second CloseSend, or one after Cancel,
// returns an error matching ErrTerminated.
func (c *Call) CloseSend() error { return c.closeSend(frame.KindCompleted, false) }

func (c *Call) closeSend(kind frame.Kind, auto bool) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.sendDone {
		if c.autoDone && !auto {
			c.autoDone = false // once: a second CloseSend is the caller's mistake
			return nil
		}
		return errCallClosed
	}
	c.autoDone = auto
	c.sendDone = true
	var f frame.Frame
	if kind == frame.KindCompleted {
		f, _ = frame.NewCompleted(c.id, frame.CallerToProvider, c.next, nil)
	} else {
		return c.writeCancel()
	}
	if err := c.w.Write(context.Background(), coalesce.Request, &wire.Frame{Frame: f}); err != nil {
		c.broken = true
		return err
	}
	c.next++
	return nil
}

// cancelWriteWait bounds how long a cancel waits to write its cancelled
// frame into a full socket before it closes the connection instead.
const cancelWriteWait = 50 * time.Millisecond

// writeCancel writes the caller's cancelled and then shuts down the
// connection's writing: the host may not read the cancelled soon (its
// callee takes no input, and the caller's chunks wait unread ahead of
// it), but it sees the hang-up at once and cancels the callee; its answer
// is still read (docs/protocol.md §8 item 6). When the frame cannot be
// written within cancelWriteWait, or the writing not shut down, the
// connection is closed: a hang-up too. The connection is not reused.
// sendMu is held.
func (c *Call) writeCancel() error {
	c.broken = true
	f, _ := frame.NewCancelled(c.id, frame.CallerToProvider, c.next, "cancelled by the caller")
	ctx, cancel := context.WithTimeout(context.Background(), cancelWriteWait)
	// Through the Writer, which keeps it over an interrupted write; a
	// write it cuts short leaves the Writer failed, and the connection is
	// closed below.
	c.w.SetWriteDeadline(time.Now().Add(cancelWriteWait))
	err := c.w.Write(ctx, coalesce.Request, &wire.Frame{Frame: f})
	if err == nil {
		// Write returns once the frame is queued: what a full socket did
		// not take (the frame, or chunks ahead of it) is the flusher's to
		// write, and a shutdown before that would cut it off.
		err = c.w.Flush()
	}
	c.w.SetWriteDeadline(time.Time{})
	cancel()
	if err != nil || !shutdownWrite(c.nc) {
		c.closeConn()
		return err
	}
	c.next++
	return nil
}

// Cancel cancels the call: the host cancels the callee, and the call ends
// with the terminal the host answers (cancelled, unless the callee ended
// first). It reaches the callee at once, whether or not the callee takes
// the call's input. Safe to call more than once and after the end. A
// Cancel while a Send is blocked, or after CloseSend, closes the
// connection instead; the call then ends with a synthetic cancelled.
func (c *Call) Cancel() {
	c.cancelled.Store(true)
	if !c.sendMu.TryLock() {
		c.closeConn()
		return
	}
	done := c.sendDone
	c.sendMu.Unlock()
	if !done {
		c.closeSend(frame.KindCancelled, false)
		return
	}
	// The caller's direction is closed: a cancel can no longer ride in
	// it, so the connection is closed (the host then cancels the callee);
	// one that went back to the idle list is left alone.
	c.closeConn()
}

// Recv returns the next provider frame (the terminal is the last); then
// io.EOF. It blocks until a frame is there or ctx is done (ctx's error;
// the call goes on).
func (c *Call) Recv(ctx context.Context) (frame.Frame, error) {
	if c.eof {
		return frame.Frame{}, io.EOF
	}
	select {
	case f := <-c.frames:
		return f, nil
	case <-c.done:
		c.eof = true
		return c.term, nil
	case <-ctx.Done():
		return frame.Frame{}, ctx.Err()
	}
}

// Frames ranges over the provider's chunks; it yields a *frame.Error for a
// failed or cancelled terminal, and ends after the terminal.
func (c *Call) Frames() iter.Seq2[frame.Frame, error] {
	return func(yield func(frame.Frame, error) bool) {
		for {
			f, err := c.Recv(context.Background())
			if err != nil {
				return
			}
			if f.Kind.IsTerminal() {
				if ce := callErrorOf(f); ce != nil {
					yield(f, ce)
				}
				return
			}
			if !yield(f, nil) {
				return
			}
		}
	}
}

// Wait reads the call to its end and returns the completed terminal's
// payload (nil when none), or a *frame.Error.
func (c *Call) Wait() (frame.Payload, error) {
	for {
		if _, err := c.Recv(context.Background()); err != nil {
			break
		}
	}
	<-c.done
	if ce := callErrorOf(c.term); ce != nil {
		return nil, ce
	}
	return c.term.Payload, nil
}

func callErrorOf(f frame.Frame) error {
	switch f.Kind {
	case frame.KindFailed:
		return &callError{&frame.Error{Code: f.Error.Code, Message: f.Error.Message, Synthetic: f.Synthetic}}
	case frame.KindCancelled:
		fe := &frame.Error{Code: frame.CodeCancelled, Synthetic: f.Synthetic}
		if f.Error != nil {
			fe.Message = f.Error.Message
		}
		return &callError{fe}
	}
	return nil
}

// readLoop reads the host's provider frames up to the terminal and the
// end, fence-checked, and hands each chunk to Recv; a broken connection
// gives a synthetic terminal. It then returns the connection to the idle
// list (after writing the caller's completed, if the caller had not ended
// its direction) or closes it.
func (c *Call) readLoop(r *packetio.Reader) {
	fence := sequence.New(c.id, frame.ProviderToCaller, 1)
	reusable := false
	defer func() {
		c.stop()
		if reusable {
			c.sendMu.Lock()
			if !c.sendDone {
				c.sendMu.Unlock()
				reusable = c.closeSend(frame.KindCompleted, true) == nil
				c.sendMu.Lock()
			}
			reusable = reusable && !c.broken
			c.sendMu.Unlock()
		}
		c.o.mu.Lock()
		delete(c.o.open, c)
		c.o.mu.Unlock()
		if !reusable {
			c.nc.Close() // first: a host that stopped reading cannot hold the writer's Close up
		}
		if err := c.w.Close(); err != nil {
			reusable = false
		}
		if reusable {
			c.ncMu.Lock()
			c.released = true
			c.ncMu.Unlock()
			c.o.release(c.nc)
		} else {
			c.nc.Close()
			c.o.release(nil)
		}
		if c.owner != nil {
			c.owner.forgetNested(c)
		}
		close(c.done)
	}()
	synth := func(code frame.Code, msg string) {
		if code == frame.CodeCancelled {
			c.term, _ = frame.NewCancelled(c.id, frame.ProviderToCaller, fence.Next(), msg)
		} else {
			c.term, _ = frame.NewFailed(c.id, frame.ProviderToCaller, fence.Next(), code, msg)
		}
		c.term.Synthetic = true
	}
	for {
		pkt, err := r.ReadPacket()
		if err != nil {
			switch {
			case c.cancelled.Load():
				synth(frame.CodeCancelled, "cancelled")
			case errors.Is(err, frame.ErrInvalid):
				synth(frame.CodeInvalidFrame, "invalid frame from the host")
			default:
				synth(frame.CodeUnreachable, "call connection to the host broke")
			}
			return
		}
		fp, ok := pkt.(*wire.Frame)
		if !ok || fp.CallID != c.id || fence.Accept(&fp.Frame) != nil {
			synth(frame.CodeInvalidFrame, "invalid frame from the host")
			return
		}
		if fp.Kind.IsTerminal() {
			c.term = fp.Frame
			pkt, err := r.ReadPacket()
			end, ok := pkt.(*wire.End)
			reusable = err == nil && ok && end.CallID == c.id
			return
		}
		select {
		case c.frames <- fp.Frame:
		case <-c.quit: // nobody reads: drop the chunk, wait for the terminal
		}
	}
}

// abandon stops handing frames to a handler that returned.
func (c *Call) abandon() { c.quitMu.Do(func() { close(c.quit) }) }

// nestedSet tracks the calls a handler made that have not ended.
type nestedSet struct {
	mu    sync.Mutex
	calls map[*Call]struct{}
}

func (cl *call) addNested(c *Call) {
	cl.nested.mu.Lock()
	if cl.nested.calls == nil {
		cl.nested.calls = map[*Call]struct{}{}
	}
	cl.nested.calls[c] = struct{}{}
	cl.nested.mu.Unlock()
}

func (cl *call) forgetNested(c *Call) {
	cl.nested.mu.Lock()
	delete(cl.nested.calls, c)
	cl.nested.mu.Unlock()
}

// endNested cancels the calls the handler left open and waits for their
// ends, at most the cancel grace (docs/protocol.md §8 item 6), before the
// call's own terminal is written.
func (cl *call) endNested() {
	cl.nested.mu.Lock()
	open := make([]*Call, 0, len(cl.nested.calls))
	for c := range cl.nested.calls {
		open = append(open, c)
	}
	cl.nested.mu.Unlock()
	if len(open) == 0 {
		return
	}
	t := time.NewTimer(max(cl.c.s.cancelGrace, 10*time.Millisecond))
	defer t.Stop()
	for _, c := range open {
		c.abandon()
		c.Cancel()
	}
	for _, c := range open {
		select {
		case <-c.done:
		case <-t.C:
			for _, c := range open {
				c.closeConn()
			}
			for _, c := range open {
				<-c.done
			}
			return
		}
	}
}
