package host

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/wire"
)

// exitWait bounds how long a stream that ended early waits for the child's
// exit to tell unreachable from transport_error (PROTOCOL.md §7).
const exitWait = 100 * time.Millisecond

// synth says which synthetic terminal a call gets when its connection is
// failed by the host: the cause recorded by streamConn.fail.
type synth struct {
	kind     frame.Kind // KindFailed, or KindCancelled
	code     frame.Code
	msg      string
	stderrOf *process // when set, the stderr tail is attached
}

// streamConn is one stream connection to a child. Its reader goroutine
// (run) owns the read side and the provider direction of the call bound to
// it; writes go through w, which is safe for concurrent use.
type streamConn struct {
	ch *child
	nc net.Conn
	r  *wire.Reader // owned by run
	w  *wire.Writer // closed by run when it returns

	closing  chan struct{} // closed by fail
	done     chan struct{} // closed when run has returned (the call, if any, has its terminal and was released)
	failOnce sync.Once
	cause    *synth // set by the first fail, before closing is closed

	mu   sync.Mutex
	cur  *Call // the bound call; nil while idle. Guarded by mu.
	gone bool  // the reader found the connection idle and left: nothing may be bound. Guarded by mu.
}

func newStreamConn(ch *child, nc net.Conn) *streamConn {
	c := &streamConn{
		ch: ch, nc: nc,
		r:       wire.NewReader(nc, ch.limits),
		w:       wire.NewWriter(nc, ch.limits),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.r.ReuseFrames() // run copies each frame out (outbox, finish, the log) before the next read
	return c
}

// fail closes the connection; the first call's cause (nil for a plain
// close) decides the synthetic terminal of the bound call, if it has none
// yet. Safe for concurrent use; idempotent.
func (c *streamConn) fail(cause *synth) {
	c.failOnce.Do(func() {
		c.cause = cause
		close(c.closing)
		c.nc.Close()
	})
}

func (c *streamConn) failed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// bind makes call the connection's call; it reports false when the
// connection's reader has already left (the connection is closing).
func (c *streamConn) bind(call *Call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	c.cur = call
	return true
}

// unbind makes the connection idle again.
func (c *streamConn) unbind() {
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
}

// run reads the connection until it fails or closes.
func (c *streamConn) run() {
	defer c.ch.wg.Done()
	defer close(c.done)
	defer c.ch.forget(c)
	defer c.w.Close() // after fail closed the connection, so it cannot block
	defer c.fail(nil)
	// at is when the packets in the reader's buffer arrived: the clock is
	// read once per read of the connection, not once per frame. burstEnd:
	// no whole packet is left in the buffer, so the next ReadPacket reads
	// the connection (and this packet is the last of its burst).
	var at time.Time
	burstEnd := true
	for {
		pkt, err := c.r.ReadPacket()
		if burstEnd {
			at = time.Now()
		}
		burstEnd = !c.r.PacketBuffered()
		c.mu.Lock()
		call := c.cur
		c.gone = call == nil
		c.mu.Unlock()
		if call == nil {
			// An idle connection: EOF or anything the child sends ends it.
			if err == nil {
				c.ch.h.log.Warn("child wrote on an idle stream connection", "child", c.ch.id, "type", pkt.Type())
			}
			return
		}
		if err != nil {
			c.broken(call, err)
			return
		}
		switch p := pkt.(type) {
		case *wire.Frame:
			if !c.providerFrame(call, &p.Frame, at, burstEnd) {
				return
			}
		case *wire.End:
			if !call.providerDone.Load() || p.CallID != call.id {
				c.violation(call, "end packet out of order")
				return
			}
			if !c.ended(call) {
				return
			}
		default:
			c.violation(call, pkt.Type().String()+" packet on a stream connection")
			return
		}
	}
}

// providerFrame checks and delivers one provider frame, received at at;
// burstEnd says no later packet is already buffered. It reports whether the
// connection goes on.
func (c *streamConn) providerFrame(call *Call, f *frame.Frame, at time.Time, burstEnd bool) bool {
	if call.providerDone.Load() {
		c.violation(call, "frame after the provider terminal")
		return false
	}
	if err := call.fence.Accept(f); err != nil {
		c.violation(call, "provider frame refused: "+err.Error())
		return false
	}
	var err error
	switch f.Kind {
	case frame.KindChunk:
		if f.Payload != nil {
			err = validate(call.tool.output, "output", f.Payload)
		}
	case frame.KindCompleted:
		if f.Payload != nil {
			err = validate(call.tool.result, "result", f.Payload)
		}
	}
	if err != nil {
		c.violation(call, err.Error())
		return false
	}
	if f.Kind.IsTerminal() {
		call.finish(*f, "")
		call.terminalClocks()
		return true
	}
	// Recorded before the caller can read it, so that Text and Events
	// include every chunk Recv returned. Never blocks: the log only queues.
	call.rec.OutputAt(*f, at)
	// The caller is woken for the frames of a burst at its last one: the
	// next packet, when it is already whole in the reader's buffer, is
	// decoded at once and comes right after (see outbox).
	if !call.out.put(*f, burstEnd, c.closing) {
		c.broken(call, nil)
		return false
	}
	call.given = f.Sequence + 1
	return true
}

// violation ends the call for a provider packet that breaks the rules:
// before the provider terminal the caller gets a synthetic invalid_frame;
// after it the outcome stands. The connection is closed either way.
func (c *streamConn) violation(call *Call, reason string) {
	c.ch.h.log.Warn("provider broke the protocol", "child", c.ch.id, "pid", c.ch.proc.pid, "call", call.id, "reason", reason)
	c.fail(&synth{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: reason})
	c.broken(call, nil)
}

// broken ends the call on a connection that failed, closed, or broke the
// protocol (err, when not nil, is the read error), and releases it.
func (c *streamConn) broken(call *Call, err error) {
	if !call.providerDone.Load() {
		cause := c.causeOf(err)
		var stderr string
		if cause.stderrOf != nil {
			stderr = cause.stderrOf.stderrTailAfterExit()
		}
		f := frame.Frame{CallID: call.id, Direction: frame.ProviderToCaller, Sequence: call.given,
			Kind: cause.kind, Synthetic: true, Error: &frame.Error{Code: cause.code, Message: frame.SanitizeMessage(cause.msg)}}
		call.finish(f, stderr)
	}
	c.fail(nil)
	// The handler may still run, unaware: its connection's reader can be
	// blocked on a full ingress queue. The control connection reaches it.
	if !c.ch.proc.dead() {
		c.ch.ctrlW.WritePacket(&wire.Cancel{CallID: call.id, Reason: "stream connection closed by the host"})
	}
	call.release(nil)
}

// causeOf decides the synthetic terminal for a connection that failed.
func (c *streamConn) causeOf(err error) *synth {
	select {
	case <-c.closing:
		if c.cause != nil {
			return c.cause
		}
	default:
	}
	if err != nil {
		var inv *wire.InvalidError
		if errors.As(err, &inv) || errors.Is(err, wire.ErrProtocol) {
			return &synth{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: "provider packet refused: " + err.Error()}
		}
	}
	// The stream ended early: is the child gone?
	ch := c.ch
	t := time.NewTimer(exitWait)
	defer t.Stop()
	select {
	case <-ch.proc.exited:
		ch.markDead()
		return ch.unreachable(fmt.Errorf("%w: %s", ErrChildDied, ch.proc.exitStatus()))
	case <-t.C:
	}
	if ch.proc.gone() { // exited, not reaped yet
		ch.markDead()
		return ch.unreachable(fmt.Errorf("%w: exited", ErrChildDied))
	}
	ch.h.mu.Lock()
	dead := ch.state == StateDead
	cause := ch.cause
	ch.h.mu.Unlock()
	if dead {
		return ch.unreachable(cause)
	}
	return &synth{kind: frame.KindFailed, code: frame.CodeTransportError, msg: "stream connection ended before the provider terminal"}
}

// ended handles the child's end after the provider terminal: the call is
// over on both sides once the host's caller terminal is written, and the
// connection goes back to the idle list. It reports whether the
// connection goes on.
func (c *streamConn) ended(call *Call) bool {
	if !call.closeCallerDirection() {
		c.fail(nil)
		call.release(nil)
		return false
	}
	call.release(c)
	return !c.failed()
}

// stderrTailAfterExit returns the stderr tail once the forwarders have read
// what the dead process wrote (bounded wait).
func (p *process) stderrTailAfterExit() string {
	t := time.NewTimer(exitWait)
	defer t.Stop()
	select {
	case <-p.logDone:
	case <-t.C:
	}
	return p.stderr.String()
}
