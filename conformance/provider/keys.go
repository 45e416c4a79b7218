package provider

import (
	"fmt"
	"testing"
)

// Contract: docs/protocol.md §2 (duplicate keys).
// The last occurrence of a key wins. Each case writes one key of a valid
// caller chunk twice, first with another value of the right type, then the
// right one: the chunk is echoed. A first occurrence of the wrong type makes
// the frame invalid even though the last one is right (failed invalid_frame,
// §2 "Errors: two tiers").
func testDuplicateKeys(t *testing.T) {
	c := start(t, setup{})
	for i, tc := range []struct {
		key   string
		first []byte
		valid bool
	}{
		{"sequence", []byte{0x05}, true},
		{"payload", mustEncode(map[string]any{"z": 9}), true},
		{"kind", mstr("completed"), true},
		{"kind", mstr("bogus"), true},
		{"direction", mstr("provider_to_caller"), true},
		{"direction", mstr("sideways"), true},
		{"call_id", mstr("other"), true},
		{"call_id", mstr(""), true},
		{"t", mstr("bogus"), true},
		{"kind", []byte{0x05}, false},
	} {
		t.Run(fmt.Sprintf("%s=%x", tc.key, tc.first), func(t *testing.T) {
			id := fmt.Sprintf("dk%d", i)
			good := map[string][]byte{
				"t": mstr("frame"), "call_id": mstr(id), "direction": mstr("caller_to_provider"),
				"sequence": {0x01}, "kind": mstr("chunk"), "payload": mustEncode(map[string]any{"a": 1}),
			}
			order := []string{"t", "call_id", "direction", "sequence", "kind", "payload"}
			var kv [][]byte
			for _, k := range order {
				if k == tc.key {
					kv = append(kv, mstr(k), tc.first)
				}
			}
			for _, k := range order {
				kv = append(kv, mstr(k), good[k])
			}
			s := c.dial(t)
			s.send(invoke(id, "echo", nil))
			s.send(callerFrame(id, 0, "started"))
			s.sendRaw(rawPacket(rawMap(kv...), nil))
			if !tc.valid {
				expectInvalid(t, s, id)
				return
			}
			s.send(callerFrame(id, 2, "completed"))
			r := expectCall(t, s, id, "chunk,completed,end")
			if len(r.frames) > 0 && fmt.Sprint(r.frames[0].header["payload"]) != "map[a:1]" {
				t.Errorf("echoed payload %v, want the last occurrence's map[a:1]", r.frames[0].header["payload"])
			}
		})
	}
}

// Contract: docs/protocol.md §2 (duplicate keys, nested maps).
// The keys media.kind and error.code given twice, an unknown string first,
// the right value last.
func testDuplicateKeysNested(t *testing.T) {
	c := start(t, setup{})
	frameHeader := func(id, kind string, key string, nested []byte) []byte {
		return rawMap(mstr("t"), mstr("frame"), mstr("call_id"), mstr(id), mstr("direction"), mstr("caller_to_provider"),
			mstr("sequence"), []byte{1}, mstr("kind"), mstr(kind), mstr(key), nested)
	}
	t.Run("media_kind", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("dn", "echo", nil))
		s.send(callerFrame("dn", 0, "started"))
		media := rawMap(mstr("kind"), mstr("stream"), mstr("kind"), mstr("inline"), mstr("media_type"), mstr("a/b"))
		s.sendRaw(rawPacket(frameHeader("dn", "chunk", "media", media), []byte("abc")))
		s.send(callerFrame("dn", 2, "completed"))
		r := expectCall(t, s, "dn", "chunk,completed,end")
		if len(r.frames) > 0 && string(r.frames[0].att) != "abc" {
			t.Errorf("media {kind: stream, kind: inline}: attachment echoed as %q, want abc", r.frames[0].att)
		}
	})
	t.Run("error_code", func(t *testing.T) {
		s := c.dial(t)
		s.send(invoke("de", "echo", nil))
		s.send(callerFrame("de", 0, "started"))
		e := rawMap(mstr("code"), mstr("oops"), mstr("code"), mstr("provider_error"), mstr("message"), mstr("m"))
		s.sendRaw(rawPacket(frameHeader("de", "failed", "error", e), nil))
		// A valid caller failed cancels the handler: provider cancelled (§6
		// item 4, the terminal by cause); an invalid one would give invalid_frame.
		expectCall(t, s, "de", "cancelled,end")
	})
}
