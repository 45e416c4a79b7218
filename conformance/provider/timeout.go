package provider

import (
	"testing"
	"time"
)

// Contract: docs/protocol.md §6 item 4 (the terminal by cause).
// The timeout_ms deadline ends the call with failed timeout, not before it
// and promptly after it; after the caller's terminal the connection is
// reusable.
func testTimeout(t *testing.T) {
	c := start(t, setup{})
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"sleep", map[string]any{"ms": 20000}},
		{"echo", nil}, // waits for input that never comes
	} {
		t.Run(tc.tool, func(t *testing.T) {
			s := c.dial(t)
			id := "to-" + tc.tool
			t0 := time.Now()
			s.send(with(invoke(id, tc.tool, tc.args), "timeout_ms", timeout.Milliseconds()))
			s.send(callerFrame(id, 0, "started"))
			expectCall(t, s, id, "failed/timeout,end")
			el := time.Since(t0)
			t.Logf("timed out after %v", el)
			if el < timeout || el > timeout+atOnce {
				t.Errorf("timeout_ms %v: failed timeout after %v", timeout, el)
			}
			s.send(callerFrame(id, 1, "completed"))
			runCall(t, s, id+"-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
		})
	}
}

// Contract: docs/protocol.md §3 invoke and Millisecond fields.
// No deadline with 0, with the key absent, or with a value past what a clock
// holds.
func testNoTimeout(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	for _, tc := range []struct {
		name    string
		timeout any // removed: no key
	}{
		{"zero", 0},
		{"absent", removed},
		{"huge", uint64(1) << 62},
	} {
		id := "no-timeout-" + tc.name
		s.send(with(invoke(id, "sleep", map[string]any{"ms": 300}), "timeout_ms", tc.timeout))
		s.send(callerFrame(id, 0, "started"))
		s.send(callerFrame(id, 1, "completed"))
		expectCall(t, s, id, "completed,end")
	}
}

// Contract: docs/protocol.md §4.2 (sequence fence) and §6 item 4.
// A timeout after some output is the next frame in sequence: three chunks,
// then failed timeout.
func testTimeoutAfterOutput(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.send(with(invoke("tao", "upper", nil), "timeout_ms", 500))
	s.send(callerFrame("tao", 0, "started"))
	for i := 1; i <= 3; i++ {
		s.send(callerChunk("tao", uint64(i), map[string]any{"text": "x"}))
	}
	expectCall(t, s, "tao", "chunk,chunk,chunk,failed/timeout,end")
}

// Contract: docs/protocol.md §6 items 4 and 6 (a plain request).
// A plain request's deadline ends it with failed timeout like any call.
func testPlainRequestTimeout(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.sendRaw(plainRequest(with(invoke("prt", "sleep", map[string]any{"ms": 20000}), "timeout_ms", 200)))
	expectCall(t, s, "prt", "failed/timeout,end")
	runCall(t, s, "prt-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}
