package host

import (
	"fmt"
	"time"

	"github.com/skulkrt/skulk/frame"
)

// lostCalls compares a child's pongs with the calls the host has running
// on it (docs/protocol.md §7, "Lost calls"). A pong's streams counts the
// child's handlers that have not returned; a call the host dispatched
// before the previous ping and at least HealthTimeout before the answered
// ping was sent (four when the child has not read what the host wrote on
// its connection), whose
// provider terminal it has not had, and
// for which nothing waits unread on the host's side (the socket, the
// reader's buffer, a full outbox) must be one of them. When two answered
// pings in a row count fewer streams than such calls, the calls
// unaccounted for at both are lost: the host fails them and recycles the
// child. The second ping must have been sent at least gap after the
// first short pong was taken: pings that waited together (a child
// stopped, or starved of CPU, answers them in one burst as it runs again,
// before it has taken in the invokes whose bytes it read meanwhile; a
// host that was stopped reads such pongs in a burst too) are one look,
// not two. Owned by the slot's supervisor (watch).
type lostCalls struct {
	gap      time.Duration      // half a HealthInterval: a later look is a ping sent this long after the first short pong
	suspects map[*Call]struct{} // unaccounted for at the first short pong of the last look; nil when the last pong was not short
	since    time.Time          // when the short pong that made the suspects was taken
}

// check takes the streams of a pong, the calls the host could not see
// accounted for (unaccounted), when the ping it answers was sent (asked)
// and now, and returns the calls lost: those that were suspects at the
// previous short pong too, when this one answers a ping sent more than
// gap after that pong was taken.
func (l *lostCalls) check(streams int, calls []*Call, asked, now time.Time) (lost []*Call) {
	if streams >= len(calls) {
		l.suspects = nil
		return nil
	}
	if l.suspects != nil {
		if !asked.After(l.since.Add(l.gap)) {
			return nil // the same look as the pong that made the suspects
		}
		for _, c := range calls {
			if _, ok := l.suspects[c]; ok {
				lost = append(lost, c)
			}
		}
	}
	if len(lost) > 0 {
		l.suspects = nil
		return lost
	}
	l.suspects = make(map[*Call]struct{}, len(calls))
	for _, c := range calls {
		l.suspects[c] = struct{}{}
	}
	l.since = now
	return nil
}

// unreadInvokeWait is how many health timeouts a call whose bytes the
// child has not read yet (the invoke, or input after it) must be old
// before its pong must count it: a child that never reads its connection
// or never accepts it cannot be told from one too starved of CPU to have
// got to it but by time, and a child that answers pings while hundreds of
// its new connections wait (TestHealthWhileEveryStreamIsBusy under -race
// on a loaded machine) must not lose its calls. A call whose bytes the
// child did read and does not count is lost after one health timeout.
const unreadInvokeWait = 4

// unaccounted returns the calls running on the child that its pong must
// count: dispatched before before (before unreadBefore when the child has
// not read all the host wrote on the call's connection), with no provider
// terminal yet, and nothing of theirs waiting on the host's side (bytes
// unread in the socket or the reader's buffer, a full outbox), so the
// child cannot have returned their handlers' output into a buffer the
// host is not reading.
func (ch *child) unaccounted(before, unreadBefore time.Time) []*Call {
	h := ch.h
	h.mu.Lock()
	conns := make([]*streamConn, 0, len(ch.conns))
	for c := range ch.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	var out []*Call
	for _, c := range conns {
		c.mu.Lock()
		call := c.cur
		c.mu.Unlock()
		if call == nil || call.providerDone.Load() || !call.dispatched.Before(before) {
			continue
		}
		if c.held.Load() || call.out.stalled() || unread(c.nc) > 0 {
			continue
		}
		if !call.dispatched.Before(unreadBefore) && unsent(c.nc) {
			continue
		}
		out = append(out, call)
	}
	return out
}

// failLost gives the call its synthetic terminal for cause by closing its
// connection, unless it was released meanwhile (its connection may then
// be another call's).
func (c *Call) failLost(cause *synth) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	if !c.released {
		c.conn.fail(cause)
	}
}

// lostCause is the synthetic terminal of a lost call.
func (ch *child) lostCause() *synth {
	return &synth{kind: frame.KindFailed, code: frame.CodeUnreachable,
		msg: "child " + ch.id + " lost the call: two pongs in a row counted fewer running calls than the host had on it"}
}

// errLostCalls is why a child that lost calls was recycled.
func errLostCalls(n, streams int) error {
	return fmt.Errorf("%w: %d calls not counted by its pong (%d streams): recycled", ErrCallsLost, n, streams)
}
