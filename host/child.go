package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/internal/packetio"
	"github.com/skulkrt/skulk/internal/protocol"
	"github.com/skulkrt/skulk/internal/toolschema"
	"github.com/skulkrt/skulk/wire"
)

// slot is one place of the pool: one child at a time, restarted by its
// supervisor goroutine. Fields are guarded by Host.mu.
type slot struct {
	index       int
	incarnation int
	state       childState // while cur is set, always cur.state (both change together under Host.mu)
	cur         *child
	restarts    int
	lastCause   error
	closeErr    error // set by the supervisor when Close found a problem
}

// child is one started child process and the host's side of its
// connections.
//
// Goroutines: the control reader (readControl) and one reader per stream
// connection (streamConn.run), all counted in wg and waited for by stop, as
// is each running call (from acquire to Call.release) with its clocks'
// callbacks and cancel writers (Call.startClocks); the process's own goroutines are
// waited for by process.cleanup. The supervisor goroutine of the slot owns
// the child's lifecycle (the pings, the decision that it is dead, stop).
type child struct {
	h     *Host
	slot  *slot
	id    string
	proc  *process
	ctrlR *packetio.Reader // owned by readControl once the handshake is done
	// ctrlIn counts the bytes read from the control connection (by the
	// handshake, then readControl); with the bytes still unread on the
	// socket it says how much the child has written there, which the
	// supervisor compares from one health timeout to the next.
	ctrlIn atomic.Uint64
	// ctrlHandled is how much of ctrlIn readControl has handled: what
	// it read and has not handled yet (ctrlIn - ctrlHandled) waits for
	// readControl to get the CPU, as unread bytes on the socket do.
	ctrlHandled atomic.Uint64
	ctrlW       *coalesce.Writer
	maxStreams  int
	limits      wire.Limits
	outLimit    *outputLimit        // the rate its output lines are forwarded at
	cat         *toolschema.Catalog // hello's, then each tools packet's; replaced under Host.mu once readControl runs

	calls    *callServer    // the call socket's server; nil when the host offers no calls (docs/protocol.md §8)
	pongs    chan wire.Pong // size 1; overflow: the older pong is replaced by the newer
	byes     chan struct{}  // size 1: "the child said bye"; a full channel already says so
	ctrlDone chan struct{}  // closed when readControl returns
	ctrlErr  error          // why readControl returned; set before ctrlDone is closed
	wg       sync.WaitGroup

	// wake is size 1: "a call was routed to the child with none in
	// flight" (routed); a full channel already says so.
	wake chan struct{}
	// pingedAt is when the supervisor's latest ping went out, in
	// nanoseconds after born plus one (0: none yet): routed reads it so
	// that a call routed within HealthInterval of a ping, which the
	// supervisor would only look at and drop, does not wake it. Written
	// by the supervisor alone.
	pingedAt atomic.Int64
	born     time.Time

	// Guarded by Host.mu.
	state   childState
	running int
	ended   time.Time // when a call last ended whose handler may still run (pingDue)
	stuck   int       // from the latest pong
	streams int       // from the latest pong
	idle    []*streamConn
	conns   map[*streamConn]struct{}
	cause   error // why the child died or was stopped, once it was
}

// startChild spawns a child for s and completes the handshake within
// Config.StartTimeout (and ctx). On success the child is ready and
// installed in s.
func (h *Host) startChild(ctx context.Context, s *slot) (*child, error) {
	h.mu.Lock()
	s.incarnation++
	id := fmt.Sprintf("c%d.%d", s.index, s.incarnation)
	h.setStateLocked(s, stateStarting)
	h.mu.Unlock()

	outLimit := newOutputLimit()
	proc, err := spawn(&h.cfg, id, slog.New(limitOutput(h.log.Handler(), outLimit)), h.contain, h.cred)
	if err != nil {
		return nil, err
	}
	ch := &child{
		h: h, slot: s, id: id, proc: proc, outLimit: outLimit,
		pongs:    make(chan wire.Pong, 1),
		byes:     make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		born:     time.Now(),
		ctrlDone: make(chan struct{}),
		conns:    map[*streamConn]struct{}{},
		state:    stateStarting,
	}
	ch.ctrlR = packetio.NewReader(countingReader{proc.ctrl, &ch.ctrlIn}, h.cfg.Limits)
	if err := ch.handshake(ctx); err != nil {
		proc.ctrl.Close()
		if ch.calls != nil {
			ch.calls.close()
		}
		proc.kill(h.cfg.KillGrace)
		proc.cleanup()
		outLimit.flush()
		if ch.ctrlW != nil {
			ch.ctrlW.Close()
		}
		return nil, &childError{id: id, err: err}
	}
	if ch.calls != nil {
		ch.calls.listen()
	}
	ch.wg.Add(1)
	go ch.readControl() // stopped by closing the control connection (stop); waited for through wg
	h.mu.Lock()
	ch.state = stateReady
	h.setStateLocked(s, stateReady)
	s.cur = ch
	h.setCatalogLocked(ch.cat)
	h.notifyLocked()
	h.mu.Unlock()
	h.log.Info("child started", "child", id, "pid", proc.pid, "max_streams", ch.maxStreams)
	return ch, nil
}

// handshake reads hello and writes startup.
func (ch *child) handshake(ctx context.Context) error {
	cfg := &ch.h.cfg
	conn := ch.proc.ctrl
	conn.SetReadDeadline(time.Now().Add(cfg.StartTimeout))
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	pkt, err := ch.ctrlR.ReadPacket()
	if !stop() {
		// ctx ended the start, perhaps just as the hello came: its past
		// deadline may land after any reset below, so this child is not
		// used (its read of the control connection would fail at once).
		return ctx.Err()
	}
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &ne) && ne.Timeout():
			return errStartTimeout
		}
		// A child that ended its control connection before its hello has
		// most likely exited: its exit is waited for (helloExitWait) so
		// that the error can say how it ended.
		t := time.NewTimer(helloExitWait)
		defer t.Stop()
		select {
		case <-ch.proc.exited:
			return fmt.Errorf("%w: child exited before its hello: %s", ErrHandshake, ch.proc.exitStatus())
		case <-t.C:
		}
		return fmt.Errorf("%w: reading hello: %w", ErrHandshake, err)
	}
	hello, ok := pkt.(*wire.Hello)
	if !ok {
		return fmt.Errorf("%w: first packet is %s, not hello", ErrHandshake, packetio.TypeOf(pkt))
	}
	if !slices.Contains(hello.Protocol, wire.ProtocolVersion) {
		return errProtocolVersion
	}
	cat, err := newCatalog(hello.Tools)
	if err != nil {
		return err
	}
	ch.cat = cat
	ch.maxStreams = int(min(hello.MaxStreams, 1<<20))
	ch.limits = packetio.MinLimits(cfg.Limits, hello.Limits)
	ch.ctrlR.SetLimits(ch.limits)
	ch.ctrlW = coalesce.New(conn, ch.limits)
	if ch.calls, err = newCallServer(ch); err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	var offer *wire.Calls
	if ch.calls != nil {
		offer = ch.calls.offer
	}
	// A Request: the new Writer is idle, so startup is written here,
	// not handed to the flusher (a goroutine switch less per start).
	err = ch.ctrlW.Write(context.Background(), coalesce.Request, &wire.Startup{
		Protocol: wire.ProtocolVersion, ChildID: ch.id, Limits: ch.limits,
		HealthIntervalMS: cfg.HealthInterval.Milliseconds(), CancelGraceMS: cfg.CancelGrace.Milliseconds(),
		IngressQueue: protocol.IngressQueue, Calls: offer, ToolsUpdates: true,
	})
	if err == nil {
		err = ch.ctrlW.Flush()
	}
	if err != nil {
		return fmt.Errorf("%w: writing startup: %w", ErrHandshake, err)
	}
	return nil
}

// childError is an error of the child id. Its message names the host and
// the child once: "host: child c0.1: handshake failed: …", not
// "host: child c0.1: host: handshake failed: …" (the cause's own "host: "
// prefix is left out: errors of this package all carry it).
type childError struct {
	id  string
	err error
}

func (e *childError) Error() string {
	return "host: child " + e.id + ": " + strings.TrimPrefix(e.err.Error(), "host: ")
}

func (e *childError) Unwrap() error { return e.err }

// countingReader counts the bytes read through it in n.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// readControl reads the control connection: pongs go to the supervisor,
// bye is allowed (the drain waits for the exit, not for it), anything else
// is a protocol error that ends the reading (and so the child).
func (ch *child) readControl() {
	defer ch.wg.Done()
	defer close(ch.ctrlDone)
	for {
		ch.ctrlHandled.Store(ch.ctrlIn.Load() - uint64(ch.ctrlR.Buffered()))
		pkt, err := ch.ctrlR.ReadPacket()
		if err != nil {
			ch.ctrlErr = err
			return
		}
		switch p := pkt.(type) {
		case *wire.Pong:
			for sent := false; !sent; {
				select {
				case ch.pongs <- *p:
					sent = true
				default:
					select { // replace the pong the supervisor has not taken yet
					case <-ch.pongs:
					default:
					}
				}
			}
		case *wire.Bye:
			select {
			case ch.byes <- struct{}{}:
			default:
			}
		case *wire.Tools:
			if err := ch.setTools(p.Tools); err != nil {
				ch.ctrlErr = err
				return
			}
		default:
			ch.ctrlErr = fmt.Errorf("%w: %s on the control connection", wire.ErrProtocol, packetio.TypeOf(pkt))
			return
		}
	}
}

// setTools replaces the child's catalogue with tools, checked as hello's
// are (startup offered tools_updates, docs/protocol.md §3): new calls are
// made against it, calls already started keep their tool. A list the
// host cannot compile is a protocol error that ends the child.
func (ch *child) setTools(tools []wire.Tool) error {
	cat, err := toolschema.NewCatalog(tools)
	if err != nil {
		return fmt.Errorf("%w: tools: %w", wire.ErrProtocol, err)
	}
	h := ch.h
	// Logged before the change is published: a caller that sees the new
	// list (ToolsChanged) finds the line in the log, when the log's
	// handler writes as it is called (slog's own handlers do).
	h.log.Info("child tools changed", "child", ch.id, "tools", len(tools))
	h.mu.Lock()
	ch.cat = cat
	if ch.slot.cur == ch {
		h.setCatalogLocked(cat)
	}
	h.mu.Unlock()
	return nil
}

// stopMode says how a child is stopped.
type stopMode uint8

const (
	stopDead     stopMode = iota + 1 // hung (unhealthy) or never supervised: fail calls at once, then kill
	stopExited                       // exited or closed its control connection: read the streams to EOF (exitDrain), then as stopDead
	stopGraceful                     // Close or recycle: drain first
	stopLeaving                      // said bye unasked: as stopGraceful, but its restart counts
)

// supervise runs one slot until Close: it watches the child's health,
// stops it when it dies and restarts it under the restart policy.
func (h *Host) supervise(s *slot, ch *child) {
	defer h.wg.Done()
	var restarts []time.Time
	for {
		cause, mode := ch.watch()
		span := h.startStopSpan(ch, cause, mode) // nil when tracing is off
		ch.stop(cause, mode)
		span.stopped(ch)
		h.mu.Lock()
		s.lastCause, s.cur = cause, nil
		if h.closing {
			h.setStateLocked(s, stateDown)
			h.notifyLocked()
			h.mu.Unlock()
			span.ended(false)
			return
		}
		h.setStateLocked(s, stateStarting)
		h.notifyLocked()
		h.mu.Unlock()
		recycle := mode == stopGraceful // a recycle is the host's doing: the restart policy does not count it
		for {
			if !recycle {
				now := time.Now()
				restarts = slices.DeleteFunc(restarts, func(t time.Time) bool { return now.Sub(t) > h.cfg.Restart.Window })
				if h.cfg.Restart.MaxRestarts < 0 || len(restarts) >= h.cfg.Restart.MaxRestarts {
					h.slotDown(s)
					h.log.Error("child slot gave up restarting", "slot", s.index, "cause", cause)
					span.ended(true)
					return
				}
				restarts = append(restarts, now)
				if !h.sleep(h.backoff(len(restarts))) {
					h.slotDown(s)
					span.ended(false)
					return
				}
			}
			recycle = false
			h.mu.Lock()
			s.restarts++
			h.mu.Unlock()
			next, err := h.startChild(h.life, s)
			if err == nil {
				ch = next
				span.started(next)
				break
			}
			cause = err
			h.mu.Lock()
			s.lastCause = err
			h.mu.Unlock()
			h.log.Warn("child restart failed", "slot", s.index, "err", err)
			span.startFailed(err)
			if h.life.Err() != nil {
				h.slotDown(s)
				span.ended(false)
				return
			}
		}
	}
}

// slotDown marks s down: no child runs in it any more, nor will.
func (h *Host) slotDown(s *slot) {
	h.mu.Lock()
	h.setStateLocked(s, stateDown)
	h.notifyLocked()
	h.mu.Unlock()
}

// backoff returns the delay before the n-th restart in the window (n ≥ 1):
// exponential from BackoffMin, capped at BackoffMax, with jitter in its
// upper half.
func (h *Host) backoff(n int) time.Duration {
	d := h.cfg.Restart.BackoffMin
	for i := 1; i < n && d < h.cfg.Restart.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, h.cfg.Restart.BackoffMax)
	half := d / 2
	return half + rand.N(half+1)
}

// sleep waits d unless Close begins first; it reports whether it slept.
func (h *Host) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.life.Done():
		return false
	}
}

// healthRecheck is how soon a health timeout that found the child's bytes
// waiting for the host looks again (at most HealthInterval).
const healthRecheck = 250 * time.Millisecond

// helloExitWait bounds how long a start whose child closed the control
// connection before its hello waits for the child's exit, to report its
// status: a start that fails anyway, so the wait is long enough for a
// reap on a loaded machine rather than short as exitWait.
const helloExitWait = 2 * time.Second

// pingsTimed is how many of the latest pings watch keeps the write time
// of: with the default interval (1 s) and timeout (5 s) at most five are
// unanswered at once.
const pingsTimed = 8

// oldestUnanswered is the nonce of the oldest ping that watch still has
// the mark of, among those sent after the one answered last: a ping
// written to the connection was preceded there by every older one.
func oldestUnanswered(nonce, answered uint64) uint64 {
	if nonce-answered > pingsTimed {
		return nonce - pingsTimed + 1
	}
	return answered + 1
}

// pingDue says whether a tick of the health ticker at now pings the
// child, whose latest ping went out at last (docs/operations.md, Health):
// every tick while the host has calls in flight on it, or a call whose
// end the child did not write (releaseSlot) ended since the latest ping,
// or its latest pong counted handlers running (a
// handler may outlive its call's terminal, and a cancelled one may not
// have returned: the pings go on until a pong says it did, or it is stuck
// and the child recycled); otherwise, for an idle child, once
// IdleHealthInterval has passed since the latest ping (half an interval
// early, so ticks that come a little before the mark do not push it a
// whole interval later). A call routed to an idle child pings it at once
// through routed, not a tick.
func (ch *child) pingDue(last, now time.Time) bool {
	h := ch.h
	h.mu.Lock()
	busy := ch.running > 0 || ch.ended.After(last) || ch.streams > 0 || ch.stuck > 0
	h.mu.Unlock()
	return busy || now.Sub(last)+h.cfg.HealthInterval/2 >= h.cfg.IdleHealthInterval
}

// routed tells the supervisor that a call was routed to the child, which
// had none in flight: watch pings it unless a ping went out within
// HealthInterval, so that a child that hung while idle is found within
// HealthTimeout of its call (HealthInterval plus HealthTimeout when it
// answered a ping just before). Host.mu is held; it never blocks.
//
// A call routed within HealthInterval of the latest ping does not wake
// the supervisor: it would drop the wake-up (a ping went out within the
// interval), and that wake-up of another goroutine, often of another
// processor's thread, came once per call to a child called one call at a
// time, and twice per nested call to another child's tool
// (docs/performance.md, "Calls both ways").
func (ch *child) routed() {
	if at := ch.pingedAt.Load(); at != 0 && time.Since(ch.born)-time.Duration(at-1) < ch.h.cfg.HealthInterval {
		return
	}
	select {
	case ch.wake <- struct{}{}:
	default: // already said, not yet taken
	}
}

// watch pings the child and returns when it must stop: why, and how.
func (ch *child) watch() (error, stopMode) {
	cfg := &ch.h.cfg
	ticker := time.NewTicker(cfg.HealthInterval)
	defer ticker.Stop()
	unhealthy := time.NewTimer(cfg.HealthTimeout) // reset by every pong
	defer unhealthy.Stop()
	// due is when unhealthy was last set to fire; arm sets both. forgiven
	// is answered+1 when a timeout that fired while the host could not
	// run was given a whole timeout more since the child's latest answer
	// (0: none): only an answer earns another, not the pings the host
	// goes on sending a child that gives none.
	due := time.Now().Add(cfg.HealthTimeout)
	arm := func(d time.Duration) {
		unhealthy.Reset(d)
		due = time.Now().Add(d)
	}
	var forgiven uint64
	var nonce, answered uint64 // the last ping sent, the newest answered
	// A timeout that found bytes of the child's waiting for the host holds
	// the verdict until the host has handled target bytes (all the child
	// had written on the control connection at that look), and no later
	// than heldUntil (one HealthTimeout after that look); zero heldUntil:
	// no verdict is held.
	var target uint64
	var heldUntil time.Time
	recheck := min(cfg.HealthInterval, healthRecheck)
	// When the latest pings were written, by nonce: a pong to one of them
	// gives its round trip; one answering an older ping is not timed.
	// marks says, by nonce, whether the control writer has put the ping
	// on the connection yet (coalesce.Writer.Mark).
	var sentAt [pingsTimed]time.Time
	var marks [pingsTimed]uint64
	lost := lostCalls{gap: cfg.HealthInterval / 2}
	var lastPing time.Time // when the latest ping was sent
	// ping sends the next ping; a non-nil error is the child's death
	// (connDied): the write on the control connection failed.
	ping := func() error {
		// Request: when the writer is idle the supervisor writes the
		// ping itself, so that it does not also wait for the writer's
		// flusher to get the CPU. The context bounds the wait for room
		// in the writer's queue (full when the child does not read its
		// control connection): a ping that finds no room within an
		// interval is not sent, and the supervisor goes on to judge the
		// child by its unread connection (controlUnread). The wait ends
		// with the host's Close as well, so that the supervisor takes
		// the Close at once.
		ctx, cancel := context.WithTimeout(ch.h.life, cfg.HealthInterval)
		defer cancel()
		err := ch.ctrlW.Write(ctx, coalesce.Request, &wire.Ping{Nonce: nonce + 1})
		if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			return nil // not sent
		}
		lastPing = time.Now()
		ch.pingedAt.Store(int64(lastPing.Sub(ch.born)) + 1)
		if nonce == answered {
			// Nothing was outstanding, so the health timer was stopped:
			// the child is late only once it has a ping to answer.
			arm(cfg.HealthTimeout)
		}
		nonce++
		sentAt[nonce%pingsTimed] = time.Now()
		marks[nonce%pingsTimed] = ch.ctrlW.Mark()
		if err != nil {
			return ch.connDied("control write", err)
		}
		return nil
	}
	// controlUnread reports whether the child has left the host's writes
	// on the control connection unread for a whole HealthTimeout: the
	// write under way found the socket full that long ago and has not
	// ended, and (where the host can tell: Linux) bytes the host wrote
	// still wait in the socket for the child to read them. A host whose
	// writer had no CPU to go on after the child read everything leaves
	// nothing in the socket, so it does not blame the child.
	controlUnread := func(now time.Time) bool {
		full := ch.ctrlW.FullSince()
		return !full.IsZero() && now.Sub(full) >= cfg.HealthTimeout && (!unreadKnown || unsent(ch.proc.ctrl))
	}

	if err := ping(); err != nil {
		return err, stopExited
	}
	// pong takes an answer; a non-nil error stops the child.
	pong := func(p wire.Pong) (error, stopMode) {
		if p.Nonce == 0 || p.Nonce > nonce || p.Nonce <= answered {
			// Not an answer to any ping of ours, or to none newer than
			// the one answered last: it says nothing of now.
			return nil, 0
		}
		answered, heldUntil = p.Nonce, time.Time{}
		if answered == nonce {
			// Every ping is answered: the child owes nothing until the
			// next, which starts the timer again. Time the host spends
			// unable to run (its supervisor starved of CPU) is then not
			// counted against the child.
			unhealthy.Stop()
		} else {
			arm(cfg.HealthTimeout)
		}
		var rtt time.Duration = -1
		if nonce-p.Nonce < pingsTimed {
			rtt = time.Since(sentAt[p.Nonce%pingsTimed])
		}
		h := ch.h
		h.mu.Lock()
		ch.stuck, ch.streams = int(p.Stuck), int(p.Streams)
		if rtt >= 0 {
			h.pings.add(rtt)
		}
		h.mu.Unlock()
		// The calls dispatched before the ping previous to the one
		// answered, and at least HealthTimeout before the answered ping
		// was sent, must be counted in the pong's streams: the child had
		// a whole interval to read their invokes, and as long as it may
		// take to answer a ping (a child starting hundreds of handlers on
		// a loaded machine takes more than one short interval). The
		// calls' age is taken when the ping was sent, the earliest the
		// pong can have been written, not when the host reads the pong:
		// pongs a child wrote while the host could not run (stopped, or
		// starved of CPU) are read in a burst, seconds later, and then
		// made every call dispatched just before the stall look
		// uncounted for longer than HealthTimeout
		// (TestHostStalledReadsStalePongs).
		if unreadKnown && p.Nonce > 1 && nonce-(p.Nonce-1) < pingsTimed {
			before := sentAt[(p.Nonce-1)%pingsTimed]
			asked := sentAt[p.Nonce%pingsTimed]
			if t := asked.Add(-cfg.HealthTimeout); t.Before(before) {
				before = t
			}
			unreadBefore := before
			if t := asked.Add(-unreadInvokeWait * cfg.HealthTimeout); t.Before(unreadBefore) {
				unreadBefore = t
			}
			calls := lost.check(int(p.Streams), ch.unaccounted(before, unreadBefore), asked, time.Now())
			if len(calls) > 0 {
				ch.h.log.Warn("recycling child that lost calls", "child", ch.id, "pid", ch.proc.pid, "lost", len(calls), "streams", p.Streams)
				cause := ch.lostCause()
				for _, c := range calls {
					c.failLost(cause)
				}
				return errLostCalls(len(calls), int(p.Streams)), stopGraceful
			}
		}
		if cfg.StuckLimit > 0 && p.Stuck >= int64(cfg.StuckLimit) {
			ch.h.log.Warn("recycling child with stuck handlers", "child", ch.id, "pid", ch.proc.pid, "stuck", p.Stuck)
			return fmt.Errorf("host: child recycled: %d stuck handlers", p.Stuck), stopGraceful
		}
		return nil, 0
	}
	for {
		select {
		case now := <-ticker.C:
			ch.proc.contained.Track() // the descendants seen now are found again if they leave the tree
			if controlUnread(time.Now()) {
				// Whatever its pongs say (a child can answer pings it
				// never read): the host's control writes would wait
				// for it forever.
				return errControlUnread, stopDead
			}
			if !ch.pingDue(lastPing, now) {
				continue
			}
			if err := ping(); err != nil {
				return err, stopExited
			}
		case <-ch.wake:
			// A call was routed to an idle child: it is pinged now unless
			// a ping went out within the interval, and every interval
			// from now while calls are in flight (pingDue).
			if time.Since(lastPing) < cfg.HealthInterval {
				continue
			}
			ticker.Reset(cfg.HealthInterval)
			if err := ping(); err != nil {
				return err, stopExited
			}
		case p := <-ch.pongs:
			if err, mode := pong(p); err != nil {
				return err, mode
			}
		case <-ch.byes:
			// The child is leaving on its own: no new calls go to it,
			// running ones may finish, and its exit is waited for (and
			// enforced) as in a drain.
			ch.h.log.Warn("child said bye without a drain", "child", ch.id, "pid", ch.proc.pid)
			return ErrChildLeft, stopLeaving
		case <-unhealthy.C:
			if nonce == answered {
				continue // nothing is owed (a ping that found no room was not sent)
			}
			// The child is judged only by what it did with the pings it
			// was given, never by the host's own lack of CPU; and a child
			// that does not read, or keeps writing, cannot hold the
			// verdict back for long (docs/operations.md, "Health"):
			//
			// The oldest ping unanswered is still in the host's own
			// writer. If the writer waits for a full socket the child has
			// not read for a whole timeout, the child is unhealthy
			// (controlUnread). Otherwise the child never got the ping: it
			// gets a whole timeout more, or until the writer has waited
			// a whole timeout for the full socket.
			//
			// Bytes the child wrote on the control connection wait for
			// the host: unread on the socket, or read by readControl and
			// not handled yet. They may hold the answer, which the
			// host's goroutines have not had the CPU to take: the timer
			// looks again every healthRecheck until the host has handled
			// every byte the child had written at the first look (an
			// answer among them was handled below), for one
			// HealthTimeout at most. What the child writes after that
			// look holds nothing back: a stream of pongs with old nonces
			// cannot keep its verdict away.
			//
			// A hung child writes nothing, and a ping written to it
			// stays unanswered.
			handled := ch.ctrlHandled.Load() // before ctrlIn: never more than it
			in, u := ch.ctrlIn.Load(), uint64(unread(ch.proc.ctrl))
			// A pong already read wins over the timeout that fired while
			// this goroutine waited to run: select picks at random among
			// ready cases, and a host starved of CPU finds both ready.
			// Looked for after handled was loaded, so that every pong
			// among the handled bytes is in the channel or taken.
			select {
			case p := <-ch.pongs:
				before := answered
				if err, mode := pong(p); err != nil {
					return err, mode
				}
				if answered != before { // an answer: the timer was reset
					continue
				}
			default:
			}
			now := time.Now()
			// A timeout that fired while the host could not run (stopped,
			// or starved of CPU, as the child on the same machine most
			// likely was too) is late: the child gets a whole timeout from
			// when the host runs again, once until it answers again, so
			// a hung child is still found, one HealthTimeout later
			// (TestHostStalledWithPingOutstanding,
			// TestHostStalledOftenHungChildFound).
			if late := now.Sub(due); late > recheck && forgiven != answered+1 {
				ch.h.log.Debug("health timeout fired late: the child gets another", "child", ch.id, "pid", ch.proc.pid, "late", late)
				forgiven = answered + 1
				heldUntil = time.Time{}
				arm(cfg.HealthTimeout)
				continue
			}
			if controlUnread(now) {
				return errControlUnread, stopDead
			}
			if !ch.ctrlW.Written(marks[oldestUnanswered(nonce, answered)%pingsTimed]) {
				wait := cfg.HealthTimeout
				if full := ch.ctrlW.FullSince(); !full.IsZero() {
					wait = min(wait, max(recheck, full.Add(cfg.HealthTimeout).Sub(now)))
				}
				heldUntil = time.Time{}
				arm(wait)
				continue
			}
			switch {
			case heldUntil.IsZero() && u+in-handled > 0:
				target, heldUntil = in+u, now.Add(cfg.HealthTimeout)
				arm(recheck)
				continue
			case !heldUntil.IsZero() && handled < target && now.Before(heldUntil):
				arm(recheck)
				continue
			}
			return ErrUnhealthy, stopDead
		case <-ch.ctrlDone:
			return ch.connDied("control connection ended", ch.ctrlErr), stopExited
		case <-ch.proc.exited:
			return ch.diedOf(ch.proc.exitStatus()), stopExited
		case <-ch.h.life.Done():
			return ErrClosed, stopGraceful
		}
	}
}

// stop stops the child and waits for everything it owns.
func (ch *child) stop(cause error, mode stopMode) {
	h := ch.h
	h.mu.Lock()
	ch.cause = cause
	conns := slices.Collect(maps.Keys(ch.conns))
	idle := ch.idle
	ch.idle = nil
	graceful := mode == stopGraceful || mode == stopLeaving
	if !graceful {
		ch.state = stateDead
	} else {
		ch.state = stateDraining
	}
	h.setStateLocked(ch.slot, ch.state)
	h.notifyLocked()
	h.mu.Unlock()

	var closeErr error
	if !graceful {
		h.log.Warn("child dead", "child", ch.id, "pid", ch.proc.pid, "cause", cause)
		unreachable := ch.unreachable(cause)
		if mode == stopExited {
			drainStreams(conns)
		}
		for _, c := range conns {
			c.fail(unreachable)
		}
		ch.proc.kill(h.cfg.KillGrace)
	} else {
		for _, c := range idle {
			c.fail(nil)
		}
		closeErr = ch.drain()
		h.mu.Lock()
		conns = slices.Collect(maps.Keys(ch.conns))
		h.mu.Unlock()
		drainStreams(conns) // what the child wrote before it exited still reaches its callers
		unreachable := ch.unreachable(fmt.Errorf("%w: exited during a drain", ErrChildDied))
		for _, c := range conns {
			c.fail(unreachable)
		}
	}
	if ch.calls != nil {
		ch.calls.close() // its calls' callees are cancelled: the caller is gone
	}
	ch.proc.ctrl.Close()
	ch.ctrlW.Close()
	ch.wg.Wait()
	if err := ch.proc.cleanup(); err != nil && closeErr == nil {
		closeErr = fmt.Errorf("host: child %s: removing its directory: %w", ch.id, err)
	}
	ch.outLimit.flush() // the forwarders have returned: the last loss, if any, is counted
	h.log.Info("child stopped", "child", ch.id, "pid", ch.proc.pid, "status", ch.proc.exitStatus())
	if closeErr != nil {
		h.mu.Lock()
		if ch.slot.closeErr == nil && h.closing {
			ch.slot.closeErr = closeErr
		}
		h.mu.Unlock()
	}
}

// exitDrain bounds how long the readers of a child that exited (or closed
// its control connection) may go on reading its stream connections before
// they are closed. The kernel gives each connection the bytes the child
// wrote before it died, then EOF: the frames reach their callers, in order,
// before the synthetic unreachable, and a provider terminal already written
// stands. A caller that does not read (a full Call.out, see outbox) or a
// child that closed its control connection but is still running cannot
// hold the stop longer than this; its calls then end as a hung child's do.
// It is well under the 1 s from a child's death to its calls' unreachable.
const exitDrain = 500 * time.Millisecond

// drainStreams waits until the readers of conns have returned (each reads
// its connection to EOF), for exitDrain at most.
func drainStreams(conns []*streamConn) {
	for _, c := range conns {
		c.exitDrain()
	}
	t := time.NewTimer(exitDrain)
	defer t.Stop()
	for _, c := range conns {
		select {
		case <-c.done:
		case <-t.C:
			return
		}
	}
}

// drain sends drain and waits for bye and the exit, then kills what is
// left. The wait is bounded by the grace plus cancel_grace plus 1 s, and by
// Close's context.
func (ch *child) drain() error {
	h := ch.h
	grace := h.cfg.DrainGrace
	h.mu.Lock()
	ctx := h.closeCtx
	h.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	if dl, ok := ctx.Deadline(); ok {
		grace = min(grace, max(0, time.Until(dl)-h.cfg.KillGrace-h.cfg.CancelGrace)/2)
	}
	// The wait bounds the drain's write too: a child that does not read
	// its control connection (the writer's queue full) is killed as one
	// that does not leave.
	wait, cancel := context.WithTimeout(ctx, grace+h.cfg.CancelGrace+deadlineGrace)
	defer cancel()
	ch.ctrlW.Write(wait, coalesce.Stream, &wire.Drain{GraceMS: grace.Milliseconds()})
	select {
	case <-ch.proc.exited:
		return nil
	case <-wait.Done():
	}
	if ch.proc.kill(h.cfg.KillGrace) {
		return fmt.Errorf("host: child %s: did not exit after its drain: killed", ch.id)
	}
	return fmt.Errorf("host: child %s: did not exit after its drain: terminated", ch.id)
}

// connDied is the cause of the child's death when its control connection
// failed (what: a write, or the connection's end; err, why):
// ErrChildDied, with ErrMemoryLimit as diedOf says, since a child the
// kernel killed for its memory breaks the connection before its exit is
// seen.
func (ch *child) connDied(what string, err error) error {
	if ch.proc.memoryLimitHit() {
		return fmt.Errorf("%w: %s: %w: %w (%d bytes)", ErrChildDied, what, err, ErrMemoryLimit, ch.h.cfg.MemoryMax)
	}
	return fmt.Errorf("%w: %s: %w", ErrChildDied, what, err)
}

// diedOf is the cause of the child's death, status saying how it ended:
// ErrChildDied, with ErrMemoryLimit when the kernel killed a process of
// its cgroup for Config.MemoryMax (the OOM kill its cgroup counted:
// memory.events, or v1's memory.oom_control).
func (ch *child) diedOf(status string) error {
	if ch.proc.memoryLimitHit() {
		return fmt.Errorf("%w: %s: %w (%d bytes)", ErrChildDied, status, ErrMemoryLimit, ch.h.cfg.MemoryMax)
	}
	return fmt.Errorf("%w: %s", ErrChildDied, status)
}

// unreachable returns the cause given to calls in flight on a dead child.
func (ch *child) unreachable(cause error) *synth {
	return &synth{kind: frame.KindFailed, code: frame.CodeUnreachable, msg: "child " + ch.id + " unreachable: " + cause.Error(), stderrOf: ch.proc}
}

// releaseSlot gives back the stream slot taken by acquire and puts c (if
// not nil) back into the idle list, or closes it when the child takes no
// more calls or has enough idle connections.
//
// A non-nil c is a connection the child wrote its end on: the call's
// handler has returned (docs/protocol.md §6 item 3), so the call's end
// asks for no ping. Without one (the host closed the connection, or the
// child's end never came) the handler may run on, and the supervisor
// pings the child once more (pingDue), whose pong says whether it did.
// An idle child so wakes for no ping after a call that ended as most do.
func (ch *child) releaseSlot(c *streamConn) {
	h := ch.h
	h.mu.Lock()
	ch.running--
	if c == nil {
		ch.ended = time.Now()
	}
	reuse := c != nil && !c.failed() && ch.state == stateReady && len(ch.idle) < ch.maxStreams
	if reuse {
		ch.idle = append(ch.idle, c)
	}
	h.notifyLocked()
	h.mu.Unlock()
	if c != nil && !reuse {
		c.fail(nil)
	}
}

// conn returns an idle stream connection or dials a new one.
func (ch *child) conn(ctx context.Context) (*streamConn, error) {
	h := ch.h
	h.mu.Lock()
	if ch.state != stateReady {
		h.mu.Unlock()
		return nil, errNoChild
	}
	for n := len(ch.idle); n > 0; n = len(ch.idle) {
		c := ch.idle[n-1]
		ch.idle = ch.idle[:n-1]
		if c.failed() {
			continue
		}
		h.mu.Unlock()
		if c.idleSound() {
			return c, nil
		}
		c.fail(nil) // the child closed it, or wrote on it, while it was idle
		h.mu.Lock()
		if ch.state != stateReady {
			h.mu.Unlock()
			return nil, errNoChild
		}
	}
	h.mu.Unlock()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", ch.proc.sockPath)
	if err != nil {
		return nil, err
	}
	c := newStreamConn(ch, nc)
	h.mu.Lock()
	if ch.state != stateReady {
		h.mu.Unlock()
		nc.Close()
		c.w.Close()
		return nil, errNoChild
	}
	ch.conns[c] = struct{}{}
	ch.wg.Add(1)
	h.mu.Unlock()
	go c.run() // stopped by the connection failing or closing; waited for through ch.wg
	return c, nil
}

// markDead takes a ready child out of the pool at once when a call found it
// gone; its supervisor does the rest when it sees the exit.
func (ch *child) markDead() {
	h := ch.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch.state == stateReady {
		ch.state = stateDead
		if ch.slot.cur == ch {
			h.setStateLocked(ch.slot, stateDead)
		}
		h.notifyLocked()
	}
}

// forget removes a closed connection from the child's set.
func (ch *child) forget(c *streamConn) {
	h := ch.h
	h.mu.Lock()
	delete(ch.conns, c)
	if i := slices.Index(ch.idle, c); i >= 0 {
		ch.idle = slices.Delete(ch.idle, i, i+1)
	}
	h.mu.Unlock()
}
