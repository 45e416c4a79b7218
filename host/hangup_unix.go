//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package host

import (
	"net"
	"syscall"
	"time"
)

// watchHangup calls onHangup once nc's peer hung up (closed its end or
// shut down its writing), even while bytes it wrote before wait unread:
// the host watches a call connection so while it does not read it (its
// callee is not taking input, or the call has not started yet), and a
// caller's hang-up is its cancel (docs/protocol.md §8). It costs no
// thread: the watch waits in the network poller, woken by the hang-up
// or by stop.
//
// stop ends the watch and returns once onHangup, if called, returned;
// nc must not be read until stop returned. A connection that is not a
// socket is not watched (stop does nothing).
func watchHangup(nc net.Conn, onHangup func()) (stop func()) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() { // stopped by stop (a read deadline in the past) or the hang-up; waited for by stop
		defer close(done)
		hung := false
		err := rc.Read(func(fd uintptr) bool {
			hung = hungUp(int(fd))
			return hung
		})
		if err == nil && hung {
			onHangup()
		}
	}()
	return func() {
		nc.SetReadDeadline(time.Unix(1, 0)) // wakes the watch
		<-done
		nc.SetReadDeadline(time.Time{})
	}
}
