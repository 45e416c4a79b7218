package child

import (
	"sync"
	"time"
)

// lingerTick bounds how long the frames of a handler running inline (a
// plain request, see conn.runInline) wait for its terminal before they
// are written anyway: the lingers' ticker ends every linger once per
// lingerTick, so a frame waits at most that long, plus the time to wake
// the ticker's thread.
const lingerTick = time.Millisecond

// lingers lets the frames of a handler that runs inline wait for its
// terminal, so that a short call's output, terminal and end leave the
// child in one write and wake the host once. Without it a handler that
// sends a chunk and returns costs two writes and two wake-ups of the
// host; the second is most of what such a call costs beyond a call that
// only returns a value (docs/performance.md).
//
// A linger is a Cork of the connection's Writer taken when the handler
// starts. It ends, with the matching Uncork, at whichever comes first: the
// call's finish (its terminal and end go out with what lingered), the
// handler's Stream.Flush, or the next tick of the lingers' ticker. Frames
// a handler sends after its linger ended go out as they always did. The
// Writer writes lingering frames earlier when its queue reaches its bound
// or an attachment takes them along.
//
// The ticker is armed only while inline handlers start, one arming per
// burst of calls, not one timer per call: a timer the Go runtime adds to
// an idle heap wakes a sleeping thread, which a short call cannot afford
// (see deadlines).
type lingers struct {
	mu      sync.Mutex
	conns   map[*conn]struct{} // lingering now; bounded by the open connections; guarded by mu
	stopped bool               // guarded by mu
	tick    *ticker
}

func (l *lingers) init() {
	l.conns = make(map[*conn]struct{})
	l.tick = newTicker(lingerTick, l.endAll)
}

// start begins a linger on c, whose reader is about to run a handler.
// After stop it does nothing.
func (l *lingers) start(c *conn) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	c.w.Cork()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	l.tick.use()
}

// end ends c's linger, unless it has ended: the frames that lingered are
// written, at once or with whatever the caller still has corked.
func (l *lingers) end(c *conn) {
	l.mu.Lock()
	_, ok := l.conns[c]
	delete(l.conns, c)
	l.mu.Unlock()
	if ok {
		c.w.Uncork()
	}
}

// endAll ends every linger: the ticker's function. It reports whether
// there were any.
func (l *lingers) endAll() (busy bool) {
	l.mu.Lock()
	var ended map[*conn]struct{} // taken out of l.conns: this goroutine's alone
	if len(l.conns) > 0 {
		ended, l.conns = l.conns, make(map[*conn]struct{}, len(l.conns))
	}
	l.mu.Unlock()
	for c := range ended {
		c.w.UncorkLater() // a connection that does not take its bytes holds up no other
	}
	return len(ended) > 0
}

// stop ends every linger and stops the ticker for good.
func (l *lingers) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.tick.stop()
	l.endAll()
}
