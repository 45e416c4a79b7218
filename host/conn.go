package host

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/nbsys"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// exitWait bounds how long a stream that ended early waits for the child's
// exit to tell unreachable from transport_error (docs/protocol.md §7, "EOF
// before the terminal").
const exitWait = 100 * time.Millisecond

// synth says which synthetic terminal a call gets when its connection is
// failed by the host: the cause recorded by streamConn.fail.
type synth struct {
	kind     frame.Kind // KindFailed, or KindCancelled
	code     frame.Code
	msg      string
	stderrOf *process // when set, the stderr tail is attached
}

// frameError is the error a terminal made of s carries, its message
// sanitized as every sender's must be.
func (s *synth) frameError() *frame.Error {
	return &frame.Error{Code: s.code, Message: protocol.SanitizeMessage(s.msg)}
}

// readTurn says who reads a stream connection. One goroutine at a time
// does; the turn passes under streamConn.mu, and with it the provider
// direction of the bound call (the reader: its fence, given, outbox and buffer).
type readTurn uint8

const (
	// turnNone: nobody. The connection is idle and its reader goroutine
	// waits; the child's writes wait in the socket until the next call.
	turnNone readTurn = iota
	// turnReader: the connection's reader goroutine (run).
	turnReader
	// turnCaller: the bound call's own Recv, on the caller's goroutine
	// (callerRead). Every call starts with it: a caller that waits in
	// Recv may as well read its answer itself, which saves waking the
	// reader and then the caller for every read: for 1 MiB media chunks
	// the hand-off cost a fifth of the throughput, and a small call takes
	// about a sixth less time without it (figures and command:
	// docs/performance.md, "Mechanisms and their measured reasons"). Until the caller
	// asks, the child's output waits in the socket, as backpressure. Whatever
	// needs the connection read while the caller is not in Recv gives
	// the turn to the reader for the rest of the call (handOver): cancel,
	// the deadline, a failure, the child's exit, and a Send or CloseSend
	// whose write has to wait for the child, which may itself be waiting
	// for its output to be read.
	turnCaller
)

// streamConn is one stream connection to a child. Its reader goroutine
// (run) reads it while the reader has the turn (see readTurn); writes go
// through w, which is safe for concurrent use.
type streamConn struct {
	ch *child
	nc net.Conn
	rc syscall.RawConn  // nc's, for idleSound; nil when nc has none
	w  *coalesce.Writer // closed by run when it returns

	// idleSound's peek, made once so that it allocates nothing; used by
	// the goroutine that took the connection from the idle list.
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	peekN   int
	peekErr error

	// held: the caller's Recv left whole packets in the reader's buffer
	// when it stopped reading; set by callerRead, cleared when the reader
	// goroutine or the next call takes the reading. Read by the
	// supervisor's lost-call check: what waits there is output the child
	// already wrote.
	held atomic.Bool

	closing  chan struct{} // closed by fail
	done     chan struct{} // closed when run has returned (the call, if any, has its terminal and was released)
	wake     chan struct{} // size 1: "look at the turn", to the reader goroutine; a full channel already says so
	failOnce sync.Once
	cause    *synth // set by the first fail, before closing is closed

	mu          sync.Mutex
	cur         *Call    // the bound call; nil while idle. Guarded by mu.
	gone        bool     // the reader goroutine returned: nothing may be bound. Guarded by mu.
	turn        readTurn // guarded by mu
	reading     *Call    // the call whose Recv is reading (turn is turnCaller); cleared by its unbind. Guarded by mu
	wantReader  bool     // an event needs the reader once the caller stops reading; guarded by mu
	interrupted bool     // the reading Recv's context set a past read deadline; guarded by mu
	exiting     bool     // the child exited: read what it wrote, then EOF (drainStreams); guarded by mu

	// reader reads the connection for its bound call: its fields and
	// methods are owned by the holder of the turn.
	reader
}

func newStreamConn(ch *child, nc net.Conn) *streamConn {
	c := &streamConn{
		ch: ch, nc: nc,
		w:       coalesce.New(nc, ch.limits),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	c.reader.c, c.burstEnd = c, true
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
	var src io.Reader = nc // without a RawConn, no read is known to wait: the reader paces by the clock alone
	if c.rc != nil {
		src = newConnSource(nc, c.rc, c.readWaits)
	}
	c.r = packetio.NewReader(src, ch.limits)
	c.peekFn = c.peek
	c.leaveGateFn = c.leaveGate
	c.r.ReuseFrames() // each frame is copied out (outbox, finish, the log) before the next read
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
		c.handOver() // the bound call's terminal comes from reading the closed connection
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

// bind makes call the connection's call, read by its caller until
// something hands the turn over (see turnCaller); it reports false when
// the reader goroutine has already returned (the connection is closing).
func (c *streamConn) bind(call *Call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	c.cur = call
	c.held.Store(false)
	c.wantReader = false
	c.bindCall(call) // nobody reads an idle connection
	c.turn = turnCaller
	// The connection was idle: its reading starts a new busy interval
	// (nobody else touches these until the turn is the caller's).
	c.yielded, c.busy = time.Now(), false
	return true
}

// unbind makes the connection idle again; called by the holder of the
// turn, which reads no more.
func (c *streamConn) unbind() {
	c.leaveGate()
	c.gateStop = [2]<-chan struct{}{}
	c.out = nil         // an idle connection keeps nothing of its last call alive
	c.r.ReleaseBuffer() // an idle connection holds no read buffer (a child that wrote on it is caught by idleSound)
	c.mu.Lock()
	// A Recv that is reading finishes its loop without reading again; the
	// next call's caller may read at once.
	c.cur, c.turn, c.reading = nil, turnNone, nil
	c.endInterruptLocked()
	if c.failed() {
		c.wakeLocked() // the reader goroutine returns
	}
	c.mu.Unlock()
}

// interruptRead makes a read of call's caller that is under way, or about
// to start, return at once (with a deadline error, readInterrupted), and
// does nothing when the caller is not reading. Safe for concurrent use.
func (c *streamConn) interruptRead(call *Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading == call {
		c.interrupted = true
		c.nc.SetReadDeadline(time.Unix(1, 0)) // the read returns at once
	}
}

// endInterruptLocked takes back the past read deadline a reading Recv's
// context set, if it did; mu is held.
func (c *streamConn) endInterruptLocked() {
	if c.interrupted {
		c.interrupted = false
		c.nc.SetReadDeadline(time.Time{})
	}
}

func (c *streamConn) wakeLocked() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// handOver gives the reader goroutine the turn of a call its caller reads,
// now if the caller is not in Recv, or when it leaves it.
func (c *streamConn) handOver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handOverLocked()
}

func (c *streamConn) handOverLocked() {
	switch {
	case c.turn != turnCaller:
	case c.reading != nil:
		c.wantReader = true
	default:
		c.turn = turnReader
		c.wakeLocked()
	}
}

// exitDrain tells the connection that its child exited: an idle one is
// read to EOF by its reader goroutine, which then returns, and a bound
// call's reading goes to the reader goroutine (handOver).
func (c *streamConn) exitDrain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exiting = true
	if c.cur == nil {
		c.wakeLocked()
		return
	}
	c.handOverLocked()
}

// run is the connection's reader goroutine: it reads for the bound call
// while it has the turn, and returns once the connection failed while
// idle, or after an idle connection of an exited child was read to EOF.
func (c *streamConn) run() {
	defer c.ch.wg.Done()
	defer close(c.done)
	defer c.ch.forget(c)
	defer c.w.Close() // after fail closed the connection, so it cannot block
	defer c.fail(nil)
	for {
		select {
		case <-c.wake:
		case <-c.closing:
		}
		c.mu.Lock()
		call := c.cur
		switch {
		case call != nil && c.turn == turnReader:
			c.mu.Unlock()
			c.held.Store(false) // this goroutine reads the buffer now, until the call is released
			for c.readBurst(call) == readMore {
			}
			// The call was released (unbind left the busy gate), or the
			// connection failed.
			continue
		case call == nil && (c.exiting || c.failed()):
			c.gone = true
			c.mu.Unlock()
			if !c.failed() {
				c.readIdle()
			}
			return
		}
		// A call its caller reads, or nothing to do yet. A failed
		// connection's turn comes here through fail's handOver, or when
		// the reading caller leaves Recv.
		c.mu.Unlock()
		if c.failed() {
			// closing stays closed: wait for the turn, or for the
			// reading caller's unbind, without spinning.
			<-c.wake
		}
	}
}

// readIdle reads an idle connection of an exited child: EOF, or anything
// the child wrote while no call was bound (it then broke the protocol).
func (c *streamConn) readIdle() {
	pkt, err := c.r.ReadPacket()
	if err == nil {
		c.ch.h.log.Warn("child wrote on an idle stream connection", "child", c.ch.id, "type", packetio.TypeOf(pkt))
	}
}

// idleSound reports whether an idle connection can carry the next call:
// the child neither closed it nor wrote on it while it was idle (a peek
// that does not wait). Nobody reads an idle connection, so this is where
// the host finds out. Called by the one goroutine that took c from the
// idle list.
func (c *streamConn) idleSound() bool {
	wrote := c.r.Buffered() > 0
	if !wrote && c.rc != nil {
		if err := c.rc.Read(c.peekFn); err != nil {
			return false
		}
		switch {
		case c.peekErr == syscall.EAGAIN || c.peekErr == syscall.EWOULDBLOCK:
			return true
		case c.peekErr != nil || c.peekN == 0: // an error, or EOF: the child closed it
			return false
		}
		wrote = true
	}
	if wrote {
		c.ch.h.log.Warn("child wrote on an idle stream connection", "child", c.ch.id)
	}
	return !wrote
}

// peek is idleSound's look at the socket: one byte, kept there, without
// waiting for readiness.
func (c *streamConn) peek(fd uintptr) bool {
	// Raw: a look that never waits need not wake the runtime's monitor
	// thread (package nbsys).
	c.peekN, c.peekErr = nbsys.Peek(int(fd), &c.peekBuf)
	return true
}

func (c *streamConn) isInterrupted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupted
}

// callerRead reads the connection for call on the calling goroutine, from
// Recv, when the call's caller has the turn: until it has a frame for
// Recv, the call ended, or ctx is done. It reports whether it read (false:
// someone else has the turn; wait for the outbox).
func (c *streamConn) callerRead(ctx context.Context, call *Call) bool {
	if ctx.Err() != nil {
		return false
	}
	c.mu.Lock()
	if c.cur != call || c.turn != turnCaller || c.reading != nil {
		c.mu.Unlock()
		return false
	}
	c.reading = call
	c.mu.Unlock()
	c.gateStop = [2]<-chan struct{}{ctx.Done(), call.ctx.Done()}
	// The context's watch is armed only for a read that may wait for the
	// connection, so that the frames of a burst already in the reader's
	// buffer cost none.
	stop := func() bool { return false }
	armed := false
	arm := func() {
		armed = true
		c.ch.wg.Add(1) // counted in ch.wg until it has run or was stopped
		stop = context.AfterFunc(ctx, func() {
			defer c.ch.wg.Done()
			c.interruptRead(call)
		})
	}
	// The frames already in the reader's buffer go into the outbox, up to
	// half its bounds so that it never fills under its own consumer; the
	// connection is read again only when nothing was delivered. After the
	// terminal, the end is read when it came with it.
	var res readResult
	for {
		// The call's own context is watched already (Call.startClocks),
		// and its watch interrupts this read too.
		if !armed && ctx.Done() != nil && ctx != call.ctx && !c.r.PacketBuffered() {
			arm()
		}
		if res = c.readBurst(call); res != readMore {
			break
		}
		buffered := c.r.PacketBuffered()
		if call.providerDone.Load() {
			if !buffered {
				break
			}
			continue
		}
		if n, room := call.out.fill(); n > 0 && (!buffered || !room) {
			break
		}
	}
	if stop() {
		c.ch.wg.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading != call {
		return true // released meanwhile (unbind); the connection may be another call's already
	}
	c.gateStop = [2]<-chan struct{}{}
	// Still this caller's turn. It stops reading: the busy gate's slot
	// goes to the next busy reader (the caller's own code runs outside
	// the gate), and a buffer with nothing left in it goes back.
	c.leaveGate()
	c.r.ReleaseBuffer()
	c.held.Store(c.r.PacketBuffered()) // still this caller's buffer: reading is this call

	c.reading = nil
	c.endInterruptLocked()
	if c.turn == turnCaller && (c.wantReader || res == readInterrupted || call.providerDone.Load() || c.exiting) {
		// Left to the reader: an event wants it, the caller went away
		// with its context, or the end is still to come (the reader
		// reads it, or the end grace closes the connection).
		c.turn = turnReader
		c.wakeLocked()
	}
	return true
}

// violation ends the call for a provider packet that breaks the rules:
// before the provider terminal the caller gets a synthetic invalid_frame;
// after it the outcome stands. The connection is closed either way.
func (c *streamConn) violation(call *Call, reason string) {
	c.ch.h.log.Warn("provider broke the protocol", "child", c.ch.id, "pid", c.ch.proc.pid,
		logCallID, call.id, logTreeID, call.rec.Tree(), "tool", call.tool.Desc.ID, "reason", reason)
	c.fail(&synth{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: reason})
	c.broken(call, nil)
}

// broken ends the call on a connection that failed, closed, or broke the
// protocol (err, when not nil, is the read error), and releases it.
func (c *streamConn) broken(call *Call, err error) {
	// What follows may wait (the child's exit, its stderr, room on the
	// control connection): not while holding a slot of the busy gate,
	// which every busy reader of the host waits for.
	c.leaveGate()
	if !call.providerDone.Load() {
		cause := c.causeOf(err, "stream connection ended before the provider terminal")
		var stderr string
		if cause.stderrOf != nil {
			stderr = cause.stderrOf.stderrTailAfterExit()
		}
		f := frame.Frame{CallID: call.id, Direction: frame.ProviderToCaller, Sequence: c.given,
			Kind: cause.kind, Synthetic: true, Error: cause.frameError()}
		// The message is the host's own (the stderr tail, which may hold
		// user data, is not logged).
		c.ch.h.log.Warn("call ended by the host", "child", c.ch.id, logCallID, call.id, logTreeID, call.rec.Tree(),
			"tool", call.tool.Desc.ID, "kind", cause.kind.String(), "code", cause.code.String(), "reason", f.Error.Message)
		call.finish(f, stderr)
	}
	c.fail(nil)
	// The handler may still run, unaware: its connection's reader can be
	// blocked on a full ingress queue. The control connection reaches it.
	if !c.ch.proc.dead() {
		c.ch.ctrlW.Write(context.Background(), coalesce.Stream, &wire.Cancel{CallID: call.id, Reason: "stream connection closed by the host"})
	}
	call.release(nil)
}

// causeOf decides the synthetic terminal for a connection that failed:
// the host's own cause when it failed the connection first, an
// invalid_frame for a packet refused (err), unreachable when the child
// died, and otherwise a transport_error saying what failed (broke).
func (c *streamConn) causeOf(err error, broke string) *synth {
	select {
	case <-c.closing:
		if c.cause != nil {
			return c.cause
		}
	default:
	}
	if err != nil {
		if _, ok := protocol.AsInvalid(err); ok || errors.Is(err, wire.ErrProtocol) {
			return &synth{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: "provider packet refused: " + err.Error()}
		}
	}
	// The stream ended early: is the child gone?
	if dead := c.ch.deadCause(); dead != nil {
		return dead
	}
	return &synth{kind: frame.KindFailed, code: frame.CodeTransportError, msg: broke}
}

// deadCause is the terminal of a call whose stream connection failed
// (it ended early, or a write to it failed) when the failure is the
// child's death: unreachable, with how it died, when within exitWait the
// child is reaped, is a zombie, or is found dead; nil when it lives on.
// A dying process's sockets close as its last thread exits, just before
// it becomes waitable, so its death follows the failure closely.
func (ch *child) deadCause() *synth {
	t := time.NewTimer(exitWait)
	defer t.Stop()
	select {
	case <-ch.proc.waited: // reaped: the status is known; the sweep goes on without this call
		ch.markDead()
		return ch.unreachable(ch.diedOf(ch.proc.exitStatus()))
	case <-t.C:
	}
	if ch.proc.gone() { // exited, not reaped yet
		ch.markDead()
		return ch.unreachable(ch.diedOf("exited"))
	}
	ch.h.mu.Lock()
	dead := ch.state == stateDead
	cause := ch.cause
	ch.h.mu.Unlock()
	if dead {
		return ch.unreachable(cause)
	}
	return nil
}

// ended handles the child's end after the provider terminal: the call is
// over on both sides once the host's caller terminal is written, and the
// connection goes back to the idle list.
func (c *streamConn) ended(call *Call) {
	// closeCallerDirection may wait (for a Send of the caller's, or for
	// room on the connection): not while holding a slot of the busy gate.
	c.leaveGate()
	if !call.closeCallerDirection() {
		c.fail(nil)
		call.release(nil)
		return
	}
	call.release(c)
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

// readerYieldEvery is how long a stream reader reads without waiting
// before it is busy and takes turns through the host's busy gate (pace):
// it then gives its slot to the next busy reader, or, when none waits,
// yields the processor (runtime.Gosched). The host's busy readers take
// turns with each other: with N readers busy, a turn comes about every
// N × readerYieldEvery of CPU, and on a machine busy with other work the host's share of it can
// be a tenth of a core, so one round took N × 1 ms / 0.1 (five seconds at
// 512 streams) with coalesce.YieldEvery's 1 ms, and streams went seconds
// without a turn (TestHealthWhileEveryStreamIsBusy at load 15-25 on 2
// cores, -race: 12 to 228 of 512 streams idle for 2.5 s in 6 runs of 6;
// with 250 µs, at load 31-34: 4 streams in 1 run of 3, none in 2). A
// yield costs well under a microsecond, so one per 250 µs of reading is
// under 0.5% of it; the flusher keeps coalesce.YieldEvery.
const readerYieldEvery = 250 * time.Microsecond
