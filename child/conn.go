package child

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/sequence"
	"github.com/skulkrt/skulk/wire"
)

// conn is one stream connection. Its reader goroutine (serve) owns the read
// side and the connection's call state; the Writer is shared with the
// current call's runner and handler (WritePacket is safe for concurrent
// use). The connection is closed and its Writer stopped by whoever releases
// the last reference: the reader holds one, and each call's runner one.
type conn struct {
	s    *server
	nc   net.Conn
	w    *wire.Writer
	r    *wire.Reader
	refs atomic.Int32

	// calls hands each started call to the connection's runner goroutine,
	// which runs their handlers one after the other. Unbuffered: a call
	// only reaches it once the previous call's runner is done, which comes
	// right after that call's end. Made with the runner on the first
	// invoke; sent on and closed only by the reader (serve).
	calls chan *call

	closeOnce sync.Once
}

func newConn(s *server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, w: wire.NewWriter(nc, s.limits), r: wire.NewReader(nc, s.limits)}
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
	c.nc.SetWriteDeadline(time.Now().Add(connWriteGrace))
	c.w.Close()
	c.close()
	c.s.forgetConn(c)
}

// serve reads the connection until it closes: invokes, one call at a time,
// and each call's caller frames.
func (c *conn) serve() {
	defer c.release()
	defer c.stopRunner()
	var prev *call
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			var inv *wire.InvalidError
			if errors.As(err, &inv) && inv.Type == wire.TypeInvoke && inv.CallID != "" && (prev == nil || prev.ended()) {
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
			c.s.log.Debug("stream connection: packet out of order", "type", p.Type())
			c.abort(prev)
			return
		}
		cl, ok := c.start(inv)
		if !ok {
			c.abort(prev)
			return
		}
		prev = cl
		if !c.readCaller(cl) {
			return
		}
	}
}

// abort closes the connection and cancels the call still using it.
func (c *conn) abort(cl *call) {
	if cl != nil {
		cl.cancel(ErrConnClosed)
	}
	c.close()
}

// start starts the call inv asks for, or answers it at once (unknown tool,
// remembered cancel, draining). ok is false when the connection must close.
func (c *conn) start(inv *wire.Invoke) (*call, bool) {
	cl := newCall(c, inv)
	imm, ok := c.s.register(cl)
	if ok {
		c.refs.Add(1) // released by cl.run
		c.runCall(cl)
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
	if c.w.WritePacket(&wire.Frame{Frame: f}) == nil {
		c.w.WritePacket(&wire.End{End: frame.End{CallID: id}})
	}
}

// readCaller reads the caller frames of cl until the caller's terminal and
// reports whether the connection is still usable.
func (c *conn) readCaller(cl *call) bool {
	fence := sequence.New(cl.inv.CallID, frame.CallerToProvider, 0)
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			var inv *wire.InvalidError
			if errors.As(err, &inv) && inv.Type == wire.TypeFrame {
				c.invalidInput(cl)
				return false
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("stream connection: read failed", "call_id", cl.inv.CallID, "err", err)
			}
			c.abort(cl)
			return false
		}
		pf, ok := p.(*wire.Frame)
		if !ok {
			c.s.log.Debug("stream connection: packet out of order", "call_id", cl.inv.CallID, "type", p.Type())
			c.abort(cl)
			return false
		}
		f := pf.Frame
		if err := fence.Accept(&f); err != nil {
			c.invalidInput(cl)
			return false
		}
		switch f.Kind {
		case frame.KindStarted:
		case frame.KindChunk:
			cl.push(f)
		case frame.KindCompleted:
			cl.closeInput(f.Payload)
			return true
		default: // cancelled, failed
			cl.cancel(ErrCallerCancelled)
			return true
		}
	}
}

// invalidInput ends cl with failed invalid_frame and end, then closes the
// connection; until then the reader discards what arrives.
func (c *conn) invalidInput(cl *call) {
	if cl.closeAfterEnd() {
		// The call already ended: nothing more to write.
		c.close()
		return
	}
	cl.cancel(ErrInvalidInput)
	for {
		if _, err := c.r.ReadPacket(); err != nil {
			var inv *wire.InvalidError
			if !errors.As(err, &inv) {
				c.abort(cl)
				return
			}
		}
	}
}
