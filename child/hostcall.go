package child

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/internal/toolschema"
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
	idle     []*callConn        // idle call connections; at most calls.MaxInFlight
	open     map[*Call]struct{} // calls not ended; at most calls.MaxInFlight

	// drains counts the goroutines that read abandoned or cancelled calls
	// to their ends (Call.startDrain); close waits for them.
	drains sync.WaitGroup
}

// callConn is a call connection with its writer and reader, kept together
// on the idle list between calls (docs/protocol.md §8 item 3): a call on
// an idle connection starts no goroutine and takes no buffer.
type callConn struct {
	nc Conn
	w  *coalesce.Writer // its flusher is stopped by close
	r  *packetio.Reader // holds no read buffer while idle
}

func newCallConn(nc Conn, l wire.Limits) *callConn {
	r := packetio.NewReader(nc, l)
	r.ReuseFrames() // Recv copies each frame out before the next read
	return &callConn{nc: nc, w: coalesce.New(nc, l), r: r}
}

// close closes the connection first (a host that stopped reading cannot
// hold the writer's Close up), then stops the writer's flusher.
func (cc *callConn) close() {
	cc.nc.Close()
	cc.w.Close()
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
	for _, cc := range idle {
		cc.close()
	}
	for _, c := range open {
		c.startDrain()
		c.closeConn()
	}
	for _, c := range open {
		<-c.done
	}
	o.drains.Wait()
}

// CallOption sets optional parts of a call made through the host.
type CallOption func(*callOpts)

type callOpts struct {
	input  []frame.Payload
	closed bool // input is the caller's whole direction
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

// WithInput makes payloads the call's whole input, as host.WithInput does
// for a call the host makes: each is checked against the tool's
// input_schema (ErrArguments, nothing sent), and the invoke, the started
// frame, one chunk per payload and the caller's completed leave in one
// write, so that a unary call (WithInput() with no payloads) costs the
// host one read. Send then refuses (the direction is closed) and CloseSend
// returns an error matching ErrTerminated.
func WithInput(payloads ...frame.Payload) CallOption {
	return func(o *callOpts) { o.input, o.closed = payloads, true }
}

// Call is a call a handler makes through its host (docs/protocol.md §8):
// the same shape as host.Call. Send, CloseSend and Cancel are safe for
// concurrent use with each other and with the reading methods; Recv,
// Frames and Wait must be used by one goroutine at a time. A Call must be
// read to its terminal, or cancelled; a handler that returns with calls
// open has them cancelled, and its own terminal waits for their ends.
//
// The call's connection is read by the goroutine that asks for a frame
// (Recv, Frames, Wait), not by one of the call's own: the host's pace is
// the reader's (backpressure), and a frame reaches the handler without a
// goroutine switch. A call nobody reads any more (cancelled, or its
// handler returned) is read to its end by a goroutine the SDK starts for
// it then (startDrain).
type Call struct {
	id    string
	tool  *toolschema.Tool
	o     *offer
	cc    *callConn
	nc    Conn             // cc.nc
	w     *coalesce.Writer // cc.w: the call's packets
	owner *call            // the handler's call; nil once forgotten

	// rd is the read token (size 1: a send takes it, a receive gives it
	// back): its holder alone reads the connection and ends the call.
	rd   chan struct{}
	done chan struct{} // closed once the call ended (term is set) and the connection went back or was closed

	draining  atomic.Bool // startDrain began reading the call to its end
	cancelled atomic.Bool // Cancel was called

	ncMu     sync.Mutex
	released bool            // nc went back to the idle list: this call may not close it; guarded by ncMu
	ended    bool            // end began: a ctx watch set after it is stopped at once; guarded by ncMu
	stop     func() bool     // stops the ctx watch; nil until Call set it; guarded by ncMu
	term     frame.Frame     // the terminal; set before done is closed
	fence    *sequence.Fence // the provider frames'; used by the read token's holder

	sendMu   sync.Mutex
	next     uint64 // next caller sequence; guarded by sendMu
	sendDone bool   // the caller terminal was written; guarded by sendMu
	autoDone bool   // end wrote it: the call ended first; guarded by sendMu
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
// Refusals come back at once, nothing sent: ErrCallsOff, ErrNotOffered,
// an error matching ErrTooDeep, ErrTooManyCalls, an error matching ErrArguments; the
// host's own refusals (docs/protocol.md §8) come back as the call's
// *frame.Error. A connection that cannot be dialed gives a synthetic
// *frame.Error (unreachable).
func (s *Stream) Call(ctx context.Context, tool string, args frame.Payload, opts ...CallOption) (*Call, error) {
	detached, _ := ctx.Value(detachedKey{}).(bool)
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
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
	if err := protocol.CheckPayload(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrArguments, err)
	}
	args, err := t.WithDefaults(args)
	if err == nil && t.Arguments != nil {
		err = t.Arguments.Validate(args)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrArguments, err)
	}
	for _, p := range o.input {
		if err := protocol.CheckPayload(p); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrArguments, err)
		}
		if t.Input != nil {
			if err := t.Input.Validate(p); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrArguments, err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inv := &wire.Invoke{CallID: newNestedID(), ToolID: tool, Arguments: args, Parent: cl.inv.CallID, Detached: detached, Trace: cl.inv.Trace}
	if dl, ok := ctx.Deadline(); ok {
		inv.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	// The packets before anything is taken: a chunk too large for the
	// limits is the caller's error, with nothing sent.
	started, _ := frame.NewStarted(inv.CallID, frame.CallerToProvider)
	pkts := make([]wire.Packet, 0, 3+len(o.input))
	pkts = append(pkts, inv, &wire.Frame{Frame: started})
	next := uint64(1)
	if o.closed {
		for _, p := range o.input {
			f, err := frame.NewChunk(inv.CallID, frame.CallerToProvider, next, p, nil)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrArguments, err)
			}
			pkts = append(pkts, &wire.Frame{Frame: f})
			next++
		}
		f, _ := frame.NewCompleted(inv.CallID, frame.CallerToProvider, next, nil)
		pkts = append(pkts, &wire.Frame{Frame: f})
		next++
	}
	of.mu.Lock()
	if of.inFlight >= of.calls.MaxInFlight {
		of.mu.Unlock()
		return nil, ErrTooManyCalls
	}
	of.inFlight++
	var cc *callConn
	if n := len(of.idle); n > 0 {
		cc, of.idle = of.idle[n-1], of.idle[:n-1]
	}
	of.mu.Unlock()
	if cc == nil {
		nc, err := dialUnix(of.calls.Socket)
		if err != nil {
			of.release(nil)
			return nil, &callError{&frame.Error{Code: frame.CodeUnreachable, Message: "dialing the host's call socket failed", Synthetic: true}}
		}
		cc = newCallConn(nc, cl.c.s.limits)
	}
	c := &Call{id: inv.CallID, tool: t, o: of, cc: cc, nc: cc.nc, w: cc.w,
		rd: make(chan struct{}, 1), done: make(chan struct{}), next: next, sendDone: o.closed,
		fence: sequence.New(inv.CallID, frame.ProviderToCaller, 1)}
	cc.r.ExpectCallID(c.id)
	// Request: the handler writes its packets itself when the connection
	// is idle, as it is between calls; Flush returns at once then.
	err = c.w.Write(context.Background(), coalesce.Request, pkts...)
	if err == nil {
		err = c.w.Flush()
	}
	if errors.Is(err, wire.ErrTooLarge) {
		of.release(cc) // nothing was queued: the connection is as it was
		return nil, fmt.Errorf("%w: %w", ErrArguments, err)
	}
	if err != nil {
		cc.close()
		of.release(nil)
		return nil, &callError{&frame.Error{Code: frame.CodeUnreachable, Message: "writing the invoke failed", Synthetic: true}}
	}
	if !detached {
		c.owner = cl // before the call is published: end reads it
	}
	of.mu.Lock()
	of.open[c] = struct{}{}
	of.mu.Unlock()
	if !detached {
		cl.addNested(c)
	}
	c.watch(ctx)
	return c, nil
}

// watch makes ctx's end cancel the call, unless the call ended already:
// once it is published, offer.close or the handler's end may end it
// (end) on another goroutine, so the watch is handed to end under ncMu.
func (c *Call) watch(ctx context.Context) {
	stop := context.AfterFunc(ctx, c.Cancel)
	c.ncMu.Lock()
	defer c.ncMu.Unlock()
	if c.ended {
		stop()
		return
	}
	c.stop = stop
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
func (o *offer) release(cc *callConn) {
	o.mu.Lock()
	o.inFlight--
	if cc != nil && int64(len(o.idle)) < o.calls.MaxInFlight {
		o.idle = append(o.idle, cc)
		cc = nil
	}
	o.mu.Unlock()
	if cc != nil {
		cc.close()
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
		if err := protocol.CheckPayload(payload); err != nil {
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
		c.startDrain()
		return
	}
	done := c.sendDone
	c.sendMu.Unlock()
	if !done {
		c.closeSend(frame.KindCancelled, false)
	} else {
		// The caller's direction is closed: a cancel can no longer ride
		// in it, so the connection is closed (the host then cancels the
		// callee); one that went back to the idle list is left alone.
		c.closeConn()
	}
	// The call ends with the host's answer whether or not anyone reads
	// it, and gives back its in-flight place.
	c.startDrain()
}

// Recv returns the next provider frame (the terminal is the last); then
// io.EOF. It blocks until a frame is there or ctx is done (ctx's error;
// the call goes on). The frame is read from the connection by Recv itself.
func (c *Call) Recv(ctx context.Context) (frame.Frame, error) {
	if c.eof {
		return frame.Frame{}, io.EOF
	}
	select {
	case c.rd <- struct{}{}:
	case <-c.done:
		c.eof = true
		return c.term, nil
	case <-ctx.Done():
		return frame.Frame{}, ctx.Err()
	}
	f, err := c.nextFrame(ctx)
	<-c.rd
	if err != nil {
		return frame.Frame{}, err
	}
	if f.Kind.IsTerminal() {
		c.eof = true
	}
	return f, nil
}

// nextFrame reads the next provider frame; the caller holds the read token. A
// terminal ends the call (end). err is ctx's alone: ctx ended the wait,
// and the call goes on.
func (c *Call) nextFrame(ctx context.Context) (frame.Frame, error) {
	select {
	case <-c.done:
		return c.term, nil
	default:
	}
	pkt, err := c.read(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return frame.Frame{}, ctx.Err()
	}
	synth := func(code frame.Code, msg string) frame.Frame {
		if code == frame.CodeCancelled {
			c.term, _ = frame.NewCancelled(c.id, frame.ProviderToCaller, c.fence.Next(), msg)
		} else {
			c.term, _ = frame.NewFailed(c.id, frame.ProviderToCaller, c.fence.Next(), code, msg)
		}
		c.term.Synthetic = true
		c.end(false)
		return c.term
	}
	if err != nil {
		switch {
		case c.cancelled.Load():
			return synth(frame.CodeCancelled, "cancelled"), nil
		case errors.Is(err, frame.ErrInvalid):
			return synth(frame.CodeInvalidFrame, "invalid frame from the host"), nil
		default:
			return synth(frame.CodeUnreachable, "call connection to the host broke"), nil
		}
	}
	fp, ok := pkt.(*wire.Frame)
	if !ok || fp.CallID != c.id || c.fence.Accept(&fp.Frame) != nil {
		return synth(frame.CodeInvalidFrame, "invalid frame from the host"), nil
	}
	f := fp.Frame // out of the Reader's reused frame before the next read
	if f.Kind.IsTerminal() {
		c.term = f
		// The end comes in the same write as the terminal.
		pkt, err := c.read(context.Background())
		end, ok := pkt.(*wire.End)
		c.end(err == nil && ok && end.CallID == c.id)
	}
	return f, nil
}

// read reads one packet. A ctx that can end interrupts a read that has to
// wait for the connection with a read deadline in the past; the Reader
// stays in step (packetio.Reader.ReadPacket), and the deadline is cleared
// before read returns.
func (c *Call) read(ctx context.Context) (wire.Packet, error) {
	if ctx.Done() == nil || c.cc.r.PacketBuffered() {
		return c.cc.r.ReadPacket()
	}
	ran := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { // runs once, briefly; waited for below
		defer close(ran)
		c.nc.SetReadDeadline(time.Unix(1, 0))
	})
	pkt, err := c.cc.r.ReadPacket()
	if !stop() {
		<-ran
		c.nc.SetReadDeadline(time.Time{})
	}
	return pkt, err
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

// end ends the call once its terminal is known (c.term): it returns the
// connection to the idle list (after writing the caller's completed, if
// the caller had not ended its direction) when reusable and the call's
// writes went through, or closes it; then it gives back the in-flight
// place and closes done. The read token's holder calls it, once.
func (c *Call) end(reusable bool) {
	c.ncMu.Lock()
	c.ended = true
	stop := c.stop
	c.ncMu.Unlock()
	if stop != nil {
		stop()
	}
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
	// Whatever the call queued is on the wire before the connection can
	// carry another call; nothing of the host's may wait unread.
	if reusable && (c.w.Flush() != nil || c.cc.r.Buffered() != 0) {
		reusable = false
	}
	if reusable {
		c.cc.r.ReleaseBuffer()
		c.ncMu.Lock()
		c.released = true
		c.ncMu.Unlock()
		c.o.release(c.cc)
	} else {
		c.cc.close()
		c.o.release(nil)
	}
	if c.owner != nil {
		c.owner.forgetNested(c)
	}
	close(c.done)
}

// startDrain reads the call to its end on a goroutine of its own, dropping
// its chunks, for a call nobody reads any more: it was cancelled, or its
// handler returned. Once per call; the offer waits for it (drains).
func (c *Call) startDrain() {
	if !c.draining.CompareAndSwap(false, true) {
		return
	}
	c.o.drains.Add(1)
	go func() { // stopped by the call's end: its terminal, or its connection closed; waited for through drains
		defer c.o.drains.Done()
		select {
		case c.rd <- struct{}{}:
		case <-c.done:
			return
		}
		defer func() { <-c.rd }()
		for {
			f, _ := c.nextFrame(context.Background())
			if f.Kind.IsTerminal() {
				return
			}
		}
	}()
}

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
		c.startDrain()
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
