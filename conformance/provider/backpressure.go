package provider

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// stall is how long a write must make no progress to count as blocked by
// backpressure: the child reads a connection it serves within microseconds,
// so a second without progress on a loaded machine means it stopped.
const stall = time.Second

// errNeverBlocked: the child took every frame offered.
var errNeverBlocked = errors.New("conformance: writes never blocked")

// fillIngress writes caller chunks for id on s, sequence 1 on, each with a
// text payload of size bytes, until a write stalls (backpressure) or max
// chunks are written. It returns how many whole chunks the child took. A
// stalled chunk is left half written, so the test must not write on s
// again.
func fillIngress(s *conn, id string, size, max int) (int, error) {
	text := strings.Repeat("x", size)
	for n := range max {
		err := s.writeWithin(encodePacket(callerChunk(id, uint64(n+1), map[string]any{"text": text}), nil), stall)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return max, errNeverBlocked
}

// unreadCount starts a count on its own connection whose output the test
// never reads, so the child's writes block on the full socket.
func unreadCount(t *testing.T, c *child, id string, timeoutMS int) *conn {
	t.Helper()
	s := c.dial(t)
	s.send(with(invoke(id, "count", map[string]any{"n": 10000000, "size": 10000}), "timeout_ms", timeoutMS))
	s.send(callerFrame(id, 0, "started"))
	s.send(callerFrame(id, 1, "completed"))
	return s
}

// Contract: docs/protocol.md §6 item 2 (ingress queue of 8).
// The ingress queue is bounded at 8: with a small send buffer on the host's
// side the host's writes block after about 8 frames of a handler that does
// not read its input.
func testIngressQueueBound(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	if err := s.setSendBuffer(4096); err != nil {
		t.Fatal(err)
	}
	s.send(invoke("q", "sleep", map[string]any{"ms": 20000})) // sleep reads no input
	s.send(callerFrame("q", 0, "started"))
	n, err := fillIngress(s, "q", 60000, 100)
	if err != nil {
		t.Fatalf("after %d frames: %v", n, err)
	}
	t.Logf("60 kB frames, SO_SNDBUF 4096: %d whole frames taken before the writes blocked", n)
	// 8 queued, one being read, and what the child's read buffer holds.
	if n < 8 || n > 12 {
		t.Errorf("%d frames taken before the writes blocked; the queue holds 8", n)
	}
}

// Contract: docs/protocol.md §1 and §6 item 2 (backpressure stays on its stream).
// With one stream blocked on its input and one on its output, pong still
// comes at once and counts both, and a third stream works.
func testPongWhileBackpressured(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.send(invoke("bp1", "sleep", map[string]any{"ms": 20000})) // reads no input
	s.send(callerFrame("bp1", 0, "started"))
	n, err := fillIngress(s, "bp1", 30000, 400)
	if err != nil {
		t.Fatalf("caller writes after %d chunks: %v", n, err)
	}
	t.Logf("caller writes blocked after %d chunks of 30 kB", n)
	unreadCount(t, c, "bp2", 0)
	c.mustCounters(2, 0, wait)
	// Ping for half a second while bp2 fills its socket and blocks.
	for t0 := time.Now(); time.Since(t0) < 500*time.Millisecond; {
		t1 := time.Now()
		st, stuck := c.counters()
		if el := time.Since(t1); el > 500*time.Millisecond {
			t.Errorf("pong took %v under backpressure", el)
		}
		if st != 2 || stuck != 0 {
			t.Errorf("streams=%d stuck=%d, want 2, 0", st, stuck)
		}
		time.Sleep(20 * time.Millisecond) // pace the pings; the loop's length is the observation
	}
	runCall(t, c.dial(t), "bp3", "count", map[string]any{"n": 2}, nil, "chunk,chunk,completed,end")
}

// Contract: docs/protocol.md §3 cancel; §6 item 5 (cancel under backpressure).
// A control cancel ends a call whose ingress queue is full at once; a
// handler blocked writing to a host that does not read returns at once, is
// never counted stuck, and its cancelled terminal and end follow its queued
// output.
func testCancelUnderBackpressure(t *testing.T) {
	t.Run("ingress_full", func(t *testing.T) {
		c := start(t, setup{})
		s := c.dial(t)
		s.send(invoke("cub1", "sleep", map[string]any{"ms": 20000}))
		s.send(callerFrame("cub1", 0, "started"))
		if n, err := fillIngress(s, "cub1", 30000, 400); err != nil {
			t.Fatalf("caller writes after %d chunks: %v", n, err)
		}
		t0 := time.Now()
		c.ctl.send(map[string]any{"t": "cancel", "call_id": "cub1"})
		expectCall(t, s, "cub1", "cancelled,end")
		if el := time.Since(t0); el > atOnce {
			t.Errorf("cancel with a full ingress queue answered after %v", el)
		}
	})
	t.Run("egress_blocked", func(t *testing.T) {
		c := start(t, setup{})
		s := unreadCount(t, c, "cub2", 0)
		c.mustCounters(1, 0, wait)
		// A deliberate pause: the count fills its socket in milliseconds,
		// and nothing on the wire says when it is blocked.
		time.Sleep(300 * time.Millisecond)
		c.ctl.send(map[string]any{"t": "cancel", "call_id": "cub2"})
		// Stuck would show after the default cancel grace of 1 s and stay.
		if err := c.waitCounters(0, 0, atOnce); err != nil {
			t.Errorf("a cancelled handler blocked by a host that does not read: %v", err)
		}
		r := expectCall(t, s, "cub2", "")
		if tm := r.terminal(); tm == nil || tm.outcome() != "cancelled" || r.end == nil {
			t.Errorf("the unread stream after the cancel: %d frames, terminal %v, end %v", len(r.frames), tm, r.end)
		}
	})
}

// Contract: docs/protocol.md §6 items 4 and 5 (cancel under backpressure).
// A deadline that passes while the handler is blocked by a host that does
// not read ends it at once (never stuck); the terminal is failed timeout,
// then end.
func testTimeoutBackpressured(t *testing.T) {
	c := start(t, setup{})
	const timeout = 1000 * time.Millisecond
	s := unreadCount(t, c, "tb", int(timeout.Milliseconds()))
	t0 := time.Now()
	c.mustCounters(1, 0, wait)
	// Stuck would show at the deadline plus the default cancel grace of
	// 1 s, and stay.
	if err := c.waitCounters(0, 0, timeout-time.Since(t0)+atOnce); err != nil {
		t.Errorf("a timed-out handler blocked by backpressure: %v", err)
	}
	r := expectCall(t, s, "tb", "")
	if tm := r.terminal(); tm == nil || tm.outcome() != "failed/timeout" || r.end == nil {
		t.Errorf("terminal %v, end %v (%d frames)", tm, r.end, len(r.frames))
	}
}

// Contract: docs/protocol.md §5 item 5 (shutdown: a drain past its grace).
// A drain while a handler is blocked by a host that does not read still says
// bye by grace_ms + cancel_grace_ms.
func testDrainBackpressured(t *testing.T) {
	const grace, cancelGrace = 300, 500
	c := start(t, setup{cancelGraceMS: cancelGrace})
	unreadCount(t, c, "bp", 0)
	c.mustCounters(1, 0, wait)
	t0 := c.drain(grace)
	_, byeAt := readBye(t, c, wait)
	el, limit := byeAt.Sub(t0), time.Duration(grace+cancelGrace)*time.Millisecond
	t.Logf("bye %v after the drain (limit %v)", el, limit)
	if el > limit+slack {
		t.Errorf("bye %v after a drain with a blocked stream, limit %v", el, limit)
	}
	expectExitAfterBye(t, c)
}
