package child

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/wire"
)

// conn is one stream connection. Its reader goroutine (readLoop) owns the
// read side and the connection's call state; the Writer is shared with the
// current call's runner and handler (Write is safe for concurrent
// use). The connection is closed and its Writer stopped by whoever releases
// the last reference: the reader holds one, and each call's run one.
//
// A call whose caller direction is already closed when its handler would
// start (the invoke, the caller's started, its chunks and its terminal
// came in one read: a plain request) is run by the reader itself, which
// has nothing else to read until the call's end (the quiet interval,
// docs/protocol.md §6 item 6): see runInline.
type conn struct {
	s    *server
	nc   Conn
	w    *coalesce.Writer
	r    *packetio.Reader
	refs atomic.Int32

	// calls hands each started call to the connection's runner goroutine,
	// which runs their handlers one after the other. Unbuffered: a call
	// only reaches it once the previous call's runner is done, which comes
	// right after that call's end. Made with the runner on the first
	// invoke; sent on and closed only by the reader (serve).
	calls chan *call

	closeOnce sync.Once

	// While the reader runs a handler itself (runInline), inline is that
	// call; the server's watch (server.watchTick) marks it seen, and
	// when it sees it a second time hands the read side to a new reader
	// goroutine (setting the call's handedOff) and forgets it. Guarded by
	// mu.
	mu         sync.Mutex
	inline     *call
	inlineSeen bool
}

func newConn(s *server, nc Conn) *conn {
	c := &conn{s: s, nc: nc, w: coalesce.NewGated(nc, s.limits, s.gate), r: packetio.NewReader(nc, s.limits)}
	c.r.ReuseFrames() // callerPacket copies each frame out before the next read
	c.refs.Store(1)
	return c
}

// close closes the network connection, which makes every read and write of
// it fail; the Writer is stopped on the last release.
func (c *conn) close() { c.closeOnce.Do(func() { c.nc.Close() }) }

// release drops one reference; the last one stops the Writer (giving queued
// packets connWriteGrace to go out) and closes the connection.
func (c *conn) release() {
	if c.refs.Add(-1) != 0 {
		return
	}
	c.w.SetWriteDeadline(time.Now().Add(connWriteGrace))
	c.w.Close()
	c.close()
	c.s.forgetConn(c)
}

// giveUpAt makes the connection's writes give up on a host that does not
// take the bytes, from at on: once at has passed, a write that found the
// socket full (the host left what it was sent unread) is ended by a write
// deadline in the past, and every later write fails. A write that is
// merely late, because the child waited for a processor (tens of
// milliseconds and more on a loaded machine), is left to finish: a write
// deadline at at lost the terminals of a drain with a small cancel grace
// to a host that reads (TestDrainLateChildLosesNoTerminal). The writes end
// all the same connWriteGrace after the watch first ran past at (measured
// from then, when the child runs again, not from at). Over a destination
// whose writes the Writer cannot interrupt, which reports no full socket,
// the write deadline is at. stop ends the watch and returns once its
// goroutine has.
func (c *conn) giveUpAt(at time.Time) (stop func()) {
	w := c.w
	if !w.Interruptible() {
		w.SetWriteDeadline(at)
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // stopped by closing done, or once it gave up
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		var last time.Time // connWriteGrace after the watch first ran past at
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := time.Now()
			if last.IsZero() {
				last = now.Add(connWriteGrace)
			}
			if !w.FullSince().IsZero() || !now.Before(last) {
				w.SetWriteDeadline(time.Unix(1, 0))
				return
			}
			t.Reset(fullPoll)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// serve reads the connection until it closes: invokes, one call at a time,
// and each call's caller frames. It runs on the goroutine that accepted
// the connection (acceptLoop), counted in s.wg.
func (c *conn) serve() { c.readLoop(nil, &c.s.wg) }

// readLoop is the connection's reader from the call prev on (nil: none
// yet), on a goroutine counted in wg (s.wg, or s.runners). The first time
// it runs a handler itself it moves to s.runners, because a handler may
// outlive Serve's wait for readers (s.wg) when it ignores cancellation.
// When the watch handed the read side on meanwhile, it returns at once and
// the new reader owns the connection.
func (c *conn) readLoop(prev *call, wg *sync.WaitGroup) {
	handedOff := false
	defer func() {
		if !handedOff {
			c.stopRunner()
			c.release()
		}
		wg.Done()
	}()
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			if inv, ok := protocol.AsInvalid(err); ok && inv.Type == protocol.TypeInvoke && inv.CallID != "" && (prev == nil || prev.ended()) {
				// An invalid invoke we can answer: failed invalid_frame, end, close.
				c.writeImmediate(inv.CallID, immediate{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: "invalid invoke"})
				c.w.Flush()
			}
			c.abort(prev)
			return
		}
		inv, ok := p.(*wire.Invoke)
		if !ok || (prev != nil && (!prev.ended() || prev.inv.CallID == inv.CallID)) {
			// Out of order: a packet other than invoke, an invoke before
			// the previous call's end, or the previous call's id again.
			switch {
			case ok: // an invoke, while the connection's previous call is not over
				c.s.log.Debug("stream connection: packet out of order", logCallID, inv.CallID, logTreeID, treeOf(inv), "type", packetio.TypeOf(p))
			case prev != nil: // a packet of, or after, the previous call
				c.s.log.Debug("stream connection: packet out of order", logCallID, prev.inv.CallID, logTreeID, treeOf(prev.inv), "type", packetio.TypeOf(p))
			default: // no call on the connection yet
				c.s.log.Debug("stream connection: packet before an invoke", "type", packetio.TypeOf(p))
			}
			c.abort(prev)
			return
		}
		cl, ok := c.start(inv)
		if !ok {
			c.abort(prev)
			return
		}
		prev = cl
		if cl.handler {
			switch c.readBuffered(cl) {
			case callerBroken:
				return
			case callerClosed:
				if wg == &c.s.wg {
					c.s.runners.Add(1) // while this goroutine is still counted in s.wg: before any runners.Wait
					c.s.wg.Done()
					wg = &c.s.runners
				}
				if c.runInline(cl) {
					handedOff = true
					return
				}
				continue
			}
			c.ensureRunning(cl)
		}
		if !c.readCaller(cl) {
			return
		}
	}
}

// runInline runs cl's handler on the reader's goroutine, which saves the
// switch to the runner and back, and writes its frames as replies
// (coalesce.Reply), which saves the switches to the flusher: a plain request
// is answered by the goroutine its bytes woke. The reader reads nothing
// meanwhile: the caller's direction is closed, so the host sends nothing
// before the end. A connection closed under a long handler is still seen:
// the server's watch gives the connection a new reader once the handler
// has run for inlineWatch or more, and runInline then reports handedOff
// (TestPlainRequestConnectionClosedCancels fails without the watch).
//
// Why it stays: a small call takes about a sixth less time than with
// every call handed to the runner (figures and command: docs/performance.md, "Mechanisms and their measured reasons").
func (c *conn) runInline(cl *call) (handedOff bool) {
	cl.running, cl.inline = true, true
	cl.input()
	c.mu.Lock()
	c.inline, c.inlineSeen = cl, false
	c.mu.Unlock()
	c.s.watch.use()
	cl.run()
	c.s.watch.done()
	c.mu.Lock()
	defer c.mu.Unlock()
	// Once handed over, the new reader may be running the connection's
	// next call inline already: only this call's own mark counts.
	if c.inline == cl {
		c.inline = nil
	}
	return cl.handedOff
}

// watched is the server's watch looking at the connection: it reports
// whether a handler runs inline on it, and on the second look at the same
// handler starts the connection's new reader.
func (c *conn) watched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.inline == nil:
		return false
	case !c.inlineSeen:
		c.inlineSeen = true
	default:
		cl := c.inline
		cl.handedOff, c.inline = true, nil
		// The inline handler's goroutine is counted in s.runners until
		// it returns, so this Add comes before any runners.Wait.
		c.s.runners.Add(1)
		go c.readLoop(cl, &c.s.runners) // stopped as serve is: the connection closing
	}
	return true
}

// abort closes the connection and cancels the call still using it.
func (c *conn) abort(cl *call) {
	if cl != nil {
		cl.cancelWith(ErrConnClosed)
	}
	c.close()
}

// start starts the call inv asks for, or answers it at once (unknown tool,
// remembered cancel, draining). ok is false when the connection must close.
func (c *conn) start(inv *wire.Invoke) (*call, bool) {
	cl := newCall(c, inv)
	c.w.NewStream() // the call's frames start ungated (coalesce.NewGated)
	imm, ok := c.s.register(cl)
	if ok {
		c.refs.Add(1)     // released by cl.run
		cl.handler = true // run by the reader (runInline) or the runner (ensureRunning)
		// Counted in pong.streams from here, not from when its goroutine
		// first runs it: the host has seen the invoke read, and a runner
		// that a busy child has not scheduled yet must not make the call
		// look lost (docs/protocol.md §7). cl.run takes it off.
		c.s.running.Add(1)
		return cl, true
	}
	cl.cancel(errHandlerReturned) // no handler: input is discarded
	cl.stop()
	cl.markEnded()
	if imm.dup {
		return cl, false
	}
	c.writeImmediate(inv.CallID, imm)
	return cl, true
}

// ensureRunning hands cl to the connection's runner unless its handler is
// already running (or has run).
func (c *conn) ensureRunning(cl *call) {
	if cl.handler && !cl.running {
		cl.running = true
		cl.input()
		c.runCall(cl)
	}
}

// runCall hands cl to the connection's runner, starting it for the first
// call. The runner lives as long as the connection's reader: one goroutine
// runs every call of the connection, so a call costs no goroutine start
// and its handler runs on a stack already grown by the calls before it.
func (c *conn) runCall(cl *call) {
	if c.calls == nil {
		c.calls = make(chan *call)
		c.s.runners.Add(1)
		// Stopped by stopRunner closing calls; a stuck handler keeps it
		// (Serve abandons both). A handler that calls runtime.Goexit ends
		// it early, but that call never ends, so the reader never hands
		// this connection another one.
		go func() {
			defer c.s.runners.Done()
			for cl := range c.calls {
				cl.run()
			}
		}()
	}
	c.calls <- cl
}

// stopRunner lets the runner return once its call, if any, is done.
func (c *conn) stopRunner() {
	if c.calls != nil {
		close(c.calls)
	}
}

// writeImmediate writes the terminal (sequence 1) and end of a call that
// runs no handler.
func (c *conn) writeImmediate(id string, imm immediate) {
	var f frame.Frame
	if imm.kind == frame.KindCancelled {
		f, _ = frame.NewCancelled(id, frame.ProviderToCaller, 1, imm.msg)
	} else {
		f, _ = frame.NewFailed(id, frame.ProviderToCaller, 1, imm.code, imm.msg)
	}
	c.w.Write(context.Background(), coalesce.Stream, &wire.Frame{Frame: f}, &wire.End{CallID: id})
}

// callerState is where the caller's direction of a call stands after a
// read of its frames.
type callerState int

const (
	callerOpen   callerState = iota // more caller frames to come
	callerClosed                    // the caller's terminal was read
	callerBroken                    // the connection is closing
)

// readCaller reads the caller frames of cl until the caller's terminal and
// reports whether the connection is still usable. cl's handler, if it has
// one, is running.
func (c *conn) readCaller(cl *call) bool {
	for {
		p, err := c.r.ReadPacket()
		switch c.callerPacket(cl, p, err) {
		case callerClosed:
			return true
		case callerBroken:
			return false
		}
	}
}

// readBuffered takes the caller frames of cl that are already whole in the
// reader's buffer, before cl's handler runs, as long as the ingress queue
// has room for them, and says where the caller's direction stands; it
// reads nothing from the connection itself.
func (c *conn) readBuffered(cl *call) callerState {
	for c.r.PacketBuffered() && !cl.queueFull() {
		p, err := c.r.ReadPacket()
		if st := c.callerPacket(cl, p, err); st != callerOpen {
			return st
		}
	}
	return callerOpen
}

// callerPacket handles one read on cl's connection while its caller's
// direction is open. Every way it ends the call but the caller's own
// terminal starts cl's handler first, so that the handler sees its cause
// and the runner writes the call's terminal and end.
func (c *conn) callerPacket(cl *call, p wire.Packet, err error) callerState {
	if err != nil {
		c.ensureRunning(cl)
		if inv, ok := protocol.AsInvalid(err); ok && inv.Type == protocol.TypeFrame {
			c.invalidInput(cl)
			return callerBroken
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
			c.s.log.Debug("stream connection: read failed", logCallID, cl.inv.CallID, logTreeID, treeOf(cl.inv), "err", err)
		}
		c.abort(cl)
		return callerBroken
	}
	pf, ok := p.(*wire.Frame)
	if !ok {
		c.ensureRunning(cl)
		c.s.log.Debug("stream connection: packet out of order", logCallID, cl.inv.CallID, logTreeID, treeOf(cl.inv), "type", packetio.TypeOf(p))
		c.abort(cl)
		return callerBroken
	}
	f := pf.Frame
	if err := cl.fence.Accept(&f); err != nil {
		c.ensureRunning(cl)
		c.invalidInput(cl)
		return callerBroken
	}
	switch f.Kind {
	case frame.KindStarted:
	case frame.KindChunk:
		cl.push(f)
	case frame.KindCompleted:
		cl.closeInput(f.Payload)
		return callerClosed
	default: // cancelled, failed
		cl.cancelWith(ErrCallerCancelled)
		return callerClosed
	}
	return callerOpen
}

// invalidInput ends cl with failed invalid_frame and end, then closes the
// connection; until then the reader discards what arrives.
func (c *conn) invalidInput(cl *call) {
	if cl.closeAfterEnd() {
		// The call already ended: nothing more to write.
		c.close()
		return
	}
	cl.cancelWith(ErrInvalidInput)
	for {
		if _, err := c.r.ReadPacket(); err != nil {
			if _, ok := protocol.AsInvalid(err); !ok {
				c.abort(cl)
				return
			}
		}
	}
}
