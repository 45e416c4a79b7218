package provider

import (
	"strings"
	"testing"
)

// Contract: docs/protocol.md §2 (effective limits).
// With smaller effective limits in startup the child refuses a header or
// attachment over them (a protocol error: the connection closes, nothing is
// written), takes one of exactly the limit, and never writes over them
// itself.
func testEffectiveLimits(t *testing.T) {
	const maxHeader, maxAttachment = 2048, 4096
	c := start(t, setup{limits: map[string]any{"max_header": maxHeader, "max_attachment": maxAttachment}})
	t.Run("header_over", func(t *testing.T) {
		s := c.dial(t)
		s.sendRaw(rawPacket(padTo(t, invoke("big", "count", map[string]any{"n": 1}), maxHeader+1), nil))
		if err := s.expectClosed(wait); err != nil {
			t.Errorf("a %d-byte header, effective max_header %d: %v", maxHeader+1, maxHeader, err)
		}
	})
	t.Run("header_exact", func(t *testing.T) {
		s := c.dial(t)
		s.sendRaw(rawPacket(padTo(t, invoke("big", "count", map[string]any{"n": 1}), maxHeader), nil))
		s.send(callerFrame("big", 0, "started"))
		s.send(callerFrame("big", 1, "completed"))
		expectCall(t, s, "big", "chunk,completed,end")
	})
	t.Run("attachment_over", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("att", "echo", nil))
		s.send(callerFrame("att", 0, "started"))
		s.sendAtt(with(callerFrame("att", 1, "chunk"), "media", inlineMedia("a/b")), make([]byte, maxAttachment+1))
		if err := s.expectClosed(wait); err != nil {
			t.Errorf("a %d-byte attachment, effective max_attachment %d: %v", maxAttachment+1, maxAttachment, err)
		}
	})
	t.Run("attachment_exact", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("att2", "echo", nil))
		s.send(callerFrame("att2", 0, "started"))
		s.sendAtt(with(callerFrame("att2", 1, "chunk"), "media", inlineMedia("a/b")), make([]byte, maxAttachment))
		s.send(callerFrame("att2", 2, "completed"))
		r := expectCall(t, s, "att2", "chunk,completed,end")
		if len(r.frames) > 0 && len(r.frames[0].att) != maxAttachment {
			t.Errorf("a %d-byte attachment echoed as %d bytes", maxAttachment, len(r.frames[0].att))
		}
	})
	// Output that would break the limits: the call must still end well
	// (any terminal, then end), with every packet within them.
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
	}{
		{"count_big_chunks", "count", map[string]any{"n": 2, "size": 3000}},
		{"media_big_chunks", "media", map[string]any{"bytes": 10000, "chunk": 8192}},
		{"fail_1900", "fail", map[string]any{"message": strings.Repeat("m", 1900)}},
		{"fail_1960", "fail", map[string]any{"message": strings.Repeat("m", 1960)}},
	} {
		t.Run("writes_"+tc.name, func(t *testing.T) {
			s := c.dial(t)
			r := runCall(t, s, tc.name, tc.tool, tc.args, nil, "")
			for _, f := range r.frames {
				if len(f.rawHeader) > maxHeader {
					t.Errorf("the child wrote a %d-byte header (effective max_header %d)", len(f.rawHeader), maxHeader)
				}
				if len(f.att) > maxAttachment {
					t.Errorf("the child wrote a %d-byte attachment (effective max_attachment %d)", len(f.att), maxAttachment)
				}
			}
			if r.terminal() == nil || r.end == nil {
				t.Errorf("%s: %q, want a terminal and end", tc.name, r.outcomes())
			}
		})
	}
}

// Contract: docs/protocol.md §2 (Limits: the defaults).
// A startup without limits leaves the defaults in force.
func testStartupLimitsAbsent(t *testing.T) {
	c, _ := readHello(t, nil)
	c.ctl.send(with(startupPacket(1), "limits", removed))
	c.ping(5)
	s := c.dial(t)
	s.sendRaw(rawPacket(padTo(t, probeInvoke("d"), defaultMaxHeader), nil))
	s.send(callerFrame("d", 0, "started"))
	s.send(callerFrame("d", 1, "completed"))
	expectProbe(t, s, "d")
	s2 := c.dial(t)
	s2.sendRaw(prefix(defaultMaxHeader+1, 0))
	if err := s2.expectClosed(wait); err != nil {
		t.Errorf("%d-byte header with the default limits: %v", defaultMaxHeader+1, err)
	}
}

// Contract: docs/protocol.md §2 (effective limits: the smaller of both sides').
// The effective limits are the smaller of the two sides'. A startup offering
// more than hello did (a host bug) leaves the child's own limit in force.
func testStartupLimitsAboveHello(t *testing.T) {
	c := start(t, setup{limits: map[string]any{"max_header": 1 << 20, "max_attachment": 1 << 26}})
	lim, _ := c.hello.header["limits"].(map[string]any)
	own := asInt(lim["max_header"])
	if own <= 0 {
		own = defaultMaxHeader // docs/protocol.md §2: missing means the default
	}
	if own >= 1<<20 {
		t.Skipf("hello offers max_header %d: nothing above it to test", own)
	}
	s := c.dial(t)
	// Refused at its prefix: the invoke's tool need not exist.
	s.sendRaw(rawPacket(padTo(t, invoke("hb", "count", map[string]any{"n": 1}), int(own)+1), nil))
	if err := s.expectClosed(wait); err != nil {
		t.Errorf("a %d-byte header after hello offered max_header %d and startup 1 MiB: %v", own+1, own, err)
	}
}
