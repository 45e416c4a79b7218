package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
	"go.opentelemetry.io/otel/trace"
)

// Call is one running call: the caller sends input with Send and CloseSend
// and reads the provider's output with Recv, Frames or Wait.
//
// Output is: the provider's started (sequence 0, given by the host when
// the invoke was written), the provider's chunks, then exactly one
// terminal (completed, failed or cancelled; Synthetic when the host made
// it up), then io.EOF. A Call must be read to its terminal: until it is,
// it holds a stream slot of its child. A call the caller will not read to
// its end must be cancelled (Cancel, or its context): it then gives its
// slot back without being read, once the child's terminal came or, at the
// latest, CancelGrace plus 1 s later. Nothing else needs releasing; Close
// ends every call.
//
// Send, CloseSend and Cancel are safe for concurrent use with each other
// and with the reading methods; Recv, Frames and Wait must be used by one
// goroutine at a time.
type Call struct {
	id   string
	ctx  context.Context
	tool *toolschema.Tool
	ch   *child
	conn *streamConn
	rec  *recorder.Record // the call in the log; its methods never block but End and Confirm

	dispatched time.Time // when its invoke was about to be written: lost-call detection counts it from the next ping on

	out     outbox        // provider frames for Recv; put by the connection's reader (its only putter)
	done    chan struct{} // closed by finish once term is set
	term    frame.Frame
	termErr *callError

	// The call's clocks (see startClocks). Each armed timer, the context
	// watch and each cancel writer is counted in ch.wg until it has run
	// or was stopped; clockMu guards the fields below.
	clockMu   sync.Mutex
	released  bool // release ran: no clock may act on the connection any more
	cancelled bool
	deadlineT *time.Timer // deadline + CancelGrace + 1 s: synthetic timeout
	cancelT   *time.Timer // cancel + CancelGrace + 1 s: synthetic cancelled
	endT      *time.Timer // terminal + endGrace without end: connection closed
	stopCtx   func() bool // stops the context watch

	providerDone atomic.Bool // the provider terminal (real or synthetic) was given: set by finish

	// endCtx is done once providerDone is set: made by ended on first use
	// (the calls this call's handler makes through the host watch it),
	// cancelled by finish. Guarded by endMu.
	endMu     sync.Mutex
	endCtx    context.Context
	endCancel context.CancelFunc

	sendMu   sync.Mutex
	send     sequence.Fence // caller direction; guarded by sendMu
	sendPkt  wire.Frame     // the packet every caller frame is written as (encoded before Write returns); guarded by sendMu
	sendDone bool           // caller terminal written, or the call released; guarded by sendMu
	// callerClosed: the caller itself ended its direction (CloseSend, or
	// Cancel and the call's context). Atomic because cancel sets it without
	// sendMu, which a blocked Send may hold.
	callerClosed atomic.Bool

	eof        bool  // owned by the reading goroutine
	journalErr error // a required journal's unconfirmed end, given once after the terminal; owned by the reading goroutine
	journalEnd error // the same error, kept for every later Wait; owned by the reading goroutine

	span trace.Span // the call's client span (see Host.startSpan); nil when tracing is off
}

// startCall binds a new call to a stream connection and writes its invoke
// and the caller's started. The stream slot and the call's WaitGroup
// count were taken by acquire.
func (ch *child) startCall(ctx context.Context, t *toolschema.Tool, inv *wire.Invoke, rec *recorder.Record, reqArgs frame.Payload, o *callOptions) (*Call, error) {
	call := &Call{
		id: inv.CallID, ctx: ctx, tool: t, ch: ch, rec: rec,
		done: make(chan struct{}),
		send: *sequence.New(inv.CallID, frame.CallerToProvider, 0),
		span: o.span,
	}
	call.out.init()
	var c *streamConn
	for {
		var err error
		c, err = ch.conn(ctx)
		if err != nil {
			ch.releaseSlot(nil)
			ch.wg.Done()
			if ctx.Err() != nil {
				return nil, endWith(ctx, rec, recorder.Cancelled("context done before the call was sent"), ctx.Err())
			}
			if errors.Is(err, errNoChild) || ch.proc.gone() {
				// The child died before its supervisor noticed: try another.
				ch.markDead()
				return nil, errRetry
			}
			fe := &frame.Error{Code: frame.CodeUnreachable, Message: "child " + ch.id + " unreachable: " + err.Error(), Synthetic: true}
			return nil, endWith(ctx, rec, recorder.Failed(fe.Code, fe.Message, true), &callError{err: fe})
		}
		call.conn = c
		// Once the connection is had: a dial waits while the child's
		// backlog is full, and the lost-call check must not count that
		// wait as time the child had to read the invoke. Set before bind,
		// which publishes the call to the supervisor.
		call.dispatched = time.Now()
		if c.bind(call) {
			break
		}
		c.fail(nil) // an idle connection the child closed: take another
	}
	started, _ := frame.NewStarted(call.id, frame.ProviderToCaller)
	call.out.put(started, true, nil, nil) // the queue is empty: never blocks
	call.startClocks()                    // stopped by release; the call is counted in ch.wg by acquire
	call.sendMu.Lock()
	// Recorded before the write: the child may answer before Write
	// returns, and its output must come after the request in the log.
	rec.Request(recorder.RequestInfo{Child: ch.id, ToolVersion: t.Desc.Version, Args: reqArgs})
	var err error
	if o.closedInput {
		err = call.writeRequest(inv, o.input)
	} else {
		err = c.w.Write(context.Background(), coalesce.Stream, inv)
		if err == nil {
			cs, _ := frame.NewStarted(call.id, frame.CallerToProvider)
			rec.Input(cs)
			call.sendPkt.Frame = cs
			if err = c.w.Write(context.Background(), coalesce.Stream, &call.sendPkt); err == nil {
				call.send.Accept(&cs)
				ch.h.traffic.sent(&cs)
			}
			call.sendPkt.Frame = frame.Frame{}
		}
	}
	call.sendMu.Unlock()
	if err != nil {
		// The reader gives the call its synthetic terminal (recorded as
		// its end) and releases it. A child that died as the call
		// started (its sockets close as it exits, before it is
		// waitable) makes the call unreachable, as a death found a
		// moment later would; the write's failure is the transport's
		// only when the child lives on.
		cause := c.causeOf(nil, "writing the invoke failed")
		c.fail(cause)
		fe := cause.frameError()
		fe.Synthetic = true
		ce := &callError{err: fe}
		var je *calllog.JournalError
		if jerr := rec.Confirm(ctx); errors.As(jerr, &je) {
			return nil, errors.Join(ce, jerr)
		}
		return nil, ce
	}
	return call, nil
}

// writeRequest writes the invoke, the caller's started, a chunk for each
// payload of input and the caller's completed in one write (WithInput),
// and closes the caller's direction; sendMu is held. The frames are
// recorded before the write, as Send's are.
func (c *Call) writeRequest(inv *wire.Invoke, input []frame.Payload) error {
	frames := make([]wire.Frame, 0, len(input)+2)
	cs, _ := frame.NewStarted(c.id, frame.CallerToProvider)
	frames = append(frames, wire.Frame{Frame: cs})
	for i, p := range input {
		f, err := frame.NewChunk(c.id, frame.CallerToProvider, uint64(i+1), p, nil)
		if err != nil {
			return err
		}
		frames = append(frames, wire.Frame{Frame: f})
	}
	done, _ := frame.NewCompleted(c.id, frame.CallerToProvider, uint64(len(input)+1), nil)
	frames = append(frames, wire.Frame{Frame: done})
	// The packet list of a request of one chunk or none (most) stays on the
	// stack: the writer encodes the packets before Write returns.
	var pktBuf [4]wire.Packet
	pkts := append(pktBuf[:0], inv)
	for i := range frames {
		c.rec.Input(frames[i].Frame)
		pkts = append(pkts, &frames[i])
	}
	// The caller must not wait for a full socket here: it holds the read
	// turn, and a child may answer a large request before it has read all
	// of it (an echo does), then wait for its answer to be read. The
	// flusher writes what the socket does not take now.
	if err := c.conn.w.Write(context.Background(), coalesce.Request, pkts...); err != nil {
		return err
	}
	for i := range frames {
		c.send.Accept(&frames[i].Frame)
	}
	c.ch.h.traffic.callerFrames.Add(uint64(len(frames))) // WithInput payloads carry no media
	c.sendDone = true
	c.callerClosed.Store(true)
	return nil
}

// The keys of the attributes that every host log record about a call
// carries (docs/operations.md, "Logs"); the child SDK uses the same.
const (
	logCallID = "call_id"
	logTreeID = "tree_id"
)

// ID returns the call id, unique within the Host.
func (c *Call) ID() string { return c.id }

// Tool returns the id of the called tool.
func (c *Call) Tool() string { return c.tool.Desc.ID }

// Send sends one caller chunk: a payload, inline or blob media, or both.
// The payload is checked against the tool's input_schema first, and a
// chunk without media to a tool that declares input_media is refused (a
// *SchemaError, nothing sent). Send blocks while the child does not read
// (backpressure); an inline media frame returns once its bytes are
// written, or copied into the connection's queue (up to 16 KiB, which
// leave with the frames around them), so the caller may reuse them, as
// it may the payload's. A blocked Send ends when the call
// ends, or when ctx is done: a frame cannot be taken back half written, so
// the call's connection is then closed, the call ends with a synthetic
// cancelled, and Send returns ctx's error.
//
// Errors: ErrSendClosed after CloseSend, Cancel or the provider terminal; a
// *SchemaError; an error matching frame.ErrInvalid for a malformed chunk;
// ctx's error for a send abandoned as above. When the write fails because
// the connection broke (the child died, closed it, or the host closed it
// for a violation), Send returns the call's own *frame.Error once its end is
// known, which the host finds within a second, and ErrSendClosed if it is
// not known by then or the call completed; never the socket's error. Recv
// and Wait give the outcome either way.
func (c *Call) Send(ctx context.Context, payload frame.Payload, media frame.Media) error {
	if media == nil && c.tool.Desc.InputMedia {
		return errNoMedia()
	}
	return c.sendResult(c.sendChunk(ctx, payload, media))
}

// checkedPayload stands in for a payload whose bytes were checked already
// (validateChecked): an empty JSON object.
var checkedPayload = frame.Payload{0x80}

// validateChecked is f.Validate for a frame whose payload's bytes (if any)
// were checked already: for the check, the payload is stood in for by an
// empty object, which Validate's payload check passes at once, so that
// Send does not walk the bytes once more than the encoder does.
func validateChecked(f *frame.Frame) error {
	p := f.Payload
	if p != nil {
		f.Payload = checkedPayload
	}
	err := f.Validate()
	f.Payload = p
	return err
}

// sendChunk is Send, with a failed write returned as a *writeError.
func (c *Call) sendChunk(ctx context.Context, payload frame.Payload, media frame.Media) error {
	if payload != nil {
		if err := protocol.CheckPayload(payload); err != nil {
			return err
		}
		if err := validate(c.tool.Input, payload); err != nil {
			return err
		}
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.sendDone || c.providerDone.Load() {
		return ErrSendClosed
	}
	// The payload's bytes were checked above; Write checks the whole
	// frame once more before it encodes it.
	f := frame.Frame{CallID: c.id, Direction: frame.CallerToProvider, Sequence: c.send.Next(),
		Kind: frame.KindChunk, Payload: payload, Media: media}
	if err := validateChecked(&f); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Too large for the child: refused before the log has it as sent.
	if err := frameFits(&f, c.ch.limits); err != nil {
		return fmt.Errorf("host: send: %w", err)
	}
	c.rec.Input(f) // before the write: the child's answer to it must come after it in the log
	c.sendPkt.Frame = f
	defer func() { c.sendPkt.Frame = frame.Frame{} }() // keep no payload or media alive
	// Most sends are queued at once; only one that has to wait needs
	// watching its context.
	queued, err := c.conn.w.TryWrite(&c.sendPkt)
	if !queued && err == nil {
		// The write waits for the child, which may be waiting for its
		// output to be read: that must not wait for this caller's next
		// Recv (see readTurn).
		c.conn.handOver()
		// A frame cannot be taken back once partly written: if ctx ends
		// while the write blocks, the connection is closed and the call
		// ends.
		ran := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { // runs once, briefly; Send waits for it below
			defer close(ran)
			c.conn.fail(&synth{kind: frame.KindCancelled, code: frame.CodeCancelled, msg: "a send was abandoned: its context ended"})
		})
		err = c.conn.w.Write(context.Background(), coalesce.Stream, &c.sendPkt)
		if !stop() {
			<-ran
			c.sendDone = true
			return ctx.Err()
		}
	}
	if err != nil {
		c.sendDone = true // the connection is broken: nothing more can follow a frame that may be half written
		return &writeError{err}
	}
	c.ch.h.traffic.sent(&f)
	return c.send.Accept(&f)
}

// writeError is a write of the caller's direction that failed: the
// connection broke. Send and CloseSend turn it into the call's outcome
// (sendResult); it never reaches their callers.
type writeError struct{ err error }

func (e *writeError) Error() string { return "host: send: " + e.err.Error() }

// sendOutcomeWait bounds how long a Send or CloseSend whose write failed
// waits for the call's end: the reader finds it within exitWait plus
// exitDrain of the child's death, or at once for a connection the host
// closed.
const sendOutcomeWait = time.Second

// sendResult is what Send and CloseSend return for err, which their
// locked part returned (sendMu is no longer held): a failed write becomes
// the call's *frame.Error once the call's end is known, or ErrSendClosed.
// The connection's reader gets the turn: it reads what the child wrote
// before the connection broke, then its end, and gives the call its
// terminal.
func (c *Call) sendResult(err error) error {
	var we *writeError
	if !errors.As(err, &we) {
		return err
	}
	c.conn.handOver()
	t := time.NewTimer(sendOutcomeWait)
	defer t.Stop()
	select {
	case <-c.done:
		if c.termErr != nil {
			return c.termErr
		}
	case <-t.C:
	}
	return ErrSendClosed
}

// Recycle hands back the data of an inline-media frame Recv returned for
// this call, once the caller is done with it: the call's connection may
// read a later attachment into the same memory instead of allocating a
// new buffer, which for large media is most of the host's cost of reading
// (the media rows of bench/cmd/compare measure it). Recycling is optional:
// without it every attachment gets a new buffer, and a call ends and frees
// its stream slot the same way either way.
//
// After Recycle the caller must not touch f's media data (nor any slice
// of it: the bytes change under it), and must not recycle the same frame
// twice. The call's own history (Call.Events) never holds media data, so
// recycling changes nothing there. Recycle does nothing for a frame without inline media, for
// another call's frame, and when Config.CallLog.FullContent
// is set (observers and journals are then given the bytes,
// and may keep them). It is safe for concurrent use with the other
// methods.
func (c *Call) Recycle(f frame.Frame) {
	m, ok := f.Media.(*frame.InlineMedia)
	if !ok || m == nil || f.CallID != c.id || c.ch.h.cfg.CallLog.FullContent {
		return
	}
	c.conn.r.Recycle(m.Data)
}

// Events returns the call's events so far and as they come, in order and
// with its tree's numbers, ending after its end event (full payloads: the
// caller's own data; media as its kind, type and size, never its bytes,
// which Recv gave). The first event's After is 0; each later one's is the
// event before it in this stream, so a loss (past Config.CallLog.History
// events or HistoryBytes bytes) shows. Stop the loop to stop watching.
func (c *Call) Events() iter.Seq[calllog.Event] { return c.rec.Events() }

// Tree returns the id of the call's tree in the call log: the call's own
// id, or, for a step of a program, the outermost program's.
func (c *Call) Tree() string { return c.rec.Tree() }

// CloseSend half-closes the call: the caller's completed tells the
// handler its input is over; its output goes on.
//
// It returns ErrSendClosed after the caller's own CloseSend or Cancel, and
// for a call made WithInput; when its write fails because the connection
// broke, the call's *frame.Error or ErrSendClosed, as Send does. When
// the call already ended on the provider's side (a handler that fails at
// once, say), the host closed the caller's direction itself and CloseSend
// returns nil: there is nothing left to close, and Recv or Wait give the
// outcome.
func (c *Call) CloseSend() error {
	return c.sendResult(c.closeSend())
}

// closeSend is CloseSend, with a failed write returned as a *writeError.
func (c *Call) closeSend() error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.callerClosed.Swap(true) {
		return ErrSendClosed
	}
	if c.sendDone {
		return nil
	}
	err := c.writeCallerTerminalLocked(frame.KindCompleted)
	var we *writeError
	if errors.As(err, &we) && c.providerDone.Load() {
		// The call ended on the provider's side before the connection
		// broke (release has not closed the direction yet): nothing was
		// left to close, as when release had.
		return nil
	}
	return err
}

// writeCallerTerminalLocked writes the caller's terminal; sendMu is held.
func (c *Call) writeCallerTerminalLocked(kind frame.Kind) error {
	var f frame.Frame
	if kind == frame.KindCompleted {
		f, _ = frame.NewCompleted(c.id, frame.CallerToProvider, c.send.Next(), nil)
	} else {
		f, _ = frame.NewCancelled(c.id, frame.CallerToProvider, c.send.Next(), "")
	}
	c.sendDone = true
	c.rec.Input(f) // before the write, as in Send
	c.sendPkt.Frame = f
	queued, err := c.conn.w.TryWrite(&c.sendPkt)
	if !queued && err == nil {
		c.conn.handOver() // as in Send
		err = c.conn.w.Write(context.Background(), coalesce.Stream, &c.sendPkt)
	}
	c.sendPkt.Frame = frame.Frame{}
	if err != nil {
		return &writeError{err}
	}
	c.ch.h.traffic.sent(&f)
	return c.send.Accept(&f)
}

// closeCallerDirection makes sure the caller's terminal was written before
// the connection is reused; it reports whether the connection is still
// sound.
func (c *Call) closeCallerDirection() bool {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.sendDone {
		return c.send.Closed()
	}
	return c.writeCallerTerminalLocked(frame.KindCompleted) == nil
}

// Cancel cancels the call: a control cancel to the child and, unless the
// caller's direction is closed, the caller's cancelled frame. The provider
// answers with its terminal (normally cancelled); a child that does not
// within CancelGrace plus 1 s gets the call a synthetic cancelled and its
// connection closed. Cancel does not wait; keep reading for the terminal.
// Cancelling the call's context does the same.
func (c *Call) Cancel() {
	c.cancel("cancelled by the caller") // only the first cancel of a call acts
}

// Recv returns the next provider frame; after the terminal it returns
// io.EOF. It blocks until a frame is there or ctx is done (then ctx's
// error; the call goes on). The frame's slices may be kept.
//
// With a required journal the terminal is returned once the journal has
// kept the call's end; if it could not (see calllog.Journal), the terminal
// is still returned and the next Recv returns, once, a
// *calllog.JournalError matching calllog.ErrJournalEnd that holds the
// outcome and the cause (its JournalError.Kept says later whether the end was
// kept), then io.EOF.
func (c *Call) Recv(ctx context.Context) (frame.Frame, error) {
	if c.eof {
		if err := c.journalErr; err != nil {
			c.journalErr = nil
			return frame.Frame{}, err
		}
		return frame.Frame{}, io.EOF
	}
	if f, ok := c.out.take(); ok {
		return f, nil
	}
	// The caller reads its connection itself while it has the turn.
	if c.conn != nil && c.conn.callerRead(ctx, c) {
		if f, ok := c.out.take(); ok {
			return f, nil
		}
	}
	for {
		select {
		case <-c.out.ready:
			if f, ok := c.out.take(); ok {
				return f, nil
			}
		case <-c.done:
			if f, ok := c.out.take(); ok { // frames queued before the terminal come first
				return f, nil
			}
			if err := c.rec.Confirm(ctx); err != nil {
				var je *calllog.JournalError
				if !errors.As(err, &je) {
					return frame.Frame{}, err // ctx ended first: the terminal waits for the next Recv
				}
				c.journalErr, c.journalEnd = err, err
			}
			c.eof = true
			return c.term, nil
		case <-ctx.Done():
			return frame.Frame{}, ctx.Err()
		}
	}
}

// Frames returns the provider frames as an iterator, terminal included; it
// stops after the terminal, or after the required journal's error that
// follows it (see Recv). Breaking out of the loop early leaves the call
// running: Cancel it or keep reading.
func (c *Call) Frames() iter.Seq2[frame.Frame, error] {
	return func(yield func(frame.Frame, error) bool) {
		for {
			f, err := c.Recv(context.Background())
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(f, err) || err != nil {
				return
			}
			if f.Kind.IsTerminal() && c.journalErr == nil {
				return
			}
		}
	}
}

// Wait reads the output to its end, discarding chunks, and returns the
// result: the completed terminal's payload (nil when it has none), or a
// *frame.Error for a failed or cancelled one. With a required journal that
// did not confirm the call's end it returns the *calllog.JournalError
// instead (matching calllog.ErrJournalEnd; its Outcome holds the value or
// error), after waiting for the journal about twice its timeout at most,
// also when Recv or Frames already gave that error.
func (c *Call) Wait() (frame.Payload, error) {
	for {
		_, err := c.Recv(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if c.journalEnd != nil { // also when Recv already gave it
		return nil, c.journalEnd
	}
	if c.termErr != nil {
		return nil, c.termErr
	}
	return c.term.Payload, nil
}

// finish records the provider terminal (real or synthetic); called once, by
// the holder of the connection's read turn (see readTurn).
func (c *Call) finish(f frame.Frame, stderr string) {
	c.rec.Finish(recorder.OutcomeOf(f)) // never blocks; the stderr tail is not logged: it may hold user data
	if c.span != nil {
		c.endSpan(&f)
	}
	c.term = f
	if ce := callErrorOf(&f, stderr); ce != nil {
		ce.ctxErr = c.endedByContext(ce.err.Code)
		c.termErr = ce
	}
	c.providerDone.Store(true)
	c.endMu.Lock()
	if c.endCancel != nil {
		c.endCancel()
	}
	c.endMu.Unlock()
	close(c.done)
}

// ended returns a context that is done once the call's provider terminal
// was given (finish), so that a watch of the call's end costs no
// goroutine (context.AfterFunc).
func (c *Call) ended() context.Context {
	c.endMu.Lock()
	defer c.endMu.Unlock()
	if c.endCtx == nil {
		c.endCtx, c.endCancel = context.WithCancel(context.Background())
		if c.providerDone.Load() {
			c.endCancel()
		}
	}
	return c.endCtx
}

// endedByContext returns the error of the call's context when a terminal
// of code ended the call because that context ended, and nil otherwise. A
// timeout counts as the context's deadline once less than a millisecond of
// it is left: timeout_ms is the deadline rounded down to the millisecond,
// so the child's clock can run out up to that much before the context's.
func (c *Call) endedByContext(code frame.Code) error {
	if c.ctx == nil {
		return nil
	}
	switch code {
	case frame.CodeTimeout:
		if dl, ok := c.ctx.Deadline(); ok && time.Until(dl) < time.Millisecond {
			return context.DeadlineExceeded
		}
	case frame.CodeCancelled:
		return c.ctx.Err()
	}
	return nil
}

// release ends the connection's part in the call: called once, by the
// holder of the connection's read turn, after the terminal. conn is the
// connection to reuse, or nil when it was closed.
func (c *Call) release(conn *streamConn) {
	c.sendMu.Lock()
	c.sendDone = true // nothing more of this call goes on the connection
	c.sendMu.Unlock()
	c.clockMu.Lock()
	c.released = true
	for _, t := range []*time.Timer{c.deadlineT, c.cancelT, c.endT} {
		c.stopTimerLocked(t)
	}
	stopCtx := c.stopCtx
	c.clockMu.Unlock()
	if stopCtx() {
		c.ch.wg.Done() // the context watch never ran
	}
	c.conn.unbind()
	c.ch.releaseSlot(conn)
	c.ch.wg.Done() // the call's count, taken by acquire
}

// startClocks arms the call's timing and cancellation until it is
// released: the context watch, which cancels the call when the context is
// cancelled and, when its deadline passes (the deadline the invoke's
// timeout_ms gave the child), arms the deadline grace (synthetic timeout).
// Cancel, the cancel grace (synthetic cancelled) and the end grace
// (connection closed, not reused) are armed as they come. Clocks are
// timers and a context.AfterFunc rather than a goroutine per call, and a
// call that ends before its deadline never arms a timer for it; each clock
// acts on the connection under clockMu and only while the call is not
// released, so a late one never touches the connection's next call.
func (c *Call) startClocks() {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.ctx.Done() == nil { // never done (context.Background): nothing to watch
		c.stopCtx = func() bool { return false }
		return
	}
	// The context watch is counted in ch.wg until it has run or release
	// stopped it.
	c.ch.wg.Add(1)
	c.stopCtx = context.AfterFunc(c.ctx, func() { // runs once, briefly
		defer c.ch.wg.Done()
		// A Recv with the call's own context may be reading the
		// connection: it returns with ctx's error (callerRead arms no
		// watch of its own for that context).
		c.conn.interruptRead(c)
		if errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
			c.deadlinePassed()
			return
		}
		c.cancel("context cancelled")
	})
}

// deadlinePassed arms the deadline grace once the call's deadline, which
// the child knows as timeout_ms, has passed: a child that has not given
// its terminal by CancelGrace plus 1 s later gets the call a synthetic
// timeout and its connection closed.
func (c *Call) deadlinePassed() {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.released || c.providerDone.Load() {
		return
	}
	cfg := &c.ch.h.cfg
	c.deadlineT = c.afterLocked(cfg.CancelGrace+deadlineGrace,
		&synth{kind: frame.KindFailed, code: frame.CodeTimeout, msg: "no terminal by the deadline plus grace"}, "")
	c.conn.handOver() // the child's timeout terminal is read as it comes, Recv or not
}

// afterLocked arms a timer that, unless the call is released first, fails
// the connection with cause (and logs warn, when set). clockMu is held.
func (c *Call) afterLocked(d time.Duration, cause *synth, warn string) *time.Timer {
	c.ch.wg.Add(1)                    // done when the timer has run or was stopped
	return time.AfterFunc(d, func() { // runs once, briefly
		defer c.ch.wg.Done()
		c.clockMu.Lock()
		defer c.clockMu.Unlock()
		if c.released {
			return
		}
		if warn != "" {
			c.ch.h.log.Warn(warn, "child", c.ch.id, logCallID, c.id, logTreeID, c.rec.Tree())
		}
		if cause == cancelGraceOver && c.out.stalled() {
			// The child's answer may well be there, behind output the
			// caller has not read: say whose the wait was.
			cause = cancelUnread
		}
		c.conn.fail(cause)
	})
}

// The synthetic terminals of a cancel that got no provider terminal in
// time: the child gave none, or the caller stopped reading before it
// (its call's queue full, so the host was not reading the connection).
var (
	cancelGraceOver = &synth{kind: frame.KindCancelled, code: frame.CodeCancelled, msg: "no terminal within the cancel grace"}
	cancelUnread    = &synth{kind: frame.KindCancelled, code: frame.CodeCancelled, msg: "the caller did not read to the child's terminal within the cancel grace"}
)

// stopTimerLocked stops t, if armed and not yet run. clockMu is held.
func (c *Call) stopTimerLocked(t *time.Timer) {
	if t != nil && t.Stop() {
		c.ch.wg.Done()
	}
}

// cancel writes the control cancel and the caller's cancelled frame on a
// goroutine of its own (a blocked write never stops the clocks) and arms
// the cancel grace. Only the first cancel of a call does anything.
func (c *Call) cancel(reason string) {
	c.callerClosed.Store(true)
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.cancelled || c.released {
		return
	}
	c.cancelled = true
	cfg := &c.ch.h.cfg
	c.cancelT = c.afterLocked(cfg.CancelGrace+deadlineGrace, cancelGraceOver, "")
	c.ch.wg.Add(1)
	go func() { // stopped by the write returning: the child reads, or the connection fails
		defer c.ch.wg.Done()
		c.sendCancel(reason)
	}()
	c.conn.handOver() // the child's answer is read as it comes, Recv or not
}

// terminalClocks stops the deadline and cancel clocks once the terminal
// was given, and arms the end grace unless the next packet is already
// whole in the reader's buffer (endBuffered): whoever reads the terminal
// reads that packet next, without waiting. Called by the connection's
// reader after finish.
func (c *Call) terminalClocks(endBuffered bool) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.released {
		return
	}
	c.stopTimerLocked(c.deadlineT)
	c.stopTimerLocked(c.cancelT)
	c.deadlineT, c.cancelT = nil, nil
	if !endBuffered {
		c.endT = c.afterLocked(c.ch.h.cfg.endGrace, nil, "no end after the provider terminal: closing the stream connection")
	}
}

// sendCancel writes the control cancel and, if the caller's direction is
// still open, the caller's cancelled frame.
func (c *Call) sendCancel(reason string) {
	if !c.providerDone.Load() {
		c.ch.ctrlW.Write(context.Background(), coalesce.Stream, &wire.Cancel{CallID: c.id, Reason: reason})
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if !c.sendDone {
		c.writeCallerTerminalLocked(frame.KindCancelled)
	}
}
