package host

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
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

// readTurn says who reads a stream connection. One goroutine at a time
// does; the turn passes under streamConn.mu, and with it the provider
// direction of the bound call (its fence, given, the reader's buffer).
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
	r  *packetio.Reader // read only by the holder of the turn
	w  *coalesce.Writer // closed by run when it returns

	// idleSound's peek, made once so that it allocates nothing; used by
	// the goroutine that took the connection from the idle list.
	peekFn func(fd uintptr) bool
	// leaveGate, made once: what outbox.put calls before it waits.
	leaveGateFn func()
	peekBuf     [1]byte
	peekN       int
	peekErr     error

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

	// Owned by the holder of the turn. at is when the packets in the
	// reader's buffer arrived: the clock is read once per read of the
	// connection, not once per frame. burstEnd: no whole packet is left
	// in the buffer, so the next ReadPacket reads the connection (and the
	// last packet was the last of its burst).
	at       time.Time
	burstEnd bool
	yielded  time.Time     // when the reader last yielded (pace), or last waited for the connection
	inBurst  int           // frames read since the last look at the clock (readBurst)
	waited   bool          // the last read of the connection waited for the child (connSource)
	busy     bool          // the reader has read for readerYieldEvery without waiting, and has not waited since (pace)
	gated    bool          // the reader holds a slot of the host's busy gate (pace)
	gateWait chan struct{} // size 1: where pace waits for a slot of the busy gate; made at its first wait
}

// yieldCheckEvery is how many frames of one burst readBurst reads between
// looks at the clock (at the start of a batch): a burst (what one read of the connection returned,
// up to the Reader's 16 KiB buffer: hundreds of small frames) can take
// milliseconds to handle under load, so a reader that looked only at a
// burst's end kept its processor for the whole burst. A look costs a
// clock read; one per 32 packets is lost in the cost of the packets.
const yieldCheckEvery = 32

func newStreamConn(ch *child, nc net.Conn) *streamConn {
	c := &streamConn{
		ch: ch, nc: nc,
		w:        coalesce.New(nc, ch.limits),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		burstEnd: true,
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
	var src io.Reader = nc // without a RawConn, no read is known to wait: the reader paces by the clock alone
	if c.rc != nil {
		s := &connSource{c: c, rc: c.rc, nc: nc}
		s.fn = s.read
		src = s
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
	c.r.ExpectCallID(call.id) // nobody reads an idle connection
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
	c.peekN, _, c.peekErr = syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}

// readResult is what readBurst did.
type readResult uint8

const (
	readMore        readResult = iota // the call goes on
	readDone                          // the call was released, or the connection failed
	readInterrupted                   // the reading Recv's context ended the read (callerRead)
)

// burstFrames bounds the provider frames readBurst decodes and checks
// before it records and queues them together: one lock of the call log
// and one of the outbox for up to 16 frames, where a lock per frame of
// each, and of the outbox again for every take, was a seventh of the
// host's CPU on a stream of small frames (docs/performance.md). The batch
// lives on readBurst's stack (16 frames of 88 bytes), only while it reads.
const burstFrames = 16

// readBurst reads and handles packets of call; the caller has the turn.
// It reads the connection at most once, at its first packet, and goes on
// with the packets already whole in the reader's buffer, up to
// burstFrames frames and lendBytes of payload and media: their chunks are recorded in the call log and
// queued to the outbox together, the caller published at the burst's end
// (see outbox). A terminal, a violation, the end or an error ends the
// batch, and what came before it is queued first.
func (c *streamConn) readBurst(call *Call) readResult {
	// A reader whose socket always has data never waits: once it has
	// read for readerYieldEvery (which says why and what it costs) since
	// it last yielded or waited, it is busy and takes turns through the
	// host's busy gate (pace, readpace.go), looking at the clock at a
	// burst's end and every yieldCheckEvery packets within one. A busy
	// reader that left the gate takes a slot again before it reads. A
	// batch is queued before anything that may wait: it never holds frames
	// back from the caller.
	switch {
	case c.busy && !c.gated:
		c.enterGate() // a busy reader reads only while it holds a slot
	case c.burstEnd:
		c.inBurst = 0
		if c.at.Sub(c.yielded) >= readerYieldEvery {
			c.pace()
		}
	case c.inBurst >= yieldCheckEvery:
		c.inBurst = 0
		if time.Since(c.yielded) >= readerYieldEvery {
			c.pace()
		}
	}
	var batch [burstFrames]frame.Frame
	n := 0
	// size bounds the batch's payload and media bytes as the outbox's
	// take bounds what it lends: a batch ends after the frame that takes
	// it to lendBytes, so that a caller's Recv filling its own outbox to
	// half (callerRead) never finds it full, which it would wait on
	// forever, being the one to empty it.
	size := 0
	// The host's counters of the frames read, added once the batch is
	// done: atomic, so the deferred add is safe after the call was
	// released and the turn is another's. Nothing of the connection is
	// touched after that.
	var media uint64 // inline media bytes of the frames read
	read := 0        // frames read
	defer func() { c.ch.h.traffic.receivedBatch(read, media) }()
	for {
		pkt, err := c.r.ReadPacket()
		if c.burstEnd {
			c.at = time.Now()
			if c.waited { // the read waited for the child: not busy (connSource left the gate)
				c.waited, c.busy = false, false
				c.yielded = c.at
			}
		}
		c.burstEnd = !c.r.PacketBuffered()
		if err != nil {
			if n > 0 && !c.deliver(call, batch[:n], true) {
				return readDone
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && c.isInterrupted() {
				c.burstEnd = true // nothing was read
				return readInterrupted
			}
			c.broken(call, err)
			return readDone
		}
		p, ok := pkt.(*wire.Frame)
		if !ok {
			if n > 0 && !c.deliver(call, batch[:n], true) {
				return readDone
			}
			if p, ok := pkt.(*wire.End); ok {
				if !call.providerDone.Load() || p.CallID != call.id {
					c.violation(call, "end packet out of order")
					return readDone
				}
				c.ended(call)
				return readDone
			}
			c.violation(call, packetio.TypeOf(pkt).String()+" packet on a stream connection")
			return readDone
		}
		f := &p.Frame
		read++
		c.inBurst++
		media += mediaLen(f.Media)
		if reason := checkProvider(call, f); reason != "" {
			if n > 0 && !c.deliver(call, batch[:n], true) {
				return readDone
			}
			c.violation(call, reason)
			return readDone
		}
		if f.Kind.IsTerminal() {
			// The chunks before it are queued (and recorded) first.
			if n > 0 && !c.deliver(call, batch[:n], true) {
				return readDone
			}
			call.finish(*f, "")
			call.terminalClocks(!c.burstEnd)
			return readMore
		}
		batch[n] = *f // the Reader reuses p for its next packet
		n++
		size += frameBytes(f)
		if c.burstEnd || n == burstFrames || size >= lendBytes {
			if !c.deliver(call, batch[:n], c.burstEnd) {
				return readDone
			}
			return readMore
		}
	}
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

// checkProvider checks one provider frame of call against the call's
// state (no frame after the terminal), the provider fence and the tool's
// output or result schema, and returns why it is refused, or "". The
// fence takes f's sequence when it is accepted. Called by the holder of
// the read turn.
func checkProvider(call *Call, f *frame.Frame) string {
	if call.providerDone.Load() {
		return "frame after the provider terminal"
	}
	if err := call.fence.Accept(f); err != nil {
		return "provider frame refused: " + err.Error()
	}
	var err error
	switch f.Kind {
	case frame.KindChunk:
		if f.Payload != nil {
			err = validate(call.tool.Output, f.Payload)
		}
	case frame.KindCompleted:
		if f.Payload != nil {
			err = validate(call.tool.Result, f.Payload)
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// deliver records the checked, non-terminal frames fs of call in the call
// log, all received at c.at, and queues them to the caller, publishing
// them when publish is set (see outbox.putBatch); it reports whether the
// connection goes on. Recorded before the caller can read them, so that
// Text and Events include every chunk Recv returned; recording never
// blocks (the log only queues), queueing blocks while the outbox is full.
func (c *streamConn) deliver(call *Call, fs []frame.Frame, publish bool) bool {
	call.rec.OutputsAt(fs, c.at)
	k := call.out.putBatch(fs, publish, c.closing, c.leaveGateFn)
	if k > 0 {
		call.given = fs[k-1].Sequence + 1
	}
	if k < len(fs) {
		c.broken(call, nil)
		return false
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
		cause := c.causeOf(err)
		var stderr string
		if cause.stderrOf != nil {
			stderr = cause.stderrOf.stderrTailAfterExit()
		}
		f := frame.Frame{CallID: call.id, Direction: frame.ProviderToCaller, Sequence: call.given,
			Kind: cause.kind, Synthetic: true, Error: &frame.Error{Code: cause.code, Message: frame.SanitizeMessage(cause.msg)}}
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
		var inv *protocol.InvalidError
		if errors.As(err, &inv) || errors.Is(err, wire.ErrProtocol) {
			return &synth{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: "provider packet refused: " + err.Error()}
		}
	}
	// The stream ended early: is the child gone?
	ch := c.ch
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
