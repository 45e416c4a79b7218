package provider

import (
	"testing"
	"time"
)

// nextPacket returns the next result of a readAsync channel within d, or
// ends the test.
func nextPacket(t *testing.T, ch <-chan timedPacket, d time.Duration, what string) timedPacket {
	t.Helper()
	select {
	case tp, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the reader stopped", what)
		}
		if tp.err != nil {
			t.Fatalf("%s: %v", what, tp.err)
		}
		return tp
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
	}
	return timedPacket{}
}

// Contract: docs/protocol.md §6 item 7 (stuck handlers); §3 startup
// (cancel_grace_ms).
// A cancelled handler that ignores the cancellation is not counted stuck
// within cancel_grace_ms; after it the child writes the cause's terminal for
// it, counts it in pong.stuck and withholds end until the handler returns;
// then end comes, the counters go down and the connection is reusable.
// Cancel grace absent means 1000 ms; 0 means none.
func testStuckHandler(t *testing.T) {
	const sleep = 2500 * time.Millisecond // how long the handler ignores its cancellation
	for _, tc := range []struct {
		name     string
		grace    any           // startup.cancel_grace_ms; nil leaves it out
		graceDur time.Duration // the grace it means
		cause    string
		want     string
	}{
		{"control_cancel", 600, 600 * time.Millisecond, "control", "cancelled"},
		{"caller_cancelled", 600, 600 * time.Millisecond, "caller", "cancelled"},
		{"caller_failed", 600, 600 * time.Millisecond, "caller_failed", "cancelled"},
		{"timeout", 600, 600 * time.Millisecond, "timeout", "failed/timeout"},
		{"default_grace", nil, 1000 * time.Millisecond, "control", "cancelled"},
		{"zero_grace", 0, 0, "control", "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // mostly waiting: two at a time halve the suite's time
			c := start(t, setup{args: testToolsArgs(), cancelGraceMS: tc.grace})
			s := c.dial(t)
			const id = "stuck"
			const timeout = 300 * time.Millisecond
			inv := invoke(id, "sleep", map[string]any{"ms": sleep.Milliseconds(), "ignore_cancel": true})
			if tc.cause == "timeout" {
				inv["timeout_ms"] = timeout.Milliseconds()
			}
			tStart := time.Now()
			s.send(inv)
			s.send(callerFrame(id, 0, "started"))
			rd := readAsync(t, s, wait+sleep)
			c.mustCounters(1, 0, wait)
			tCancel := time.Now()
			switch tc.cause {
			case "control":
				c.ctl.send(map[string]any{"t": "cancel", "call_id": id})
				s.send(callerFrame(id, 1, "cancelled")) // as a host does
			case "caller":
				s.send(callerFrame(id, 1, "cancelled"))
			case "caller_failed":
				s.send(with(callerFrame(id, 1, "failed"), "error", map[string]any{"code": "transport_error", "message": "x"}))
			case "timeout":
				tCancel = tStart.Add(timeout)
			}
			if tc.graceDur > 0 {
				// A deliberate pause to the middle of the grace: the handler
				// is cancelled but not yet stuck, and has no terminal.
				time.Sleep(time.Until(tCancel.Add(tc.graceDur / 2)))
				if st, stuck := c.counters(); st != 1 || stuck != 0 {
					t.Errorf("within the grace: streams=%d stuck=%d, want 1, 0", st, stuck)
				}
			}
			term := nextPacket(t, rd, wait, "the terminal written for the stuck handler")
			lat := term.at.Sub(tCancel)
			t.Logf("%s %v after the cancel (grace %v)", term.p.outcome(), lat, tc.graceDur)
			var next uint64 = 1
			var done bool
			for _, p := range checkProviderFrame(term.p, id, &next, &done) {
				t.Error(p)
			}
			if got := term.p.outcome(); got != tc.want {
				t.Errorf("terminal %s, want %s", got, tc.want)
			}
			if lat < tc.graceDur {
				t.Errorf("terminal written %v after the cancel, before cancel_grace_ms %v", lat, tc.graceDur)
			}
			if lat > tc.graceDur+atOnce {
				t.Errorf("terminal written %v after the cancel, grace %v", lat, tc.graceDur)
			}
			if err := c.waitCounters(1, 1, atOnce); err != nil {
				t.Errorf("after the terminal: %v", err)
			}
			end := nextPacket(t, rd, wait+sleep, "end after the handler returned")
			if end.p.typ != "end" {
				t.Fatalf("after the terminal: %v, want end", end.p)
			}
			if at := end.at.Sub(tStart); at < sleep {
				t.Errorf("end %v after the invoke, before the handler returned (%v)", at, sleep)
			}
			if err := c.waitCounters(0, 0, atOnce); err != nil {
				t.Errorf("after end: %v", err)
			}
			if tc.cause == "timeout" {
				s.send(callerFrame(id, 1, "completed"))
			}
			runCall(t, s, "next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
		})
	}
}

// Contract: docs/protocol.md §3 pong; §6 item 7.
// Handlers that have not returned are counted whatever became of their
// connections: a closed connection's uncooperative handler becomes stuck,
// and both counters go down when it returns.
func testStuckAfterConnClose(t *testing.T) {
	c := start(t, setup{args: testToolsArgs(), cancelGraceMS: 300})
	s := c.dial(t)
	s.send(invoke("sc", "sleep", map[string]any{"ms": 2000, "ignore_cancel": true}))
	s.send(callerFrame("sc", 0, "started"))
	c.mustCounters(1, 0, wait)
	s.close()
	if err := c.waitCounters(1, 1, 1500*time.Millisecond); err != nil {
		t.Errorf("after closing the connection of an uncooperative handler: %v", err)
	}
	if err := c.waitCounters(0, 0, 2*time.Second+atOnce); err != nil {
		t.Errorf("after the handler returned: %v", err)
	}
}

// Contract: docs/protocol.md §3 pong.stuck.
// Every stuck handler is counted.
func testTwoStuck(t *testing.T) {
	c := start(t, setup{args: testToolsArgs(), cancelGraceMS: 200})
	ids := []string{"s1", "s2"}
	var ss []*conn
	for _, id := range ids {
		s := c.dial(t)
		s.send(invoke(id, "sleep", map[string]any{"ms": 2000, "ignore_cancel": true}))
		s.send(callerFrame(id, 0, "started"))
		ss = append(ss, s)
	}
	c.mustCounters(2, 0, wait)
	for _, id := range ids {
		c.ctl.send(map[string]any{"t": "cancel", "call_id": id})
	}
	if err := c.waitCounters(2, 2, 1500*time.Millisecond); err != nil {
		t.Errorf("two stuck handlers: %v", err)
	}
	for i, s := range ss {
		expectCall(t, s, ids[i], "cancelled,end")
	}
	if err := c.waitCounters(0, 0, atOnce); err != nil {
		t.Errorf("after both returned: %v", err)
	}
}

// Contract: docs/protocol.md §4.1 (a terminal closes only its own direction).
// After the terminal written for a stuck handler the caller may still send
// frames and its terminal; end follows when the handler returns, and the
// connection is reusable.
func testCallerFramesWhileStuck(t *testing.T) {
	c := start(t, setup{args: testToolsArgs(), cancelGraceMS: 200})
	s := c.dial(t)
	s.send(with(invoke("cws", "sleep", map[string]any{"ms": 1500, "ignore_cancel": true}), "timeout_ms", 200))
	s.send(callerFrame("cws", 0, "started"))
	if p := s.must(wait); p.outcome() != "failed/timeout" {
		t.Fatalf("got %v, want failed timeout", p)
	}
	for i := 1; i <= 2; i++ {
		s.send(callerChunk("cws", uint64(i), map[string]any{"late": i}))
	}
	s.send(callerFrame("cws", 3, "completed"))
	if e, err := s.read(wait); err != nil || e.typ != "end" {
		t.Fatalf("want end once the handler returned, got %v, %v", e, err)
	}
	runCall(t, s, "cws-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}
