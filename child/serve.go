package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/spanctx"
	"github.com/skulkrt/skulk/internal/turns"
	"github.com/skulkrt/skulk/wire"
)

// rememberedCancels is how many cancel ids for calls the child does not
// know it remembers (docs/protocol.md §6, "Call ids"); the oldest is
// forgotten first.
const rememberedCancels = 1024

// hostGoneWait bounds how long Serve waits for cancelled handlers once the
// host is gone, so that a child exits within 1 s of control EOF.
const hostGoneWait = 100 * time.Millisecond

// inlineWatch is how often the server's watch looks at the handlers that
// run on their connection's reader (conn.runInline) while there are any:
// one it finds running twice in a row, so for inlineWatch or more, gets a
// new reader goroutine for its connection, which sees the connection
// close. Short calls, most of them, never need one. The watch is not a
// saving but runInline's price (see there for what runInline saves): a
// ticker armed only while handlers run inline, one look per inlineWatch,
// and stopped when the last of them returns.
const inlineWatch = 50 * time.Millisecond

// connWriteGrace bounds how long a stream connection's last queued packets
// may take to reach a peer that stopped reading, when the connection is
// released.
const connWriteGrace = time.Second

// byeMargin is how long before its limit (grace_ms + cancel_grace_ms after
// the drain) a drain abandons the handlers still running, at most half the
// cancel grace: their terminals (written by the drain, or already being
// written) get four fifths of it to reach the host, and bye is written
// before the limit, as docs/protocol.md §5 item 5 requires, with the rest
// to spare for a late timer.
const byeMargin = 100 * time.Millisecond

// minTerminalWindow is the least time a drain's abandoned calls get for
// their terminals (and the ends of handlers that did return) to reach a
// host that does not read them, however small the cancel grace: with a
// grace of 0 the limit leaves none, and a write deadline already past
// loses every terminal. A host that reads takes them as soon as the child
// writes them, however late that is (see conn.giveUpAt): bye is late past
// the limit only by the child's own wait for a processor, or by about
// this much for a host that does not read.
const minTerminalWindow = 20 * time.Millisecond

// fullPoll is how often, once a drain's time for the terminals is up,
// conn.giveUpAt looks again whether the connection's writes wait for a
// host that does not read.
const fullPoll = 5 * time.Millisecond

// acceptBackoffMax bounds the pause after a failed Accept (EMFILE, say).
const acceptBackoffMax = time.Second

// Serve runs a child over an already connected control connection and a
// stream listener, as docs/protocol.md describes (Run serves the ones the host
// passed; NewListener makes a Listener of a net.Listener's Accept and
// Close, for a test or an embedding program): it sends hello, waits for
// startup, then answers pings, serves the calls arriving on stream
// connections accepted from streams, and handles cancel and drain.
//
// Serve returns nil when a drain completed (bye was sent), when reading the
// control connection after startup ended for any reason but a protocol
// break (EOF, a reset: the host is gone), or when ctx is done; it returns
// an error matching ErrStartup when the host's startup was unusable, an error
// matching ErrOptions for invalid opts, and an error matching
// wire.ErrProtocol when the host broke the protocol on the control
// connection. Before returning it closes control, streams and every stream
// connection, and waits for every goroutine it started, with one exception:
// the goroutine of a handler that ignores its cancellation is abandoned once
// its grace is over (it finishes when the handler returns; nothing it does
// reaches the wire any more). When the host is gone Serve waits at most a
// few hundred milliseconds for cancelled handlers.
func Serve(ctx context.Context, control Conn, streams Listener, opts Options) error {
	if err := opts.validate(); err != nil {
		control.Close()
		streams.Close()
		return err
	}
	s := newServer(control, streams, &opts)
	return s.serve(ctx)
}

// server is one running child. Fields are set before its goroutines start
// unless their comment says otherwise.
type server struct {
	opts    *Options
	log     *slog.Logger
	tracer  trace.Tracer                     // from opts.TracerProvider; nil: no spans
	tools   atomic.Pointer[map[string]*Tool] // by id; replaced whole by Options.ToolUpdates (watchTools)
	control Conn
	ln      Listener
	cw      *coalesce.Writer // the control connection's writer: pongs and bye; never gated
	// gate is where the stream connections' flushers take turns once they
	// stream (coalesce.NewGated): one slot per processor, so that the control
	// reader, a new connection's reader and a fresh call's handler wait
	// behind a few streaming flushers, not behind every one.
	gate *turns.Gate

	offer       *offer        // the calls the host offers, from startup; nil for none
	limits      wire.Limits   // effective, from startup
	cancelGrace time.Duration // from startup
	toolUpdates bool          // startup's tools_updates: the host takes tools packets

	ctx       context.Context // parent of every call; cancelled when Serve stops
	cancel    context.CancelCauseFunc
	deadlines deadlines // the calls' timeout_ms; stopped by shutdown

	running  atomic.Int64 // handlers that have not returned (pong.streams)
	stuck    atomic.Int64 // cancelled handlers past their grace (pong.stuck)
	active   atomic.Int64 // calls whose runner has not finished
	draining atomic.Bool

	callDone chan struct{} // size 1: "a call finished"; a full channel already says so

	mu         sync.Mutex
	calls      map[string]*call   // running calls by id; guarded by mu
	conns      map[*conn]struct{} // open stream connections; guarded by mu
	remembered remembered         // cancel ids of unknown calls; guarded by mu
	closing    bool               // shutdown began: no new connections; guarded by mu

	wg      sync.WaitGroup // accept loop, control reader, drain, connection readers
	runners sync.WaitGroup // the connections' call runners and readers that ran a handler (waited for only when no handler is abandoned)

	// watch looks at the handlers that run inline (see inlineWatch) while
	// they run or start; stopped by shutdown.
	watch *ticker
}

func newServer(control Conn, ln Listener, opts *Options) *server {
	s := &server{
		opts: opts, log: opts.logger(), control: control, ln: ln,
		callDone: make(chan struct{}, 1),
		calls:    make(map[string]*call),
		conns:    make(map[*conn]struct{}),
		gate:     turns.New(runtime.GOMAXPROCS(0)),
	}
	s.remembered.init()
	s.watch = newTicker(inlineWatch, s.watchTick)
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(spanctx.ScopeName)
	}
	s.tools.Store(toolMap(opts.Tools))
	return s
}

// toolMap indexes tools by id.
func toolMap(tools []Tool) *map[string]*Tool {
	m := make(map[string]*Tool, len(tools))
	for i := range tools {
		m[tools[i].ID] = &tools[i]
	}
	return &m
}

// tool returns the tool named id, or nil.
func (s *server) tool(id string) *Tool { return (*s.tools.Load())[id] }

// watchTools takes the lists of Options.ToolUpdates until s.ctx is done
// or the channel is closed.
func (s *server) watchTools(updates <-chan []Tool) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case tools, ok := <-updates:
			if !ok {
				return
			}
			if err := s.setTools(tools); err != nil {
				s.log.Error("tool list not changed", "err", err)
			}
		}
	}
}

// setTools replaces the child's tools with a copy of tools and sends the
// host their descriptors. The handlers change first: once the host knows
// a new tool, its calls find their handler. A call the host started
// before it read the packet, of a tool the list drops, ends with
// "unknown tool".
func (s *server) setTools(tools []Tool) error {
	if !s.toolUpdates {
		return errToolsNotOffered
	}
	if err := validateTools(tools); err != nil {
		return err
	}
	tools = slices.Clone(tools)
	p := &wire.Tools{Tools: make([]wire.Tool, len(tools))}
	for i := range tools {
		p.Tools[i] = tools[i].descriptor()
	}
	s.tools.Store(toolMap(tools))
	if err := s.cw.Write(s.ctx, coalesce.Stream, p); err != nil {
		return fmt.Errorf("child: writing the tools packet: %w", err)
	}
	s.log.Debug("tool list changed", "tools", len(tools))
	return nil
}

func (s *server) hello() *wire.Hello {
	h := &wire.Hello{
		Protocol:   []int64{wire.ProtocolVersion},
		SDK:        s.opts.SDK,
		PID:        int64(os.Getpid()),
		MaxStreams: int64(s.opts.MaxStreams),
		Limits:     packetio.Effective(s.opts.limits()),
	}
	if h.SDK == "" {
		h.SDK = defaultSDK
	}
	if h.MaxStreams == 0 {
		h.MaxStreams = defaultMaxStreams
	}
	for i := range s.opts.Tools {
		h.Tools = append(h.Tools, s.opts.Tools[i].descriptor())
	}
	return h
}

func (s *server) serve(ctx context.Context) error {
	s.cw = coalesce.New(s.control, s.opts.limits())
	cr := packetio.NewReader(s.control, s.opts.limits())
	// ctx may end while the child waits for startup: that wakes the write
	// of hello or the read of startup.
	stopWake := context.AfterFunc(ctx, func() {
		s.control.SetWriteDeadline(time.Unix(1, 0))
		s.control.SetReadDeadline(time.Unix(1, 0))
	})
	err := s.start(cr)
	stopWake()
	if err != nil && ctx.Err() != nil {
		err = nil
	}
	if err != nil || ctx.Err() != nil {
		s.control.Close()
		s.ln.Close()
		s.cw.Close()
		return err
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	defer s.cancel(errHostGone)

	drained := make(chan struct{}) // closed by the drain goroutine once bye is written
	ctlDone := make(chan error, 1) // the control reader's result; size 1 so it never blocks
	s.wg.Add(1)                    // the acceptor's count (see acceptLoop)
	go s.acceptLoop()              // stopped by closing s.ln
	s.wg.Go(func() {               // stopped by closing s.control
		ctlDone <- s.readControl(cr, drained)
	})
	if s.opts.ToolUpdates != nil {
		s.wg.Go(func() { s.watchTools(s.opts.ToolUpdates) }) // stopped by s.cancel
	}

	wait := hostGoneWait
	select {
	case err = <-ctlDone:
		if errors.Is(err, wire.ErrProtocol) {
			err = fmt.Errorf("child: control connection: %w", err)
		} else {
			err = nil // EOF, a reset, any read error: the host is gone
		}
		s.cancel(errHostGone)
	case <-drained:
		s.cancel(errHostGone) // only abandoned calls are left
		wait = 0
	case <-ctx.Done():
		s.cancel(errHostGone)
	}
	s.shutdown(wait)
	return err
}

// start writes hello and reads startup.
func (s *server) start(cr *packetio.Reader) error {
	timeout := s.opts.StartupTimeout
	if timeout == 0 {
		timeout = defaultStartupTimeout
	}
	// A Request: the Writer is idle, so this goroutine writes hello
	// itself rather than wake the flusher for it (one goroutine switch
	// less on every start); Flush waits for what a full socket left to
	// the flusher. A host that takes no hello gets no more time than one
	// that sends no startup.
	until := time.Now().Add(timeout)
	s.control.SetWriteDeadline(until)
	err := s.cw.Write(context.Background(), coalesce.Request, s.hello())
	if err == nil {
		err = s.cw.Flush()
	}
	s.control.SetWriteDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: the host took no hello (waited %v)", errNoStartup, timeout)
		}
		return fmt.Errorf("child: writing hello: %w", err)
	}
	s.control.SetReadDeadline(until)
	p, err := cr.ReadPacket()
	s.control.SetReadDeadline(time.Time{})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w (waited %v)", errNoStartup, timeout)
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: control connection closed before startup", errNoStartup)
		}
		if !isConnErr(err) || errors.Is(err, wire.ErrProtocol) { // the packet, not the connection
			return fmt.Errorf("%w: %w", errBadStartup, err)
		}
		return fmt.Errorf("child: reading startup: %w", err)
	}
	st, ok := p.(*wire.Startup)
	if !ok {
		return fmt.Errorf("%w: got %s before startup", errBadStartup, packetio.TypeOf(p))
	}
	if st.Protocol != wire.ProtocolVersion {
		return fmt.Errorf("%w: startup chose %d, hello offered [%d]", errVersion, st.Protocol, wire.ProtocolVersion)
	}
	s.limits = packetio.MinLimits(s.opts.limits(), st.Limits)
	cr.SetLimits(s.limits)
	s.cw.SetLimits(s.limits)
	s.cancelGrace = protocol.Millis(st.CancelGraceMS) // absent from the packet: the wire's default
	s.toolUpdates = st.ToolsUpdates
	if s.offer, err = newOffer(st.Calls); err != nil {
		return fmt.Errorf("%w: calls: %w", errBadStartup, err)
	}
	s.log.Debug("started", "child_id", st.ChildID, "protocol", st.Protocol)
	return nil
}

// readControl answers pings and handles cancel and drain until the control
// connection fails. A pong is written from here directly: nothing a handler
// or a stream connection does can delay it.
func (s *server) readControl(cr *packetio.Reader, drained chan struct{}) error {
	drainStarted := false
	for {
		p, err := cr.ReadPacket()
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *wire.Ping:
			// Request: when the control writer is idle this goroutine
			// writes the pong itself, rather than wait for the flusher
			// to get the CPU beside the handlers.
			err = s.cw.Write(context.Background(), coalesce.Request, &wire.Pong{Nonce: p.Nonce, Streams: s.running.Load(), Stuck: s.stuck.Load()})
			if err != nil {
				return err
			}
		case *wire.Cancel:
			s.cancelCall(p.CallID)
		case *wire.Drain:
			if !drainStarted {
				drainStarted = true
				grace := protocol.Millis(p.GraceMS)
				// Refusing starts here, before the next control packet is
				// read: a pong answered after a drain implies invokes from
				// then on are refused.
				start := s.stopAccepting()
				s.wg.Go(func() { s.drain(start, grace, drained) }) // stopped by s.ctx
			}
		default:
			return fmt.Errorf("%w: unexpected %s packet", wire.ErrProtocol, packetio.TypeOf(p))
		}
	}
}

// cancelCall cancels a running call, or remembers the id of an unknown
// one. A call whose end is written, or being written, is unknown already
// (docs/protocol.md §6, "Call ids": its id is free), even before its
// runner takes it out of the table: the host may have read its end and
// sent the cancel since.
func (s *server) cancelCall(id string) {
	s.mu.Lock()
	c := s.calls[id]
	if c != nil && c.ended() {
		c = nil
	}
	if c == nil {
		s.remembered.add(id)
	}
	s.mu.Unlock()
	if c != nil {
		c.cancelWith(ErrCancelRequested)
	}
}

// stopAccepting marks the child draining, so that invokes from now on are
// refused, and closes the listener; it returns when that happened.
func (s *server) stopAccepting() time.Time {
	start := time.Now()
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	s.ln.Close()
	return start
}

// drain, begun at start by stopAccepting, lets running calls finish within grace, cancels
// the rest, and writes bye after the last end or, abandoning the handlers
// still running, shortly before grace + cancel grace (see byeMargin).
func (s *server) drain(start time.Time, grace time.Duration, drained chan struct{}) {
	graceT := time.NewTimer(grace)
	defer graceT.Stop()
	limit := grace + s.cancelGrace // each at most half the largest Duration (protocol.Millis): no overflow
	margin := min(byeMargin, s.cancelGrace/2)
	hard := time.NewTimer(limit - margin)
	defer hard.Stop()
wait:
	for s.active.Load() > 0 {
		select {
		case <-s.callDone:
		case <-graceT.C:
			for _, c := range s.runningCalls() {
				c.cancelWith(ErrDrained)
			}
		case <-hard.C:
			s.log.Warn("drain: abandoning handlers that ignore cancellation", "count", s.active.Load())
			// The connections close once bye is written: every call's
			// terminal gets until deadline to reach a host that does not
			// read it (conn.giveUpAt), all at once, and bye follows before
			// the limit.
			deadline := start.Add(limit - margin/5)
			if soonest := time.Now().Add(minTerminalWindow); deadline.Before(soonest) {
				deadline = soonest
			}
			var abandoning sync.WaitGroup
			for _, c := range s.runningCalls() {
				c.cancelWith(ErrDrained) // in case the grace timer has not been seen yet
				// abandon returns once the terminal is out, or its
				// connection gave up on the host (conn.giveUpAt, about
				// deadline for a host that does not read, connWriteGrace
				// after it at most); waited for below.
				abandoning.Go(func() { c.abandon(deadline) })
			}
			abandoning.Wait()
			break wait
		case <-s.ctx.Done():
			return
		}
	}
	if err := s.cw.Write(context.Background(), coalesce.Stream, &wire.Bye{Reason: "drained"}); err == nil {
		s.cw.Flush()
	}
	close(drained)
}

// runningCalls returns the calls in the table.
func (s *server) runningCalls() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := make([]*call, 0, len(s.calls))
	for _, c := range s.calls {
		calls = append(calls, c)
	}
	return calls
}

// listenerClosed reports whether the server closed its listener: a drain
// or the shutdown began. An Accept that fails then is no failure.
func (s *server) listenerClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing || s.draining.Load()
}

// acceptLoop accepts the next stream connection and then reads it on this
// goroutine, after starting a new acceptLoop for the connections after
// it: the invoke that made the host dial is usually waiting already, and
// reading it here does not hand the call to another goroutine (often
// another thread, woken from idle) on its way to the handler. The
// goroutine is counted in s.wg by whoever starts it; the count passes to
// the connection's reader (serve gives it back) or is given back once the
// listener is closed.
func (s *server) acceptLoop() {
	c := s.accept()
	if c == nil {
		s.wg.Done()
		return
	}
	go s.acceptLoop() // counted by accept; stopped by closing s.ln
	c.serve()
}

// accept waits for a stream connection and registers it, counting the
// next acceptLoop in s.wg; nil once the listener is closed or the server
// shuts down.
func (s *server) accept() *conn {
	backoff := 5 * time.Millisecond
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.listenerClosed() || s.ctx.Err() != nil {
				return nil
			}
			s.log.Warn("accepting a stream connection failed", "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return nil
			}
			backoff = min(2*backoff, acceptBackoffMax)
			continue
		}
		c := newConn(s, nc)
		s.mu.Lock()
		closing := s.closing
		if !closing {
			s.conns[c] = struct{}{}
			s.wg.Add(1) // the next acceptLoop's
		}
		s.mu.Unlock()
		if closing {
			nc.Close()
			c.w.Close()
			return nil
		}
		return c
	}
}

// watchTick looks at every connection (conn.watched), and reports
// whether an inline handler is running on any: the watch's ticker then
// looks again.
func (s *server) watchTick() (busy bool) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		busy = c.watched() || busy
	}
	return busy
}

// shutdown closes every connection and waits for the goroutines, giving
// handlers up to wait to return.
func (s *server) shutdown(wait time.Duration) {
	// The watch's tick may be starting a reader, counted in s.runners
	// before stop returns.
	s.watch.stop()
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	s.control.Close()
	for _, c := range conns {
		c.nc.Close()
	}
	s.wg.Wait()
	// Readers that ran a handler inline may still add a deadline: after
	// stop that does nothing, and s.ctx has cancelled their calls.
	s.deadlines.stop()
	if wait > 0 && s.active.Load() > 0 {
		t := time.NewTimer(wait)
	loop:
		for s.active.Load() > 0 {
			select {
			case <-s.callDone:
			case <-t.C:
				break loop
			}
		}
		t.Stop()
	}
	if n := s.active.Load(); n > 0 {
		s.log.Warn("abandoning handlers that ignore cancellation", "count", n)
	} else {
		s.runners.Wait()
	}
	s.offer.close()
	s.cw.Close()
}

// register adds a call to the table, or says why it must end at once.
// It returns the code and message of that immediate terminal, or ok.
func (s *server) register(c *call) (refusal immediate, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := c.inv.CallID
	switch {
	case s.calls[id] != nil && !s.calls[id].ended():
		// A call whose end is being written has released its id
		// (docs/protocol.md §6, "Call ids"): the host may reuse it as soon
		// as it read the end, before that call's runner took it out of the table. Outside
		// a drain (which refuses every invoke below) the new call then
		// takes the id's place; unregister leaves it there.
		return immediate{dup: true}, false
	case s.closing || s.draining.Load():
		return immediate{kind: frame.KindFailed, code: frame.CodeUnreachable, msg: "draining"}, false
	case s.remembered.take(id):
		return immediate{kind: frame.KindCancelled, code: frame.CodeCancelled, msg: "cancelled by the host"}, false
	case c.tool == nil:
		return immediate{kind: frame.KindFailed, code: frame.CodeInvalidFrame, msg: "unknown tool"}, false
	}
	s.calls[id] = c
	s.active.Add(1)
	return immediate{}, true
}

// unregister removes a finished call and wakes a drain.
func (s *server) unregister(c *call) {
	s.mu.Lock()
	if s.calls[c.inv.CallID] == c {
		delete(s.calls, c.inv.CallID)
	}
	s.mu.Unlock()
	s.active.Add(-1)
	select {
	case s.callDone <- struct{}{}:
	default:
	}
}

func (s *server) forgetConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// immediate is a terminal written at once for an invoke that starts no
// handler; dup marks an invoke whose call id is already running.
type immediate struct {
	kind frame.Kind
	code frame.Code
	msg  string
	dup  bool
}

// remembered holds the most recent rememberedCancels cancel ids of calls the
// child did not know, so that an invoke arriving after its cancel ends at
// once. Not safe for concurrent use.
type remembered struct {
	ring [rememberedCancels]string // ring[n%rememberedCancels] is the id added n-th
	n    uint64                    // ids added so far
	slot map[string]uint64         // id -> the n at which it was added
}

func (r *remembered) init() { r.slot = make(map[string]uint64) }

func (r *remembered) add(id string) {
	if _, ok := r.slot[id]; ok {
		return
	}
	i := r.n % rememberedCancels
	// The id in slot i was added rememberedCancels ids ago; it is forgotten
	// unless it was taken and added again since (then it has a newer slot).
	if old := r.ring[i]; old != "" && r.slot[old] == r.n-rememberedCancels {
		delete(r.slot, old)
	}
	r.ring[i] = id
	r.slot[id] = r.n
	r.n++
}

// take reports whether id was remembered, and forgets it.
func (r *remembered) take(id string) bool {
	if _, ok := r.slot[id]; !ok {
		return false
	}
	delete(r.slot, id)
	return true
}
