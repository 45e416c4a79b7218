package provider

import (
	"testing"
	"time"
)

// Contract: docs/protocol.md §3 (a control packet's bad field) and §5 item 6.
// A protocol error on the control connection after startup stops the
// child with exit status 1: a packet that breaks §2, a ping, cancel or
// drain with invalid fields, and a well-formed packet of another type.
// Never 2 (that is a failed start), a signal, or going on.
func testControlProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"hello_from_host", encodePacket(map[string]any{"t": "hello", "protocol": []any{1}, "max_streams": 1}, nil)},
		{"startup_twice", encodePacket(startupPacket(1), nil)},
		{"pong_from_host", encodePacket(map[string]any{"t": "pong", "nonce": 1, "streams": 0, "stuck": 0}, nil)},
		{"bye_from_host", encodePacket(map[string]any{"t": "bye"}, nil)},
		{"invoke_on_control", encodePacket(invoke("x", "count", map[string]any{"n": 1}), nil)},
		{"unknown_t", encodePacket(map[string]any{"t": "bogus"}, nil)},
		{"H0", prefix(0, 0)},
		{"H_over_max", prefix(defaultMaxHeader+1, 0)},
		{"attachment_on_ping", encodePacket(map[string]any{"t": "ping", "nonce": 1}, []byte("x"))},
		{"ping_negative_nonce", encodePacket(map[string]any{"t": "ping", "nonce": -1}, nil)},
		{"ping_string_nonce", encodePacket(map[string]any{"t": "ping", "nonce": "1"}, nil)},
		{"cancel_without_call_id", encodePacket(map[string]any{"t": "cancel"}, nil)},
		{"cancel_empty_call_id", encodePacket(map[string]any{"t": "cancel", "call_id": ""}, nil)},
		{"drain_negative_grace", encodePacket(map[string]any{"t": "drain", "grace_ms": -1}, nil)},
		{"nonstring_key", rawPacket(rawMap(mstr("t"), mstr("ping"), []byte{0x01}, []byte{0x01}), nil)},
		{"trailing_byte", rawPacket(append(mustEncode(map[string]any{"t": "ping", "nonce": 1}), 0xc0), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, setup{})
			c.ping(1)
			c.ctl.sendRaw(tc.b)
			code, ok := c.waitExit(wait)
			if !ok {
				t.Fatalf("child still running %v after a control protocol error", wait)
			}
			t.Logf("exit %d, last line %q", code, lastLine(c.outputText()))
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
		})
	}
}

// Contract: docs/protocol.md §5 item 6 (a packet cut short by EOF).
// A control packet cut short by EOF is the host going away while it wrote,
// not a protocol error: exit status 0, as for a clean EOF.
func testControlCutShort(t *testing.T) {
	whole := encodePacket(map[string]any{"t": "ping", "nonce": 7}, nil)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"in_prefix", whole[:5]},
		{"in_header", whole[:len(whole)-2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, setup{})
			c.ping(1)
			c.ctl.sendRaw(tc.b)
			c.ctl.close()
			code, ok := c.waitExit(wait)
			if !ok {
				t.Fatalf("child still running %v after control EOF", wait)
			}
			if code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
		})
	}
}

// Contract: docs/protocol.md §2 (unknown keys are ignored).
// Unknown keys are ignored on control packets too, and an optional key may
// be nil (docs/protocol.md §2 "Optional keys").
func testControlUnknownKeys(t *testing.T) {
	c := start(t, setup{})
	c.ctl.send(map[string]any{"t": "ping", "nonce": 3, "extra": map[string]any{"x": 1}})
	if p := c.ctl.must(wait); p.typ != "pong" || p.int("nonce") != 3 {
		t.Errorf("ping with an unknown key answered by %v", p)
	}
	c.ctl.send(map[string]any{"t": "cancel", "call_id": "zz", "reason": nil, "x": 1})
	c.ping(4) // still serving: the cancel was taken
}

// Contract: docs/protocol.md §3 (control connection, child → host).
// The child's control packets are hello, pong (answering ping) and bye
// (ending a drain); nothing comes unprompted. The read window is the
// observation, not a wait for something.
func testNoUnpromptedControlPackets(t *testing.T) {
	c := start(t, setup{})
	if err := c.ctl.expectNothing(time.Second); err != nil {
		t.Errorf("after startup: %v", err)
	}
}

// Contract: docs/protocol.md §5 item 6 (control EOF).
// On control EOF the child cancels every handler and exits 0 within 1 s,
// without waiting for them (a stuck one included).
func testControlEOF(t *testing.T) {
	for _, tc := range []struct {
		name string
		args map[string]any // of a sleep call left running; nil for none
	}{
		{"idle", nil},
		{"running", map[string]any{"ms": 20000}},
		{"stuck", map[string]any{"ms": 20000, "ignore_cancel": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, setup{args: testToolsArgs(), cancelGraceMS: 5000})
			if tc.args != nil {
				s := c.dial(t)
				s.send(invoke("r1", "sleep", tc.args))
				s.send(callerFrame("r1", 0, "started"))
				c.mustCounters(1, 0, wait)
			}
			t0 := time.Now()
			c.ctl.close()
			code, ok := c.waitExit(wait)
			el := time.Since(t0)
			if !ok {
				t.Fatalf("no exit within %v of control EOF", wait)
			}
			t.Logf("exit %d after %v", code, el)
			if code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
			if el > time.Second+slack {
				t.Errorf("exit %v after control EOF, want ≤ 1 s", el)
			}
		})
	}
}

// Contract: docs/protocol.md §5 item 6 (control EOF).
// Control EOF during a drain still exits 0 within 1 s, although the drain's
// grace is far from over.
func testControlEOFDuringDrain(t *testing.T) {
	c := start(t, setup{args: testToolsArgs()})
	s := c.dial(t)
	s.send(invoke("e", "sleep", map[string]any{"ms": 20000, "ignore_cancel": true}))
	s.send(callerFrame("e", 0, "started"))
	c.mustCounters(1, 0, wait)
	c.ctl.send(map[string]any{"t": "drain", "grace_ms": 10000})
	c.ping(1) // the drain has been read
	t0 := time.Now()
	c.ctl.close()
	code, ok := c.waitExit(wait)
	el := time.Since(t0)
	if !ok || code != 0 || el > time.Second+slack {
		t.Errorf("control EOF during a drain: exited %v, status %d, after %v; want 0 within 1 s", ok, code, el)
	}
}
