package provider

import (
	"strings"
	"testing"
)

// Contract: docs/protocol.md §3 invoke; §6 "Invalid invokes".
// An invoke that parses but breaks §3 and has a readable call id ends with
// failed invalid_frame and end, then the connection closes; with no readable
// call id the connection just closes.
func testInvalidInvokes(t *testing.T) {
	c := start(t, setup{})
	base := func() map[string]any { return invoke("ii", probe.tool, nil) }
	for _, tc := range []struct {
		name string
		inv  map[string]any
	}{
		{"arguments_absent", with(base(), "arguments", removed)},
		{"arguments_nil", with(base(), "arguments", nil)},
		{"arguments_array", with(base(), "arguments", []any{1})},
		{"arguments_bin_value", with(base(), "arguments", map[string]any{"x": []byte{1}})},
		{"tool_id_empty", with(base(), "tool_id", "")},
		{"tool_id_129", with(base(), "tool_id", strings.Repeat("t", 129))},
		{"tool_id_missing", with(base(), "tool_id", removed)},
		{"timeout_negative", with(base(), "timeout_ms", -5)},
		{"timeout_string", with(base(), "timeout_ms", "5")},
		{"trace_value_not_string", with(base(), "trace", map[string]any{"traceparent": 5})},
		{"parent_129", with(base(), "parent", strings.Repeat("p", 129))},
	} {
		t.Run("readable/"+tc.name, func(t *testing.T) {
			s := c.dial(t)
			s.send(tc.inv)
			expectInvalid(t, s, "ii")
		})
	}
	for _, tc := range []struct {
		name string
		inv  map[string]any
	}{
		{"call_id_empty", invoke("", probe.tool, nil)},
		{"call_id_129", invoke(strings.Repeat("c", 129), probe.tool, nil)},
		{"call_id_missing", with(invoke("x", probe.tool, nil), "call_id", removed)},
		{"call_id_invalid_utf8", invoke("a\xff", probe.tool, nil)},
	} {
		t.Run("unreadable/"+tc.name, func(t *testing.T) {
			s := c.dial(t)
			s.send(tc.inv)
			if err := s.expectClosed(wait); err != nil {
				t.Error(err)
			}
		})
	}
	if err := c.waitCounters(0, 0, atOnce); err != nil {
		t.Errorf("after the invalid invokes: %v", err)
	}
}

// Contract: docs/protocol.md §3 invoke; §2 Optional keys.
// The keys trace, tree and parent, a long timeout and unknown keys are
// accepted; an empty tree and nil optionals mean "not given".
func testValidInvokeOptionals(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	inv := with(probeInvoke("vo3"), "trace", map[string]any{"traceparent": "00-abc"},
		"tree", "root-1", "parent", "root-1", "timeout_ms", 60000, "zz_unknown", []byte{1})
	s.send(inv)
	s.send(callerFrame("vo3", 0, "started"))
	s.send(callerFrame("vo3", 1, "completed"))
	expectProbe(t, s, "vo3")
	s.send(with(probeInvoke("vo4"), "tree", "", "parent", nil, "trace", nil))
	s.send(callerFrame("vo4", 0, "started"))
	s.send(callerFrame("vo4", 1, "completed"))
	expectProbe(t, s, "vo4")
}

// Contract: docs/protocol.md §3 (call_id, error message); characters are
// code points (docs/protocol.md's introduction).
// Call ids are 1..128 code points, so 128 two-byte characters are valid; a
// caller failed with a message of 2,048 multi-byte characters is a valid
// frame and cancels the handler.
func testCallIDCharacters(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	runProbe(t, s, strings.Repeat("é", 128))
	runProbe(t, s, strings.Repeat("x", 128))
	t.Run("message2048", func(t *testing.T) {
		needTools(t, "echo") // a handler that waits for its input
		id := "msg2048"
		s.send(invoke(id, "echo", nil))
		s.send(callerFrame(id, 0, "started"))
		s.send(with(callerFrame(id, 1, "failed"), "error", map[string]any{"code": "provider_error", "message": strings.Repeat("ü", 2048)}))
		expectCall(t, s, id, "cancelled,end")
	})
}

// Contract: docs/protocol.md §6 item 3 and §7 "Schemas" (host duties).
// Checking arguments against arguments_schema is the host's duty; a child
// given arguments that break it must still end the call well (§6 item 3: one
// terminal, then end).
func testArgumentsAgainstSchema(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	r := runCall(t, s, "as", "count", map[string]any{"n": "three"}, nil, "")
	if r.terminal() == nil || r.end == nil {
		t.Errorf("count {n: \"three\"}: %q, want a terminal and end", r.outcomes())
	}
	runCall(t, s, "as-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}

// Contract: docs/protocol.md §6 "Unknown tools and draining".
// The answer is failed invalid_frame ("unknown tool") and end, and the
// connection stays reusable, whether the caller's frames come before or after the answer.
func testUnknownTool(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	for _, early := range []bool{false, true} {
		id := "unknown-late"
		if early {
			id = "unknown-early"
		}
		s.send(invoke(id, "no-such-tool", nil))
		if early {
			s.send(callerFrame(id, 0, "started"))
			s.send(callerFrame(id, 1, "completed"))
		}
		r := expectCall(t, s, id, "failed/invalid_frame,end")
		if tm := r.terminal(); tm != nil && !strings.Contains(tm.errMessage(), "unknown tool") {
			t.Errorf("%s: message %q, want it to say unknown tool", id, tm.errMessage())
		}
		if !early {
			s.send(callerFrame(id, 0, "started"))
			s.send(callerFrame(id, 1, "completed"))
		}
		runProbe(t, s, id+"-next")
	}
}

// Contract: docs/protocol.md §6 "Call ids".
// An invoke whose call id is running on another connection closes that
// connection without a frame; the running call is untouched, and its id may
// be used again once it has ended.
func testCallIDRunningElsewhere(t *testing.T) {
	c := start(t, setup{})
	s1 := c.dial(t)
	s1.send(invoke("dup", "sleep", map[string]any{"ms": 1000}))
	s1.send(callerFrame("dup", 0, "started"))
	c.mustCounters(1, 0, wait)
	s2 := c.dial(t)
	s2.send(invoke("dup", "count", map[string]any{"n": 1}))
	if err := s2.expectClosed(wait); err != nil {
		t.Errorf("an invoke of a running call id: %v", err)
	}
	s1.send(callerFrame("dup", 1, "completed"))
	expectCall(t, s1, "dup", "completed,end")
	runCall(t, c.dial(t), "dup", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}
