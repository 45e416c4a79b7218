package host

import (
	"net"
	"sync"
	"time"
)

// watchHangupAfter is watchHangup armed only once d has passed: a
// connection left unread for less than d costs a timer, no goroutine, and
// the reader that reads it again sees a hang-up as the connection's end.
// stop ends the watch, if it began, as watchHangup's stop does; nc must
// not be read until stop returned.
func watchHangupAfter(nc net.Conn, d time.Duration, onHangup func()) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var stopWatch func()
	t := time.AfterFunc(d, func() { // runs once, briefly: it starts the watch, which stop ends
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			stopWatch = watchHangup(nc, onHangup)
		}
	})
	return func() {
		if t.Stop() {
			return // never armed
		}
		mu.Lock()
		stopped = true
		sw := stopWatch
		mu.Unlock()
		if sw != nil {
			sw()
		}
	}
}
