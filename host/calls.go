package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/recorder"
	"github.com/skulkrt/skulk/internal/sequence"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// Refusals of a call a child makes through its host (docs/protocol.md §8).
// The call log records them as refused steps of the calling call, their
// Refused class names which; the child is answered failed invalid_frame
// with the error's text.
var (
	// errNotOffered: the tool is not one Config.Calls offers.
	errNotOffered = errors.New("host: tool not offered to children")
	// errTooManyCalls: the child has Config.Calls.MaxInFlight calls open
	// through the host already.
	errTooManyCalls = errors.New("host: too many calls in flight from one child")
	// errNoParent: the invoke's parent is missing, or is not a call the
	// child is running.
	errNoParent = errors.New("host: parent is not a call the child is running")
)

// depthError refuses a call a child makes that would sit deeper in its
// tree than Config.Calls.MaxDepth: a loop such as A → B → A ends here.
type depthError struct {
	// Depth is the depth the call would have had.
	Depth int
	// Limit is Config.Calls.MaxDepth.
	Limit int
}

func (e *depthError) Error() string {
	return fmt.Sprintf("host: call depth %d is over the limit of %d", e.Depth, e.Limit)
}

// hangupWatchDelay is how long a call connection goes unread (a start
// that waits, a chunk its callee does not take) before the host watches
// it for the caller's hang-up (connWatch). A wait shorter than it
// ends with the connection read again, which sees the hang-up as its end;
// a longer one sees it within this delay. A watch from the start would
// cost a goroutine, a poll and a switch back per call and per chunk.
const hangupWatchDelay = time.Millisecond

// deadlineSlack is how close to its parent's deadline a nested call's
// deadline (timeout_ms) may end and be taken as the parent's: timeout_ms
// counts whole milliseconds, so a deadline a child derives from its
// handler's, which the host derived from the parent's, lands up to a
// millisecond or so either side of the parent's. Taking the parent's
// spares the call a timer of its own: a new timer earlier than every
// other of its processor makes the Go runtime wake a thread to watch it,
// once per nested call (docs/performance.md, "Calls both ways").
const deadlineSlack = 2 * time.Millisecond

// callsSockName is the call socket's name in a child's private directory.
const callsSockName = "calls.sock"

// callServer is the host's side of one child's call socket: it accepts
// the child's call connections and runs the calls made on them.
//
// Goroutines: the accept loop and one per call connection (serveConn),
// each with one writer of provider frames per running call (pumpOut); all
// are counted in wg and waited for by close.
type callServer struct {
	ch         *child
	ln         net.Listener
	offer      *wire.Calls
	cat        *toolschema.Catalog // the offered tools
	hostTools  map[string]*HostTool
	childTools map[string]bool
	maxDepth   int
	maxFlight  int
	// detachedTimeout is Config.Calls.DetachedTimeout: the deadline of
	// a detached call without one, and the longest one may have.
	detachedTimeout time.Duration

	wg sync.WaitGroup

	// slots holds one token per call connection being served: at most
	// twice max_in_flight (the SDKs keep at most max_in_flight, and the
	// host may not have seen the last ones close yet). Overflow policy:
	// block; the accept loop waits for a place, so a child's further
	// connections wait in the listen backlog and cannot make the host hold
	// a goroutine, a read buffer and an fd each.
	slots chan struct{}

	// stop is done once close began: every running callee is aborted and a
	// send blocked on a callee returns, whether or not the connection is
	// still read (a caller that closed its direction is not).
	stop    context.Context
	stopNow context.CancelFunc

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{}
	inFlight int
}

// newCallServer listens on ch's call socket and builds its offer; nil
// when the host offers nothing.
func newCallServer(ch *child) (*callServer, error) {
	h := ch.h
	cfg := &h.cfg.Calls
	if !cfg.offers() {
		return nil, nil
	}
	s := &callServer{ch: ch, hostTools: map[string]*HostTool{}, childTools: map[string]bool{},
		maxDepth: cfg.MaxDepth, maxFlight: cfg.MaxInFlight, detachedTimeout: cfg.DetachedTimeout, conns: map[net.Conn]struct{}{}}
	var list []wire.Tool
	for i := range cfg.HostTools {
		t := &cfg.HostTools[i]
		s.hostTools[t.Tool.ID] = t
		list = append(list, t.Tool)
	}
	h.mu.Lock()
	pool := h.cat
	h.mu.Unlock()
	for _, id := range cfg.Tools {
		t := ch.cat.Tool(id)
		if t == nil && pool != nil {
			t = pool.Tool(id)
		}
		if t == nil {
			continue // no child offers it (yet): not offered to this one
		}
		s.childTools[id] = true
		list = append(list, t.Desc)
	}
	cat, err := toolschema.NewCatalog(list)
	if err != nil {
		return nil, err
	}
	s.cat = cat
	s.stop, s.stopNow = context.WithCancel(context.Background())
	s.slots = make(chan struct{}, 2*s.maxFlight)
	path := filepath.Join(ch.proc.dir, callsSockName)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("host: listening on the call socket: %w", err)
	}
	s.ln = ln
	s.offer = &wire.Calls{Socket: path, Tools: list, MaxDepth: int64(s.maxDepth), MaxInFlight: int64(s.maxFlight)}
	return s, nil
}

// listen starts the accept loop.
func (s *callServer) listen() {
	s.wg.Add(1)
	go s.accept() // stopped by close (closing the listener); waited for through wg
}

func (s *callServer) accept() {
	defer s.wg.Done()
	for {
		select {
		case s.slots <- struct{}{}: // given back by serveConn
		case <-s.stop.Done():
			return
		}
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc) // stopped by close (closing nc); waited for through wg
	}
}

// close stops accepting, closes every call connection and waits for the
// calls on them: each callee is cancelled and read to its terminal.
// Idempotent.
func (s *callServer) close() {
	s.mu.Lock()
	s.closed = true
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	s.stopNow()
	s.ln.Close()
	for _, nc := range conns {
		nc.Close()
	}
	s.wg.Wait()
}

// connWriter is a call connection's writer: provider frames come from the
// running call's pumpOut, refusals from serveConn. Its coalescing writer
// is safe for concurrent use; serveConn closes it.
type connWriter struct {
	w *coalesce.Writer
}

// write queues ps as one unit (a terminal and its end go out in one
// write); it blocks while the child does not read (backpressure).
func (w *connWriter) write(ps ...wire.Packet) error {
	return w.w.Write(context.Background(), coalesce.Reply, ps...)
}

// writeLast writes ps and returns once they are on the wire: a call's
// last packets, which must not wait behind a closing connection.
func (w *connWriter) writeLast(ps ...wire.Packet) error {
	if err := w.write(ps...); err != nil {
		return err
	}
	return w.w.Flush()
}

// refuse answers a call with failed (sequence 1) and end.
func (w *connWriter) refuse(id string, code frame.Code, msg string) error {
	f, err := frame.NewFailed(id, frame.ProviderToCaller, 1, code, msg)
	if err != nil {
		return err
	}
	return w.writeLast(&wire.Frame{Frame: f}, &wire.End{CallID: id})
}

// serveConn runs the calls of one call connection, one at a time.
func (s *callServer) serveConn(nc net.Conn) {
	defer s.wg.Done()
	defer func() { <-s.slots }()
	w := &connWriter{w: coalesce.New(nc, s.ch.limits)}
	// Closed after nc (the defer below): refusals and terminals were
	// flushed, and a child that stopped reading cannot hold Close up.
	defer w.w.Close()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		nc.Close()
	}()
	r := packetio.NewReader(newRawSource(nc), s.ch.limits)
	cs := &connCalls{outDone: make(chan error, 1), watch: newConnWatch(nc, hangupWatchDelay)}
	defer cs.watch.close()
	// The caller is gone once close began: the running callee is aborted
	// even when the connection is no longer read (§8 item 7: the
	// caller's death cancels a detached call too). One watch for the
	// connection's calls, not one per call.
	defer context.AfterFunc(s.stop, cs.stopped)()
	var next wire.Packet // read by the previous call's pumpIn, in its quiet interval
	for {
		pkt, err := next, error(nil)
		if next == nil {
			pkt, err = r.ReadPacket()
		}
		next = nil
		if err != nil {
			if ie, ok := protocol.AsInvalid(err); ok && ie.Type == protocol.TypeInvoke && ie.CallID != "" {
				w.refuse(ie.CallID, frame.CodeInvalidFrame, "invalid invoke")
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.ch.h.log.Warn("call connection closed", "child", s.ch.id, "err", err)
			}
			return
		}
		inv, ok := pkt.(*wire.Invoke)
		if !ok {
			s.ch.h.log.Warn("call connection closed", "child", s.ch.id, "err", fmt.Errorf("%w: %s where an invoke belongs", wire.ErrProtocol, packetio.TypeOf(pkt)))
			return
		}
		var more bool
		if next, more = s.run(nc, r, w, cs, inv); !more {
			return
		}
	}
}

// connCalls is what the calls of one call connection share, one call at a
// time: the output side's end, and the running callee that the server's
// close aborts.
type connCalls struct {
	// outDone carries the running call's output side's end: one value
	// per call, taken before the next call starts (size 1: the sender
	// never waits).
	outDone chan error
	// ahead holds the packets read with a call's invoke (readAhead):
	// at most protocol.IngressQueue chunks and the caller's started and
	// terminal.
	ahead [protocol.IngressQueue + 2]wire.Packet
	// watch watches the connection for the caller's hang-up while a
	// call starts, and while a call whose whole input came with its
	// invoke runs.
	watch *connWatch

	mu   sync.Mutex
	cur  nestedCallee // the running call's callee; nil between calls; guarded by mu
	stop bool         // the server's close began; guarded by mu
}

// stopped aborts the running callee, and every callee set after it: the
// server's close began.
func (cs *connCalls) stopped() {
	cs.mu.Lock()
	cs.stop = true
	cur := cs.cur
	cs.mu.Unlock()
	if cur != nil {
		cur.abort()
	}
}

// set makes callee the running one (nil: none); a callee set after the
// server's close began is aborted at once.
func (cs *connCalls) set(callee nestedCallee) {
	cs.mu.Lock()
	cs.cur = callee
	stop := cs.stop
	cs.mu.Unlock()
	if stop && callee != nil {
		callee.abort()
	}
}

// nestedCallee is the callee of a call a child makes: a call of a child's
// tool (callAdapter) or a host tool's run (recordedHostCall).
type nestedCallee interface {
	// send passes on one caller chunk; it blocks while the callee does
	// not take it (backpressure).
	send(ctx context.Context, f frame.Frame) error
	// closeSend passes on the caller's completed.
	closeSend()
	// abort cancels the call.
	abort()
	// start starts the callee's output side on a goroutine of its own:
	// each provider frame goes to out (the terminal last), then put's
	// error to done.
	start(out *callOut, done chan<- error)
	// run is start on the calling goroutine: it returns after the
	// terminal.
	run(out *callOut, done chan<- error)
}

// run runs one call on a call connection and reports whether the
// connection may carry the next one, and the next packet when it was read
// already (nil when not).
//
// A call whose whole input came with its invoke (started, chunks with
// payloads alone, completed, as the SDKs write a unary call) runs on the
// connection's own goroutine: the callee is started with its input, and
// its output is written as it comes, while the connection is watched for
// the caller's hang-up only once the call has taken hangupWatchDelay.
// Any other call gets an output goroutine while this one reads the
// caller's frames.
func (s *callServer) run(nc net.Conn, r *packetio.Reader, w *connWriter, cs *connCalls, inv *wire.Invoke) (wire.Packet, bool) {
	ahead := readAhead(r, inv.CallID, cs.ahead[:0])
	defer clear(cs.ahead[:]) // keeps no packet past its call
	var input *[]frame.Payload
	if ahead.whole {
		input = &ahead.input
	}
	callee, end, err := s.begin(cs, inv, input)
	if err != nil {
		code, msg := refusalAnswer(err)
		if w.refuse(inv.CallID, code, msg) != nil {
			return nil, false
		}
		if ahead.whole {
			return nil, true
		}
		return nil, s.discard(&ahead, r, inv.CallID)
	}
	var once sync.Once
	release := func() { once.Do(end) }
	defer release()
	cs.set(callee) // the server's close aborts it
	defer cs.set(nil)
	outDone := cs.outDone // one value: the output side's end; taken below
	abort := callee.abort
	out := &callOut{w: w, id: inv.CallID, seq: 1, release: release, abort: abort}
	reusable, bad := true, false
	if ahead.whole {
		// No caller frame can come: out.invalid stays nil.
		cs.watch.arm(abort)
		callee.run(out, outDone)
		cs.watch.stop()
	} else {
		invalid := make(chan struct{})
		out.invalid = invalid
		callee.start(out, outDone)
		reusable, bad = s.pumpIn(nc, cs, &ahead, r, callee, inv.CallID)
		if bad {
			close(invalid)
		}
	}
	var next wire.Packet
	if reusable {
		// The quiet interval (docs/protocol.md §6): the caller sends
		// nothing until the end, but the host still reads, so that a
		// caller that closes its connection (it cancelled, or died)
		// cancels the callee at once.
		pkt, err := r.ReadPacket()
		if err != nil || !out.endSent.Load() {
			reusable = false
		}
		next = pkt
	}
	if !reusable {
		callee.abort()
	}
	werr := <-outDone
	if !reusable || werr != nil {
		return nil, false
	}
	return next, true
}

// ahead is the packets of a call that were read with its invoke, before
// the call started: pumpIn and discard take them before reading more.
type ahead struct {
	pkts []wire.Packet
	err  error // the read error that ended the read-ahead; nil when none
	// whole: the packets are the caller's whole direction (started,
	// chunks with a payload and no media, completed), fence-checked; input
	// holds the chunks' payloads.
	whole bool
	input []frame.Payload
}

// next returns the next packet read ahead, or reads one.
func (a *ahead) next(r *packetio.Reader) (wire.Packet, error) {
	if len(a.pkts) > 0 {
		p := a.pkts[0]
		a.pkts = a.pkts[1:]
		return p, nil
	}
	if a.err != nil {
		return nil, a.err
	}
	return r.ReadPacket()
}

// readAhead takes the packets that are already whole in r's buffer after
// call id's invoke, up to the caller terminal and at most
// protocol.IngressQueue chunks: what a caller wrote with the invoke in one
// write, into buf's array. It never waits for the connection.
func readAhead(r *packetio.Reader, id string, buf []wire.Packet) ahead {
	a := ahead{pkts: buf}
	fence := sequence.New(id, frame.CallerToProvider, 0)
	ok := true
	for len(a.pkts) < protocol.IngressQueue+2 && r.PacketBuffered() {
		pkt, err := r.ReadPacket()
		if err != nil {
			a.err = err
			return a
		}
		a.pkts = append(a.pkts, pkt)
		f, isFrame := pkt.(*wire.Frame)
		if !isFrame || f.CallID != id {
			return a
		}
		ff := f.Frame // the fence keeps nothing of it
		ok = ok && fence.Accept(&ff) == nil
		switch {
		case !ok:
		case f.Kind == frame.KindStarted:
		case f.Kind == frame.KindChunk && f.Media == nil && f.Payload != nil:
			a.input = append(a.input, f.Payload)
		case f.Kind == frame.KindCompleted:
			a.whole = true
			a.pkts = nil
			return a
		default:
			ok = false
		}
		if f.Kind.IsTerminal() {
			return a
		}
	}
	return a
}

// refusalAnswer returns the code and message a refused call is answered
// with: fixed texts, never the child's data.
func refusalAnswer(err error) (frame.Code, string) {
	var ce *callError
	var se *SchemaError
	var de *depthError
	switch {
	case errors.As(err, &ce):
		return ce.err.Code, ce.err.Message
	case errors.Is(err, calllog.ErrJournalStart):
		return frame.CodeUnreachable, "the journal did not keep the call's start"
	case errors.Is(err, ErrPoolDown), errors.Is(err, ErrClosed), errors.Is(err, calllog.ErrParentEnded):
		return frame.CodeUnreachable, err.Error()
	case errors.As(err, &se), errors.As(err, &de):
		return frame.CodeInvalidFrame, err.Error()
	case errors.Is(err, errNotOffered), errors.Is(err, ErrUnknownTool):
		return frame.CodeInvalidFrame, "tool not offered"
	case errors.Is(err, errTooManyCalls), errors.Is(err, errNoParent):
		return frame.CodeInvalidFrame, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return frame.CodeTimeout, "deadline passed before the call started"
	case errors.Is(err, context.Canceled):
		return frame.CodeCancelled, "cancelled before the call started"
	}
	return frame.CodeInvalidFrame, "call refused"
}

// discard reads and drops the caller frames of a refused call up to its
// caller terminal (docs/protocol.md §6, reuse).
func (s *callServer) discard(a *ahead, r *packetio.Reader, id string) bool {
	for {
		pkt, err := a.next(r)
		if err != nil {
			return false
		}
		f, ok := pkt.(*wire.Frame)
		if !ok || f.CallID != id || f.Direction != frame.CallerToProvider {
			return false
		}
		if f.Kind.IsTerminal() {
			return true
		}
	}
}

// pumpIn reads the caller's frames and passes them to callee until the
// caller terminal. reusable: the caller's direction ended cleanly; bad:
// an invalid frame (fence, shape, schema) ends the call with failed
// invalid_frame. A caller that hangs up while a chunk waits for the
// callee ends it: see forward.
func (s *callServer) pumpIn(nc net.Conn, cs *connCalls, a *ahead, r *packetio.Reader, callee nestedCallee, id string) (reusable, bad bool) {
	fence := sequence.New(id, frame.CallerToProvider, 0)
	for {
		pkt, err := a.next(r)
		if err != nil {
			ie, ok := protocol.AsInvalid(err)
			return false, ok && ie.Type == protocol.TypeFrame
		}
		fp, ok := pkt.(*wire.Frame)
		if !ok || fp.CallID != id {
			return false, false
		}
		if err := fence.Accept(&fp.Frame); err != nil {
			return false, true
		}
		switch fp.Kind {
		case frame.KindStarted:
		case frame.KindChunk:
			hungUp, err := s.forward(cs, callee, fp.Frame)
			var se *SchemaError
			if errors.As(err, &se) {
				return false, true
			}
			if hungUp {
				return false, false
			}
		case frame.KindCompleted:
			callee.closeSend()
			return true, false
		default:
			callee.abort()
			return true, false
		}
	}
}

// forward passes one caller chunk to callee. While the callee does not
// take it the host does not read the connection (backpressure), so a
// cancelled frame the caller writes after it waits unread: the caller's
// hang-up is watched instead (docs/protocol.md §8 item 6), and ends the
// send and the callee. The watch starts only once the send has waited
// hangupWatchDelay: a chunk the callee takes at once costs none. hungUp
// reports that it did.
func (s *callServer) forward(cs *connCalls, callee nestedCallee, f frame.Frame) (hungUp bool, err error) {
	ctx, cancel := context.WithCancel(s.stop) // a send blocked on the callee also ends with close
	defer cancel()
	var hung atomic.Bool
	cs.watch.arm(func() {
		hung.Store(true)
		callee.abort()
		cancel()
	})
	err = callee.send(ctx, f)
	cs.watch.stop()
	return hung.Load(), err
}

// callOut writes a nested call's provider frames to its call connection,
// renumbered from 1 under the call's wire id, then end. An invalid caller
// frame (invalid closed) replaces the terminal with failed invalid_frame.
// release gives back what the call holds (its in-flight place) before the
// end goes out: a child that reads the end may make its next call at
// once. Used by one goroutine at a time: the callee's output side.
type callOut struct {
	w       *connWriter
	id      string
	seq     uint64
	invalid <-chan struct{} // nil for a call whose whole input came with its invoke
	release func()
	abort   func() // cancels the callee: its frames can no longer be written
	werr    error  // the first write error; later frames are dropped
	// endSent is set before the end is written.
	endSent atomic.Bool
	// last and end are the terminal's packets, kept here so that they
	// cost no allocation of their own; the Writer keeps neither.
	last wire.Frame
	end  wire.End
}

// put writes f, waiting for room in the connection's queue until ctx is
// done, and reports whether f was the terminal (nothing more may come) and
// the first write error, or ctx's when ctx ended the wait (f is then not
// written, or written whole later when its media was left to the Writer,
// a *coalesce.DetachedError; the frames after it, the terminal among
// them, still are).
func (o *callOut) put(ctx context.Context, f frame.Frame) (last bool, err error) {
	if f.Kind == frame.KindStarted {
		return false, nil
	}
	last = f.Kind.IsTerminal()
	if o.werr != nil {
		if last {
			o.release()
		}
		return last, o.werr
	}
	f.CallID, f.Direction, f.Sequence, f.Synthetic = o.id, frame.ProviderToCaller, o.seq, false
	o.seq++
	if last {
		select {
		case <-o.invalid:
			f, _ = frame.NewFailed(o.id, frame.ProviderToCaller, f.Sequence, frame.CodeInvalidFrame, "invalid caller frame")
		default:
		}
		o.release()
		o.endSent.Store(true)
		o.last, o.end = wire.Frame{Frame: f}, wire.End{CallID: o.id}
		o.werr = o.w.writeLast(&o.last, &o.end) // one write
		return true, o.werr
	}
	if err := o.w.w.Write(ctx, coalesce.Reply, &wire.Frame{Frame: f}); err != nil {
		var de *coalesce.DetachedError
		switch {
		case errors.As(err, &de):
			// ctx ended the wait for its media: the Writer took a copy
			// and writes f whole.
			return false, err
		case ctx.Err() != nil && errors.Is(err, context.Cause(ctx)):
			// ctx ended the wait for room (a host tool's Send): f was
			// not queued, the connection is as it was, and the terminal
			// still goes out, numbered after the frames that did.
			o.seq--
			return false, err
		}
		o.werr = err
		o.abort()
	}
	return false, o.werr
}

// pumpOut reads callee's provider frames and puts them to out up to the
// terminal; a callee that ends without one gives failed transport_error.
func pumpOut(callee *callAdapter, out *callOut) error {
	for {
		f, err := callee.recv(context.Background())
		if err != nil {
			f, _ = frame.NewFailed(out.id, frame.ProviderToCaller, out.seq, frame.CodeTransportError, "callee ended without a terminal")
		}
		if last, err := out.put(context.Background(), f); last {
			return err
		}
	}
}

// runningCall returns the call of ch whose id is id while its provider
// terminal has not come, or nil.
func (ch *child) runningCall(id string) *Call {
	ch.h.mu.Lock()
	conns := slices.Collect(maps.Keys(ch.conns))
	ch.h.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		cur := c.cur
		c.mu.Unlock()
		if cur != nil && cur.id == id && !cur.providerDone.Load() {
			return cur
		}
	}
	return nil
}

// depthOf returns rec's depth in its tree: 0 for the outermost call.
func depthOf(rec *recorder.Record) int {
	d := 0
	for p := rec.Parent(); p != nil; p = p.Parent() {
		d++
	}
	return d
}

// begin starts the call inv asks for, or returns why it is refused. end
// releases what the call holds; the caller calls it once the call ended.
//
// The caller's hang-up while the call starts (waiting for a place on a
// child, or for a journal to keep its start) cancels it.
//
// input, when not nil, is the caller's whole input, read with the invoke:
// the callee starts with it (a child's call writes it with its invoke),
// and its direction closed.
func (s *callServer) begin(cs *connCalls, inv *wire.Invoke, input *[]frame.Payload) (nestedCallee, func(), error) {
	h := s.ch.h
	if inv.Parent == "" {
		return nil, nil, errNoParent
	}
	parent := s.ch.runningCall(inv.Parent)
	if parent == nil {
		return nil, nil, errNoParent
	}
	var base context.Context
	if inv.Detached {
		base = recorder.Detached(h.life)
	} else {
		base = parent.rec.Context(parent.ctx)
	}
	var timeout time.Duration
	if inv.TimeoutMS > 0 {
		timeout = protocol.Millis(inv.TimeoutMS)
	}
	if inv.Detached && (timeout == 0 || timeout > s.detachedTimeout) {
		timeout = s.detachedTimeout // a detached call has no parent to end it
	}
	// One context: a timeout's cancels it as WithCancel's would. A
	// timeout that ends within deadlineSlack of the parent's deadline
	// is the parent's (docs/protocol.md §8 item 4): the call's context
	// has it already, and a timer of its own would cost a wake-up of
	// another thread of the host's (see deadlineSlack).
	var ctx context.Context
	var cancel context.CancelFunc
	if pd, ok := base.Deadline(); timeout > 0 && !(ok && pd.Sub(time.Now().Add(timeout)) < deadlineSlack) {
		ctx, cancel = context.WithTimeout(base, timeout)
	} else {
		ctx, cancel = context.WithCancel(base)
	}
	ht, isHost := s.hostTools[inv.ToolID]
	var refusal error
	depth := depthOf(parent.rec) + 1
	switch {
	case !isHost && !s.childTools[inv.ToolID]:
		refusal = errNotOffered
	case !inv.Detached && depth > s.maxDepth:
		refusal = &depthError{Depth: depth, Limit: s.maxDepth}
	}
	if refusal == nil {
		s.mu.Lock()
		if s.inFlight >= s.maxFlight {
			refusal = errTooManyCalls
		} else {
			s.inFlight++
		}
		s.mu.Unlock()
	}
	if refusal != nil {
		err := h.refuseStep(ctx, inv.ToolID, refusal)
		cancel()
		return nil, nil, err
	}
	// The parent's end cancels the call: a watch that costs no goroutine
	// until the parent ends (context.AfterFunc on a context of the
	// standard library's), counted in watch while it runs.
	var watch sync.WaitGroup
	stopParent := func() bool { return false }
	if !inv.Detached {
		watch.Add(1)
		stopParent = context.AfterFunc(parent.ended(), func() {
			defer watch.Done()
			if ctx.Err() == nil {
				h.log.Info("nested call cancelled: its parent ended", logCallID, parent.id, logTreeID, parent.rec.Tree(), "child", s.ch.id, "tool", inv.ToolID)
			}
			cancel()
		})
	}
	end := func() {
		cancel()
		if stopParent() {
			watch.Done()
		}
		watch.Wait()
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}
	var callee nestedCallee
	var err error
	// A start that waits (for a place on a child, or for a journal to
	// keep it) is watched for the caller's hang-up once it has waited
	// hangupWatchDelay; one that does not wait costs no watch.
	cs.watch.arm(cancel)
	if isHost {
		callee, err = s.startHostTool(ctx, cancel, ht, inv, parent, input)
	} else {
		opts := []CallOption{WithTrace(inv.Trace)}
		if input != nil {
			opts = append(opts, WithInput(*input...))
		}
		var c *Call
		c, err = h.Call(ctx, inv.ToolID, inv.Arguments, opts...)
		if err == nil {
			callee = &callAdapter{c: c}
		}
	}
	cs.watch.stop()
	if err != nil {
		end()
		return nil, nil, err
	}
	return callee, end, nil
}

// refuseStep records a refused call a child made, as a step of the call in
// ctx, and returns the error its refusal is.
func (h *Host) refuseStep(ctx context.Context, tool string, err error) error {
	rec, berr := h.rec.Begin(ctx, recorder.CallInfo{ID: h.newCallID(), Tool: tool})
	if berr != nil {
		if rec != nil {
			return berr
		}
		return err
	}
	class := "not_offered"
	var de *depthError
	switch {
	case errors.As(err, &de):
		class = "depth"
	case errors.Is(err, errTooManyCalls):
		class = "in_flight"
	}
	return h.refuse(ctx, rec, class, frame.CodeInvalidFrame, err)
}

// startHostTool records and starts a call of a host tool.
func (s *callServer) startHostTool(ctx context.Context, cancel context.CancelFunc, ht *HostTool, inv *wire.Invoke, parent *Call, input *[]frame.Payload) (nestedCallee, error) {
	h := s.ch.h
	ts := s.cat.Tool(inv.ToolID)
	args := inv.Arguments
	if args == nil {
		args = frame.Payload{0x80}
	}
	id := h.newCallID()
	rec, err := h.rec.Begin(ctx, recorder.CallInfo{ID: id, Tool: inv.ToolID, ToolVersion: ts.Desc.Version, Args: args})
	if err != nil {
		return nil, err
	}
	if args, err = checkArguments(ts, args); err != nil {
		return nil, h.refuse(ctx, rec, "schema", frame.CodeInvalidFrame, err)
	}
	if input != nil {
		for _, p := range *input {
			if err := validate(ts.Input, p); err != nil {
				return nil, h.refuse(ctx, rec, "schema", frame.CodeInvalidFrame, err)
			}
		}
	}
	rec.Request(recorder.RequestInfo{Child: "host"})
	tc := &ToolCall{ID: id, Tree: rec.Tree(), ParentTree: parent.rec.Tree(), Child: s.ch.id, Arguments: args}
	if !inv.Detached {
		tc.Parent = parent.id
	}
	hc := &recordedHostCall{hc: newHostCallee(rec.Context(ctx), cancel, ht, ts, tc), rec: rec}
	if input != nil {
		for i, p := range *input {
			f, _ := frame.NewChunk(inv.CallID, frame.CallerToProvider, uint64(i)+1, p, nil)
			hc.send(ctx, f) // checked above; at most protocol.IngressQueue chunks (readAhead): never waits
		}
		hc.closeSend()
	}
	return hc, nil
}

// recordedHostCall is a host tool's run as a nested callee, recorded in
// the call log.
type recordedHostCall struct {
	hc  *hostCallee
	rec *recorder.Record
}

func (r *recordedHostCall) send(ctx context.Context, f frame.Frame) error {
	if err := r.hc.send(ctx, f); err != nil {
		return err
	}
	r.rec.Input(f)
	return nil
}

func (r *recordedHostCall) closeSend() { r.hc.closeSend() }

func (r *recordedHostCall) abort() { r.hc.abort() }

// start runs the host tool; its goroutine writes each frame to out
// (see emit for what the log records and when).
func (r *recordedHostCall) start(out *callOut, done chan<- error) {
	r.hc.start(r.emit(out, done))
}

// run runs the host tool on the calling goroutine.
func (r *recordedHostCall) run(out *callOut, done chan<- error) {
	r.hc.runHere(r.emit(out, done))
}

// emit returns what writes each frame of the host tool to out. A chunk
// is recorded in the log once out took it, as a child's output is once it
// was read and the caller's input once the callee took it: a chunk that
// was not written (its sender's context ended the wait for room, or the
// connection broke) is not in the log; one whose media the Writer took a
// copy of (a *coalesce.DetachedError) is written whole, so it is. The
// terminal is written after the call's end is recorded, and its write's
// error goes to done.
func (r *recordedHostCall) emit(out *callOut, done chan<- error) func(ctx context.Context, f frame.Frame) error {
	return func(ctx context.Context, f frame.Frame) error {
		if !f.Kind.IsTerminal() {
			_, err := out.put(ctx, f)
			var de *coalesce.DetachedError
			if err == nil || errors.As(err, &de) {
				f.Sequence = out.seq - 1 // the sequence it was written with (put numbers it)
				r.rec.Output(f)
			}
			return err
		}
		r.rec.End(context.Background(), recorder.OutcomeOf(f)) // a journal's end error is the host's to log, not the caller's
		_, err := out.put(context.Background(), f)
		done <- err
		return err
	}
}

// callAdapter is a call of a child's tool as a nested callee.
type callAdapter struct{ c *Call }

func (a *callAdapter) send(ctx context.Context, f frame.Frame) error {
	return a.c.Send(ctx, f.Payload, f.Media)
}

func (a *callAdapter) closeSend() { a.c.CloseSend() }

func (a *callAdapter) abort() { a.c.Cancel() }

// start reads the call on a goroutine of its own (stopped by the call's
// terminal; its end is waited for through done).
func (a *callAdapter) start(out *callOut, done chan<- error) {
	go a.run(out, done)
}

// run reads the call on the calling goroutine up to its terminal.
func (a *callAdapter) run(out *callOut, done chan<- error) { done <- pumpOut(a, out) }

func (a *callAdapter) recv(ctx context.Context) (frame.Frame, error) {
	for {
		f, err := a.c.Recv(ctx)
		if err != nil {
			return f, err
		}
		if f.Kind == frame.KindStarted {
			continue
		}
		if f.Kind.IsTerminal() {
			for { // read the call to its end (a journal's error included)
				if _, err := a.c.Recv(ctx); errors.Is(err, io.EOF) {
					break
				}
			}
		}
		return f, nil
	}
}
