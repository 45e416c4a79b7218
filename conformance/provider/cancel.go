package provider

import (
	"fmt"
	"testing"
	"time"
)

// Contract: docs/protocol.md §3 cancel and §6 item 4 (the terminal by cause).
// A control cancel of a running handler ends the call at once with provider
// cancelled and end (so the handler returned: not the stuck path); after the
// caller's terminal the connection is reusable. reason is optional.
func testControlCancel(t *testing.T) {
	for i, tc := range []struct {
		tool   string
		args   map[string]any
		reason any // nil: no reason key
	}{
		{"sleep", map[string]any{"ms": 20000}, "test"},
		{"echo", nil, "test"},
		{"upper", nil, "test"},
		{"sleep", map[string]any{"ms": 20000}, nil},
	} {
		t.Run(fmt.Sprintf("%s/reason=%v", tc.tool, tc.reason), func(t *testing.T) {
			c := start(t, setup{})
			s := c.dial(t)
			id := fmt.Sprintf("cc%d", i)
			s.send(invoke(id, tc.tool, tc.args))
			s.send(callerFrame(id, 0, "started"))
			c.mustCounters(1, 0, wait)
			cancel := map[string]any{"t": "cancel", "call_id": id}
			if tc.reason != nil {
				cancel["reason"] = tc.reason
			}
			t0 := time.Now()
			c.ctl.send(cancel)
			expectCall(t, s, id, "cancelled,end")
			if el := time.Since(t0); el > atOnce {
				t.Errorf("control cancel answered after %v", el)
			}
			s.send(callerFrame(id, 1, "cancelled")) // as a host does
			runCall(t, s, id+"-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
			if err := c.waitCounters(0, 0, atOnce); err != nil {
				t.Errorf("after the cancel: %v", err)
			}
		})
	}
}

// Contract: docs/protocol.md §6 item 4 (caller cancelled or failed; the terminal by cause).
// A caller cancelled, and a caller failed, cancel a running handler:
// provider cancelled at once, end, and the connection is reusable.
func testCallerCancel(t *testing.T) {
	for _, kind := range []string{"cancelled", "failed"} {
		for _, tool := range []string{"sleep", "echo"} {
			t.Run(kind+"/"+tool, func(t *testing.T) {
				c := start(t, setup{})
				s := c.dial(t)
				id := "caller-" + kind + "-" + tool
				var args map[string]any
				if tool == "sleep" {
					args = map[string]any{"ms": 20000}
				}
				s.send(invoke(id, tool, args))
				s.send(callerFrame(id, 0, "started"))
				c.mustCounters(1, 0, wait)
				f := callerFrame(id, 1, kind)
				if kind == "failed" {
					f["error"] = map[string]any{"code": "provider_error", "message": "caller broke"}
				}
				t0 := time.Now()
				s.send(f)
				expectCall(t, s, id, "cancelled,end")
				if el := time.Since(t0); el > atOnce {
					t.Errorf("caller %s answered after %v", kind, el)
				}
				runCall(t, s, id+"-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
			})
		}
	}
}

// Contract: docs/protocol.md §6 "Call ids" (remembered cancels).
// A cancel for an unknown call id is remembered; an invoke for it ends at
// once with cancelled, the id is then forgotten, and the connection stays
// reusable.
func testRememberedCancel(t *testing.T) {
	c := start(t, setup{})
	c.ctl.send(map[string]any{"t": "cancel", "call_id": "future-1", "reason": "early"})
	c.ping(1) // the cancel has been read
	s := c.dial(t)
	t0 := time.Now()
	s.send(probeInvoke("future-1"))
	s.send(callerFrame("future-1", 0, "started"))
	expectCall(t, s, "future-1", "cancelled,end")
	if el := time.Since(t0); el > atOnce {
		t.Errorf("invoke of a remembered id answered after %v", el)
	}
	s.send(callerFrame("future-1", 1, "cancelled"))
	runProbe(t, c.dial(t), "future-1")
	runProbe(t, s, "after-remembered")
}

// Contract: docs/protocol.md §6 "Call ids" (the most recent 1,024).
// The most recent 1,024 unknown cancel ids are remembered, and no more.
func testRememberedCancel1024(t *testing.T) {
	c := start(t, setup{})
	var b []byte
	for i := 0; i <= 1024; i++ { // 1,025 ids: x0 is the oldest
		b = append(b, encodePacket(map[string]any{"t": "cancel", "call_id": fmt.Sprintf("x%d", i)}, nil)...)
	}
	c.ctl.sendRaw(b)
	c.ping(2)
	for _, tc := range []struct {
		id   string
		want string
	}{
		{"x1", "cancelled,end"},
		{"x1024", "cancelled,end"},
		{"x512", "cancelled,end"},
		{"x0", ""}, // forgotten: the probe call runs
	} {
		if tc.want == "" {
			runProbe(t, c.dial(t), tc.id)
			continue
		}
		runCall(t, c.dial(t), tc.id, probe.tool, probeArgs(), nil, tc.want)
	}
}

// Contract: docs/protocol.md §6 "Call ids" (remembered cancels).
// A cancel for a call that has ended names a call the child no longer knows,
// so it is remembered like any unknown id. (A host never reuses call ids;
// this checks the child's bookkeeping.)
func testCancelAfterEnd(t *testing.T) {
	c := start(t, setup{})
	runProbe(t, c.dial(t), "done1")
	c.ctl.send(map[string]any{"t": "cancel", "call_id": "done1"})
	c.ping(9)
	runCall(t, c.dial(t), "done1", probe.tool, probeArgs(), nil, "cancelled,end")
}

// Contract: docs/protocol.md §6 item 4; §6 item 6 (the quiet interval).
// The connection closing cancels the handler; nothing is written (§6 item
// 4), and pong.streams goes back to 0. A plain request's child need not
// read in the quiet interval (§6 item 6): the Go SDK sees the close within
// about 100 ms (docs/architecture.md, "Plain requests").
func testConnCloseCancels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
		tool  string
		args  map[string]any
	}{
		{"sleep", false, "sleep", map[string]any{"ms": 20000}},
		{"echo", false, "echo", nil},
		{"plain_request", true, "sleep", map[string]any{"ms": 20000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, setup{})
			s := c.dial(t)
			id := "close-" + tc.name
			if tc.plain {
				s.sendRaw(plainRequest(invoke(id, tc.tool, tc.args)))
			} else {
				s.send(invoke(id, tc.tool, tc.args))
				s.send(callerFrame(id, 0, "started"))
			}
			c.mustCounters(1, 0, wait)
			s.close()
			t0 := time.Now()
			if err := c.waitCounters(0, 0, atOnce); err != nil {
				t.Errorf("after closing the connection: %v", err)
			}
			t.Logf("handler gone %v after the close", time.Since(t0))
		})
	}
}

// Contract: docs/protocol.md §3 cancel; §6 item 6 (a control cancel reaches
// a child in the quiet interval at once).
// A plain request (whole input in one write) is still cancelled at once by a
// control cancel.
func testPlainRequestControlCancel(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.sendRaw(plainRequest(invoke("prc", "sleep", map[string]any{"ms": 20000})))
	c.mustCounters(1, 0, wait)
	t0 := time.Now()
	c.ctl.send(map[string]any{"t": "cancel", "call_id": "prc"})
	expectCall(t, s, "prc", "cancelled,end")
	if el := time.Since(t0); el > atOnce {
		t.Errorf("plain request: control cancel answered after %v", el)
	}
	runCall(t, s, "prc-next", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}
