package provider

import (
	"strings"
	"testing"
)

// streamProtocolErrors are packets that break docs/protocol.md §2 or arrive
// out of order on a stream connection (§6 item 6, "Call ids"): protocol
// errors (§2, "Errors: two tiers"); id is the call running on the
// connection, if any.
func streamProtocolErrors() []struct {
	name  string
	bytes func(id string) []byte
} {
	pl := map[string]any{"a": 1}
	return []struct {
		name  string
		bytes func(id string) []byte
	}{
		{"H0", func(string) []byte { return prefix(0, 0) }},
		{"H_over_max", func(string) []byte { return prefix(defaultMaxHeader+1, 0) }},
		{"H_huge", func(string) []byte { return prefix(0xffffffff, 0) }},
		{"A_over_max", func(id string) []byte {
			h := mustEncode(with(callerFrame(id, 1, "chunk"), "media", inlineMedia("a/b")))
			return append(prefix(uint32(len(h)), defaultMaxAttachment+1), h...)
		}},
		{"header_array", func(string) []byte { return rawPacket(mustEncode([]any{"t", "frame"}), nil) }},
		{"header_string", func(string) []byte { return rawPacket(mustEncode("frame"), nil) }},
		{"header_two_maps", func(id string) []byte {
			h := mustEncode(callerChunk(id, 1, pl))
			return rawPacket(append(h, h...), nil)
		}},
		{"trailing_byte", func(id string) []byte {
			return rawPacket(append(mustEncode(callerChunk(id, 1, pl)), 0xc0), nil)
		}},
		{"truncated_map", func(id string) []byte {
			h := mustEncode(callerChunk(id, 1, pl))
			return rawPacket(h[:len(h)-2], nil)
		}},
		{"int_key", func(id string) []byte {
			return rawPacket(rawMap(mstr("t"), mstr("frame"), mstr("call_id"), mstr(id), []byte{0x07}, mstr("x")), nil)
		}},
		{"nil_key", func(string) []byte { return rawPacket(rawMap(mstr("t"), mstr("frame"), []byte{0xc0}, mstr("x")), nil) }},
		{"bin_key", func(id string) []byte {
			return rawPacket(rawMap([]byte{0xc4, 1, 't'}, mstr("frame"), mstr("call_id"), mstr(id)), nil)
		}},
		{"unknown_t", func(id string) []byte { return encodePacket(map[string]any{"t": "bogus", "call_id": id}, nil) }},
		{"t_wrong_case", func(id string) []byte { return encodePacket(with(callerChunk(id, 1, pl), "t", "Frame"), nil) }},
		{"t_missing", func(id string) []byte { return encodePacket(with(callerChunk(id, 1, pl), "t", removed), nil) }},
		{"t_int", func(id string) []byte { return encodePacket(with(callerChunk(id, 1, pl), "t", 3), nil) }},
		{"control_packet", func(string) []byte { return encodePacket(map[string]any{"t": "ping", "nonce": 1}, nil) }},
		{"end_from_host", func(id string) []byte { return encodePacket(map[string]any{"t": "end", "call_id": id}, nil) }},
		{"attachment_on_payload_chunk", func(id string) []byte { return encodePacket(callerChunk(id, 1, pl), []byte("xyz")) }},
		{"attachment_on_blob_chunk", func(id string) []byte {
			return encodePacket(with(callerFrame(id, 1, "chunk"), "media", map[string]any{"kind": "blob", "blob_id": "b",
				"size_bytes": 3, "sha256": strings.Repeat("a", 64), "media_type": "x/y"}), []byte("xyz"))
		}},
		{"attachment_on_completed", func(id string) []byte { return encodePacket(callerFrame(id, 1, "completed"), []byte("xyz")) }},
		{"attachment_on_invoke", func(id string) []byte { return encodePacket(invoke(id+"-2", "echo", nil), []byte("xyz")) }},
	}
}

// Contract: docs/protocol.md §2 (attachment; "Errors: two tiers"), §6 "Call ids".
// The child closes the connection, on an idle connection and in the middle
// of a call alike, without writing anything (a protocol error owes no frame;
// an invalid frame would); the child and its other connections go on.
func testStreamProtocolErrors(t *testing.T) {
	c := start(t, setup{})
	for _, phase := range []string{"idle", "midcall"} {
		t.Run(phase, func(t *testing.T) {
			for _, tc := range streamProtocolErrors() {
				t.Run(tc.name, func(t *testing.T) {
					s := c.dial(t)
					// An id of its own: the previous case's call may still be
					// ending after its connection closed, and an invoke of an
					// id running elsewhere is itself a protocol error (§6
					// "Call ids").
					id := "pe-" + phase + "-" + tc.name
					if phase == "midcall" {
						s.send(probeInvoke(id))
						s.send(callerFrame(id, 0, "started"))
					}
					s.sendRaw(tc.bytes(id))
					if err := s.expectClosedAfter(id, wait); err != nil {
						t.Error(err)
					}
				})
			}
		})
	}
	if err := c.waitCounters(0, 0, atOnce); err != nil {
		t.Errorf("after the protocol errors: %v", err)
	}
	runProbe(t, c.dial(t), "after")
}

// Contract: docs/protocol.md §2 (lengths checked before reading).
// Lengths are checked before anything is read: a prefix over max_header
// alone, with no header after it, closes the connection. Exactly max_header
// and exactly max_attachment are taken.
func testLengthsCheckedBeforeReading(t *testing.T) {
	c := start(t, setup{})
	t.Run("prefix_only", func(t *testing.T) {
		s := c.dial(t)
		s.sendRaw(prefix(defaultMaxHeader+1, 0))
		if err := s.expectClosed(wait); err != nil {
			t.Errorf("a prefix declaring %d header bytes, and nothing after it: %v", defaultMaxHeader+1, err)
		}
	})
	t.Run("header_exactly_max", func(t *testing.T) {
		s := c.dial(t)
		s.sendRaw(rawPacket(padTo(t, probeInvoke("big"), defaultMaxHeader), nil))
		s.send(callerFrame("big", 0, "started"))
		s.send(callerFrame("big", 1, "completed"))
		expectProbe(t, s, "big")
	})
	t.Run("attachment_exactly_max", func(t *testing.T) {
		needTools(t, "echo")
		s := c.dial(t)
		s.send(invoke("bigatt", "echo", nil))
		s.send(callerFrame("bigatt", 0, "started"))
		att := make([]byte, defaultMaxAttachment)
		att[0], att[len(att)-1] = 1, 2
		pkt := encodePacket(with(callerFrame("bigatt", 1, "chunk"), "media", inlineMedia("a/b")), att)
		pkt = append(pkt, encodePacket(callerFrame("bigatt", 2, "completed"), nil)...)
		// The echo comes back while the request is still being written.
		written := make(chan error, 1)
		go func() { written <- s.writeRaw(pkt) }() // stopped by the write's deadline
		r := expectCall(t, s, "bigatt", "chunk,completed,end")
		if err := <-written; err != nil {
			t.Errorf("writing a %d-byte attachment: %v", len(att), err)
		}
		if len(r.frames) > 0 {
			if got := r.frames[0].att; len(got) != len(att) || got[0] != 1 || got[len(got)-1] != 2 {
				t.Errorf("%d-byte attachment echoed as %d bytes", len(att), len(got))
			}
		}
	})
}
