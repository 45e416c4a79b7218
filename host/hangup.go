package host

import (
	"net"
	"sync"
	"time"
)

// connWatch is watchHangup armed only once d has passed, made once for a
// call connection and armed for each wait on it (a call's start, a chunk
// its callee has not taken, a call run on the connection's goroutine): a
// connection left unread for less than d costs no goroutine and no
// allocation, and the reader that reads it again sees a hang-up as the
// connection's end. arm and stop are called by the connection's
// goroutine, in turn.
//
// The timer is not moved by every arm and stop: an arm that finds it
// pending leaves it, and stop leaves it pending; when it fires early for
// the armed wait (set by an earlier one) it sets itself for the rest of
// that wait's d. Moving a timer to a time earlier than every other timer
// of the processor makes the Go runtime wake a thread to look at it (the
// one asleep in the network poller, or an idle one): resetting it at each
// arm cost a nested call two such wake-ups, one for its start and one
// for its run (docs/performance.md, "Calls both ways"). A connection that
// carries calls one after another now has its timer fire about once per
// d, and sleeps with it stopped once a fire finds no wait armed.
type connWatch struct {
	nc net.Conn
	d  time.Duration
	t  *time.Timer // runs fire; pending while set; stopped by close

	mu        sync.Mutex
	set       bool      // t is pending; guarded by mu
	closed    bool      // close was called: t is not set again; guarded by mu
	armed     bool      // between arm and stop; guarded by mu
	armedAt   time.Time // when the armed wait began; guarded by mu
	onHangup  func()    // the armed call's; guarded by mu
	stopWatch func()    // ends the watch fire started; nil when none; guarded by mu
}

// newConnWatch returns nc's watch, not armed; close stops its timer.
func newConnWatch(nc net.Conn, d time.Duration) *connWatch {
	w := &connWatch{nc: nc, d: d}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

// fire starts the watch for the armed wait once it has waited d, or sets
// the timer for the rest of its d; without a wait armed the timer is left
// stopped.
func (w *connWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set = false
	if !w.armed || w.closed || w.stopWatch != nil {
		return
	}
	if left := w.d - time.Since(w.armedAt); left > 0 {
		w.set = true
		w.t.Reset(left)
		return
	}
	w.stopWatch = watchHangup(w.nc, w.onHangup)
}

// arm watches nc for the caller's hang-up, calling onHangup, once d has
// passed; nc must not be read until stop returned.
func (w *connWatch) arm(onHangup func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.armedAt, w.onHangup = true, time.Now(), onHangup
	if !w.set && !w.closed {
		w.set = true
		w.t.Reset(w.d)
	}
}

// stop ends the armed wait's watch, if it began, as watchHangup's stop
// does. The timer stays as it is (see connWatch).
func (w *connWatch) stop() {
	w.mu.Lock()
	sw := w.stopWatch
	w.armed, w.onHangup, w.stopWatch = false, nil, nil
	w.mu.Unlock()
	if sw != nil {
		sw()
	}
}

// close stops the watch and the timer for good: the connection is done.
func (w *connWatch) close() {
	w.stop()
	w.mu.Lock()
	w.closed = true
	w.set = false
	w.mu.Unlock()
	w.t.Stop()
}
