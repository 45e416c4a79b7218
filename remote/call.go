package remote

import (
	"context"
	"errors"
	"io"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// CancelWait is how long after Cancel, or after the call's deadline, the
// client waits for the serving host's terminal before it gives a
// synthetic one (cancelled, or failed timeout): the host's own cancel
// grace (1 s) plus a second.
const CancelWait = 2 * time.Second

// sendOutcomeWait bounds how long a Send whose link failed waits for the
// call's outcome.
const sendOutcomeWait = time.Second

// Call is one remote call. Output is: the provider's started (sequence
// 0, given by the client when the invoke is sent), the provider's chunks,
// exactly one terminal (Synthetic when the serving host or this client
// made it up), then io.EOF. A Call must be read to its terminal or
// cancelled: until then the serving host holds a stream slot for it, and
// its output waits, within the call's window, for Recv (backpressure
// reaches the remote child).
//
// Send, CloseSend and Cancel are safe for concurrent use with each other
// and with the reading methods; Recv, Frames and Wait must be used by one
// goroutine at a time.
type Call struct {
	c   *Client
	t   *toolschema.Tool
	id  string
	ctx context.Context
	l   *link

	frames chan frame.Frame // provider frames, handed over one at a time (unbuffered: the reader waits, so the link's window is the only buffer)
	done   chan struct{}    // closed once term is set
	term   frame.Frame
	err    *frame.Error

	// Owned by the reading goroutine.
	startedGiven bool
	eof          bool

	providerDone atomic.Bool

	sendMu       sync.Mutex
	send         *sequence.Fence // caller direction; guarded by sendMu
	sendDone     bool            // guarded by sendMu
	sendBuf      []byte          // guarded by sendMu
	callerClosed atomic.Bool

	// rec records the call as a step of the caller's running call (a
	// host's), nil when ctx carried none; its end is recorded by finish.
	rec *recorder.Record
	// jerr is the caller's journal's error on the step's end (a required
	// journal that did not confirm it); set before done is closed, then
	// owned by the reading goroutine, which clears it once Recv gave it.
	jerr error
	// jend is the same error, kept for every later Wait; set with jerr.
	jend error

	clockMu   sync.Mutex
	cancelled bool
	timers    []*time.Timer // guarded by clockMu; stopped at the terminal
	stopCtx   func() bool
	finished  bool
}

func newCall(c *Client, t *toolschema.Tool, id string, ctx context.Context) *Call {
	return &Call{c: c, t: t, id: id, ctx: ctx, frames: make(chan frame.Frame),
		done: make(chan struct{}), send: sequence.New(id, frame.CallerToProvider, 0)}
}

// initial returns the call's first stream bytes: invoke, the caller's
// started and, for a closed input, its chunks and completed.
func (c *Call) initial(inv *wire.Invoke, input []frame.Payload, closed bool) ([]byte, error) {
	b, _, err := wire.AppendPacket(nil, inv, streamLimits)
	if err != nil {
		return nil, err
	}
	fs := []frame.Frame{}
	st, _ := frame.NewStarted(c.id, frame.CallerToProvider)
	fs = append(fs, st)
	for i, p := range input {
		f, err := frame.NewChunk(c.id, frame.CallerToProvider, uint64(i+1), p, nil)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	if closed {
		f, _ := frame.NewCompleted(c.id, frame.CallerToProvider, uint64(len(input)+1), nil)
		fs = append(fs, f)
		c.sendDone = true
		c.callerClosed.Store(true)
	}
	for i := range fs {
		if b, _, err = wire.AppendPacket(b, &wire.Frame{Frame: fs[i]}, streamLimits); err != nil {
			return nil, err
		}
		if err := c.send.Accept(&fs[i]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ID returns the call's id.
func (c *Call) ID() string { return c.id }

// Tree returns the id of the tree the serving host records the call in
// (its log's tree of its own for this call, whose started event names
// this call's caller): "" until the serving host named it, which it does
// before the call's first chunk or terminal; a call that never reached a
// host has none. Read that tree from the store the serving host's
// journal writes (skulk-host replay TREE).
func (c *Call) Tree() string {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.tree
}

// named records the serving host's tree of the call as the request of
// the caller's step (calllog.Event.Remote); run by the link when the
// tree message came.
func (c *Call) named(tree string) {
	if c.rec != nil {
		c.rec.Request(recorder.RequestInfo{Child: "remote:" + c.Host(), Remote: &calllog.Link{Tree: tree, Call: tree}})
	}
}

// refused ends the caller's step, when there is one, as refused before
// anything was sent, and returns err joined with the journal's error on
// that end.
func (c *Call) refused(ctx context.Context, class string, code frame.Code, err error) error {
	if c.rec == nil {
		return err
	}
	var je *calllog.JournalError
	if jerr := c.rec.End(ctx, recorder.Refused(class, code, err)); errors.As(jerr, &je) {
		return errors.Join(err, jerr)
	}
	return err
}

// Tool returns the id of the called tool.
func (c *Call) Tool() string { return c.t.Desc.ID }

// Host returns the id of the serving host that took the call ("" until
// its accept came).
func (c *Call) Host() string {
	c.l.mu.Lock()
	out := c.l.out
	c.l.mu.Unlock()
	// skulk.NAME.h.ID.TOKEN
	parts := strings.Split(out, ".")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

// startClocks arms the deadline's backstop and the context's watch.
func (c *Call) startClocks() {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.finished { // the terminal came first (no responders): nothing to arm, nothing left registered on ctx
		return
	}
	if d, ok := c.ctx.Deadline(); ok {
		c.timers = append(c.timers, time.AfterFunc(time.Until(d)+CancelWait, func() {
			c.l.abort(&linkError{frame.CodeTimeout, "no terminal by the deadline and its grace"})
		}))
	}
	if c.ctx.Done() != nil {
		c.stopCtx = context.AfterFunc(c.ctx, func() {
			if !errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
				c.cancel("the call's context was cancelled")
			}
		})
	}
}

// Cancel cancels the call: a cancel message reaches the serving host
// (whatever the state of the streams), which cancels the call on its
// child. The provider answers with its terminal (normally cancelled); if
// none came within CancelWait, the call gets a synthetic cancelled.
// Cancel does not wait; keep reading for the terminal.
func (c *Call) Cancel() { c.cancel("cancelled by the caller") }

func (c *Call) cancel(reason string) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if c.cancelled || c.finished {
		return
	}
	c.cancelled = true
	c.callerClosed.Store(true)
	c.l.cancel()
	c.timers = append(c.timers, time.AfterFunc(CancelWait, func() {
		c.l.abort(&linkError{frame.CodeCancelled, reason + "; the serving host gave no terminal in time"})
	}))
}

// Send sends one caller chunk, as host.Call.Send does: the payload is
// checked against the tool's input_schema (a *host.SchemaError, nothing
// sent), and Send blocks while the serving host gives no credit
// (backpressure). A Send whose ctx ends while it waits ends the call (a
// chunk cannot be taken back half sent): it returns ctx's error and the
// call a synthetic cancelled. Errors: host.ErrSendClosed after CloseSend,
// Cancel or the provider terminal; the call's *frame.Error when the
// call ended meanwhile.
func (c *Call) Send(ctx context.Context, payload frame.Payload, media frame.Media) error {
	if media == nil && c.t.Desc.InputMedia {
		return &host.SchemaError{Schema: "input", Keyword: "input_media", Value: "a chunk without media"}
	}
	if payload != nil {
		if err := protocol.CheckPayload(payload); err != nil {
			return err
		}
		if err := schemaRefusal(c.t.Input.Validate(payload)); err != nil {
			return err
		}
	}
	c.sendMu.Lock()
	if c.sendDone || c.callerClosed.Load() || c.providerDone.Load() {
		c.sendMu.Unlock()
		return host.ErrSendClosed
	}
	f := frame.Frame{CallID: c.id, Direction: frame.CallerToProvider, Sequence: c.send.Next(), Kind: frame.KindChunk, Payload: payload, Media: media}
	err := c.writeLocked(ctx, &f)
	c.sendMu.Unlock()
	return c.sendResult(err)
}

// writeLocked writes f; sendMu is held.
func (c *Call) writeLocked(ctx context.Context, f *frame.Frame) error {
	hdr, att, err := wire.AppendPacket(c.sendBuf[:0], &wire.Frame{Frame: *f}, streamLimits)
	if err != nil {
		return err
	}
	c.sendBuf = hdr[:0]
	err = c.l.write(ctx, hdr)
	if err == nil && len(att) > 0 {
		err = c.l.write(ctx, att)
	}
	if err != nil {
		c.sendDone = true
		if ctx.Err() != nil {
			c.l.abort(&linkError{frame.CodeCancelled, "a send was abandoned: its context ended"})
			return ctx.Err()
		}
		return &sendFailed{}
	}
	return c.send.Accept(f)
}

// sendFailed is a write the link's end cut short.
type sendFailed struct{}

func (*sendFailed) Error() string { return "remote: send: the call ended" }

// sendResult turns a write the link's end cut short into the call's
// outcome, once known.
func (c *Call) sendResult(err error) error {
	var sf *sendFailed
	if !errors.As(err, &sf) {
		return err
	}
	t := time.NewTimer(sendOutcomeWait)
	defer t.Stop()
	select {
	case <-c.done:
		if c.err != nil {
			return c.err
		}
	case <-t.C:
	}
	return host.ErrSendClosed
}

// CloseSend half-closes the call: the caller's completed tells the
// handler its input is over. It returns host.ErrSendClosed after the
// caller's own CloseSend or Cancel and for a call made WithInput; nil when
// the provider already ended the call.
func (c *Call) CloseSend() error {
	c.sendMu.Lock()
	if c.callerClosed.Swap(true) {
		c.sendMu.Unlock()
		return host.ErrSendClosed
	}
	if c.sendDone || c.providerDone.Load() {
		c.sendMu.Unlock()
		return nil
	}
	f, _ := frame.NewCompleted(c.id, frame.CallerToProvider, c.send.Next(), nil)
	err := c.writeLocked(c.ctx, &f)
	c.sendDone = true
	c.sendMu.Unlock()
	return c.sendResult(err)
}

// Recv returns the next provider frame; after the terminal it returns
// io.EOF. It blocks until a frame is there or ctx is done (then ctx's
// error; the call goes on). The frame's slices may be kept.
//
// For a call recorded as a step of the caller's host whose end that
// host's required journal did not confirm, the terminal is still returned
// and the next Recv returns, once, the *calllog.JournalError (matching
// calllog.ErrJournalEnd), then io.EOF, as host.Call.Recv does.
func (c *Call) Recv(ctx context.Context) (frame.Frame, error) {
	if c.eof {
		if err := c.jerr; err != nil {
			c.jerr = nil
			return frame.Frame{}, err
		}
		return frame.Frame{}, io.EOF
	}
	if !c.startedGiven {
		c.startedGiven = true
		return frame.NewStarted(c.id, frame.ProviderToCaller)
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

// Frames returns the provider frames as an iterator, terminal included,
// and a required journal's unconfirmed end after it (see Recv).
// Breaking out of the loop early leaves the call running: Cancel it or
// keep reading.
func (c *Call) Frames() iter.Seq2[frame.Frame, error] {
	return func(yield func(frame.Frame, error) bool) {
		for {
			f, err := c.Recv(context.Background())
			if errors.Is(err, io.EOF) {
				return
			}
			// After the terminal, Recv gives the journal's error, if
			// any, then io.EOF, without blocking.
			if !yield(f, err) || err != nil {
				return
			}
		}
	}
}

// Wait reads the output to its end, discarding chunks, and returns the
// completed terminal's payload, or a *frame.Error for a failed or
// cancelled one. For a call recorded as a step of the caller's host
// (Client.Call) whose end that host's required journal did not confirm,
// it returns the *calllog.JournalError instead (matching
// calllog.ErrJournalEnd; its Outcome holds the value or error), also
// when Recv or Frames already gave it, as host.Call.Wait does: a caller
// never takes a result as final while its journal has not kept it (the
// error's JournalError.Kept says when it is).
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
	if c.jend != nil { // also when Recv already gave it
		return nil, c.jend
	}
	if c.err != nil {
		return nil, c.err
	}
	return c.term.Payload, nil
}

// read is the call's reader: it reads the serving host's stream, checks
// every provider frame (shape, sequence fence, output and result
// schemas) and hands it to Recv, and gives the call its terminal: the
// provider's, or a synthetic one when the link ended first.
func (c *Call) read() {
	defer c.c.wg.Done()
	defer c.c.links.drop(c.l)
	r := packetio.NewReader(c.l, streamLimits)
	r.ExpectCallID(c.id)
	fence := sequence.New(c.id, frame.ProviderToCaller, 1)
	for {
		p, err := r.ReadPacket()
		if err != nil {
			le := readCause(err)
			c.l.abort(le)
			c.finish(c.synthetic(fence.Next(), c.l.cause()))
			return
		}
		wf, ok := p.(*wire.Frame)
		if ok && wf.CallID != c.id {
			ok = false
		}
		next := fence.Next() // the sequence a refused frame leaves for the synthetic terminal
		var bad *linkError
		if !ok {
			bad = errUnwanted
		} else if err := fence.Accept(&wf.Frame); err != nil {
			bad = &linkError{frame.CodeInvalidFrame, "a provider frame broke the sequence fence"}
		} else if err := c.checkSchemas(&wf.Frame); err != nil {
			bad = &linkError{frame.CodeInvalidFrame, err.Error()}
		}
		if bad != nil {
			c.l.abort(bad)
			c.finish(c.synthetic(next, c.l.cause()))
			return
		}
		f := wf.Frame
		if f.Kind.IsTerminal() {
			c.providerDone.Store(true)
			f.Synthetic = c.readEnd(r)
			c.finish(f)
			return
		}
		select {
		case c.frames <- f:
		case <-c.l.failed:
			c.finish(c.synthetic(f.Sequence, c.l.cause()))
			return
		}
	}
}

// readEnd reads the end and the fin after a terminal; it reports whether
// the fin said the terminal was synthetic. A link that ends first leaves
// the terminal as it came. The serving host sends both at once after the
// terminal, so they must come within the heartbeat timeout of it, pings
// or not (docs/protocol.md §10.5): past that the link ends with errNoFin
// (the host is told with an abort) and the terminal stays as it came.
func (c *Call) readEnd(r *packetio.Reader) bool {
	fired := make(chan struct{})
	late := time.AfterFunc(c.c.opts.HeartbeatTimeout, func() { // stopped below, or waited for
		defer close(fired)
		c.l.abort(errNoFin)
	})
	defer func() {
		if !late.Stop() {
			<-fired
		}
	}()
	p, err := r.ReadPacket()
	if e, ok := p.(*wire.End); err != nil || !ok || e.CallID != c.id {
		return false
	}
	if _, err := r.ReadPacket(); !errors.Is(err, io.EOF) {
		return false
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.finFlags&message.FinSynthetic != 0
}

// checkSchemas checks a provider frame's payload against the tool's
// output or result schema.
func (c *Call) checkSchemas(f *frame.Frame) error {
	switch {
	case f.Kind == frame.KindChunk && f.Payload != nil:
		return schemaRefusal(c.t.Output.Validate(f.Payload))
	case f.Kind == frame.KindCompleted && f.Payload != nil:
		return schemaRefusal(c.t.Result.Validate(f.Payload))
	}
	return nil
}

// synthetic makes the terminal for a link that ended with cause, at
// sequence seq.
func (c *Call) synthetic(seq uint64, cause error) frame.Frame {
	le, ok := cause.(*linkError)
	if !ok {
		le = &linkError{frame.CodeTransportError, "the call's link failed"}
	}
	var f frame.Frame
	if le.code == frame.CodeCancelled {
		f, _ = frame.NewCancelled(c.id, frame.ProviderToCaller, seq, le.msg)
	} else {
		f, _ = frame.NewFailed(c.id, frame.ProviderToCaller, seq, le.code, le.msg)
	}
	f.Synthetic = true
	return f
}

// finish publishes the terminal and stops the call's clocks; called once,
// by read.
func (c *Call) finish(f frame.Frame) {
	c.providerDone.Store(true)
	c.clockMu.Lock()
	c.finished = true
	for _, t := range c.timers {
		t.Stop()
	}
	if c.stopCtx != nil {
		c.stopCtx()
	}
	c.clockMu.Unlock()
	c.l.fail(errClosed) // the link is done either way
	c.term = f
	if c.rec != nil {
		var je *calllog.JournalError
		if err := c.rec.End(context.WithoutCancel(c.ctx), recorder.OutcomeOf(f)); errors.As(err, &je) {
			c.jerr, c.jend = err, err
		}
	}
	switch f.Kind {
	case frame.KindFailed:
		c.err = &frame.Error{Code: f.Error.Code, Message: f.Error.Message, Synthetic: f.Synthetic}
	case frame.KindCancelled:
		c.err = &frame.Error{Code: frame.CodeCancelled, Synthetic: f.Synthetic}
		if f.Error != nil {
			c.err.Message = f.Error.Message
		}
	}
	close(c.done)
}
