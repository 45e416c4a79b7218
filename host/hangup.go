package host

import (
	"net"
	"sync"
	"time"
)

// connWatch is watchHangup armed only once d has passed, made once for a
// call connection and armed for each wait on it (a call's start, a chunk
// its callee has not taken, a call run on the connection's goroutine): a
// connection left unread for less than d costs a timer reset, no
// goroutine and no allocation, and the reader that reads it again sees a
// hang-up as the connection's end. arm and stop are called by the
// connection's goroutine, in turn.
type connWatch struct {
	nc net.Conn
	d  time.Duration
	t  *time.Timer // runs fire once d has passed since arm; stopped by stop and by close

	mu        sync.Mutex
	armed     bool   // between arm and stop; guarded by mu
	onHangup  func() // the armed call's; guarded by mu
	stopWatch func() // ends the watch fire started; nil when none; guarded by mu
}

// newConnWatch returns nc's watch, not armed; close stops its timer.
func newConnWatch(nc net.Conn, d time.Duration) *connWatch {
	w := &connWatch{nc: nc, d: d}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

// fire starts the watch for the armed call. A fire of an earlier arming
// that ran late starts it early for the armed one, which stop ends all the
// same.
func (w *connWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed && w.stopWatch == nil {
		w.stopWatch = watchHangup(w.nc, w.onHangup)
	}
}

// arm watches nc for the caller's hang-up, calling onHangup, once d has
// passed; nc must not be read until stop returned.
func (w *connWatch) arm(onHangup func()) {
	w.mu.Lock()
	w.armed, w.onHangup = true, onHangup
	w.mu.Unlock()
	w.t.Reset(w.d)
}

// stop ends the armed call's watch, if it began, as watchHangup's stop
// does.
func (w *connWatch) stop() {
	w.t.Stop()
	w.mu.Lock()
	sw := w.stopWatch
	w.armed, w.onHangup, w.stopWatch = false, nil, nil
	w.mu.Unlock()
	if sw != nil {
		sw()
	}
}

// close stops the timer for good: the connection is done.
func (w *connWatch) close() { w.stop() }
