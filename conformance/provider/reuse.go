package provider

import (
	"testing"
)

// Contract: docs/protocol.md §6 item 6 (reuse).
// After end, the child reads and discards frames of the ended call until the
// caller's terminal (nothing answered, the connection kept), then takes the
// next invoke; also when the ended call left frames queued that its handler
// never read.
func testReuseDiscardUntilTerminal(t *testing.T) {
	c := start(t, setup{})
	t.Run("late_frames", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("d1", "count", map[string]any{"n": 3})) // count reads no input
		s.send(callerFrame("d1", 0, "started"))
		expectCall(t, s, "d1", "chunk,chunk,chunk,completed,end")
		for i := 1; i <= 5; i++ {
			s.send(callerChunk("d1", uint64(i), map[string]any{"late": i}))
		}
		s.send(callerFrame("d1", 6, "completed"))
		// Anything written for the late frames, or a close, fails this call.
		runCall(t, s, "d2", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
	})
	t.Run("queued_frames", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("d3", "sleep", map[string]any{"ms": 300})) // sleep reads no input
		s.send(callerFrame("d3", 0, "started"))
		for i := 1; i <= 20; i++ { // more than the queue's 8
			s.send(callerChunk("d3", uint64(i), map[string]any{"q": i}))
		}
		expectCall(t, s, "d3", "completed,end")
		s.send(callerChunk("d3", 21, map[string]any{"q": 21}))
		s.send(callerFrame("d3", 22, "cancelled"))
		runCall(t, s, "d4", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
	})
}

// Contract: docs/protocol.md §6 item 6 and "Call ids".
// Out-of-order packets close the connection without a frame: on an idle
// connection anything but an invoke of a new call id; before the caller's
// terminal anything but a frame of the ended call; an invoke during a call.
func testReuseProtocolErrors(t *testing.T) {
	c := start(t, setup{})
	for _, tc := range []struct {
		name string
		mk   func(id string) map[string]any
	}{
		{"frame_of_ended_call", func(id string) map[string]any { return callerChunk(id, 2, map[string]any{"a": 1}) }},
		{"started_of_new_call", func(string) map[string]any { return callerFrame("fresh", 0, "started") }},
		{"invoke_same_call_id", func(id string) map[string]any { return invoke(id, "count", map[string]any{"n": 1}) }},
		{"unknown_type", func(string) map[string]any { return map[string]any{"t": "bogus"} }},
		{"end_from_host", func(id string) map[string]any { return map[string]any{"t": "end", "call_id": id} }},
	} {
		t.Run("idle/"+tc.name, func(t *testing.T) {
			s := c.dial(t)
			id := "r-" + tc.name
			runCall(t, s, id, "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
			s.send(tc.mk(id))
			if err := s.expectClosed(wait); err != nil {
				t.Error(err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		bad  map[string]any
	}{
		{"other_call_frame", callerChunk("someone-else", 1, map[string]any{"a": 1})},
		{"invoke", invoke("r-y2", "count", map[string]any{"n": 1})},
	} {
		t.Run("before_caller_terminal/"+tc.name, func(t *testing.T) {
			s := c.dial(t)
			id := "r-" + tc.name
			s.send(invoke(id, "count", map[string]any{"n": 1}))
			s.send(callerFrame(id, 0, "started"))
			expectCall(t, s, id, "chunk,completed,end")
			s.send(tc.bad)
			if err := s.expectClosed(wait); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("invoke_during_call", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("run1", "echo", nil)) // echo writes nothing until input comes
		s.send(callerFrame("run1", 0, "started"))
		s.send(invoke("run2", "echo", nil))
		if err := s.expectClosed(wait); err != nil {
			t.Error(err)
		}
	})
	// In the quiet interval (§6 item 6) the child need not read, so a plain
	// request may first be answered in full; whatever it
	// writes must be a well-formed call, then the connection closes.
	t.Run("frame_in_quiet_interval", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("qi", "sleep", map[string]any{"ms": 300}))
		s.send(callerFrame("qi", 0, "started"))
		s.send(callerFrame("qi", 1, "completed"))
		s.send(callerChunk("qi", 2, map[string]any{"a": 1}))
		r, err := readCall(s, "qi", wait)
		for _, p := range r.problems {
			t.Error(p)
		}
		if err == nil {
			err = s.expectClosed(wait)
		} else if isClosed(err) {
			err = nil
		}
		if err != nil {
			t.Errorf("after %q: %v", r.outcomes(), err)
		}
		t.Logf("quiet-interval frame: %q before the close", r.outcomes())
	})
	if err := c.waitCounters(0, 0, atOnce); err != nil {
		t.Errorf("after the protocol errors: %v", err)
	}
}
