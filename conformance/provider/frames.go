package provider

import (
	"strings"
	"testing"
	"time"
)

// Contract: docs/protocol.md §2 (attachment; "Errors: two tiers"), §3
// (frame, inline media, error), §4.
// A caller frame that parses but breaks a rule ends the call with failed
// invalid_frame and end, then the child closes the connection.
func testInvalidCallerFrames(t *testing.T) {
	const id = "inv"
	st := callerFrame(id, 0, "started")
	inl := func(extra ...any) map[string]any { return with(inlineMedia("audio/pcm"), extra...) }
	blob := func(extra ...any) map[string]any {
		return with(map[string]any{"kind": "blob", "blob_id": "b", "size_bytes": 1, "sha256": strings.Repeat("a", 64), "media_type": "x/y"}, extra...)
	}
	perr := func(msg string) map[string]any { return map[string]any{"code": "provider_error", "message": msg} }
	deep := map[string]any{}
	for cur, i := deep, 0; i < 70; i++ { // 71 levels, the limit is 64
		n := map[string]any{}
		cur["d"] = n
		cur = n
	}
	pl := map[string]any{"a": 1}
	chunk := func() map[string]any { return callerFrame(id, 1, "chunk") }
	for _, tc := range []struct {
		name string
		pre  []map[string]any // valid caller frames written first
		bad  map[string]any
		att  []byte
	}{
		// §4.2 sequence fence
		{name: "first_frame_chunk_gap", bad: callerChunk(id, 1, pl)},
		{name: "gap", pre: []map[string]any{st}, bad: callerChunk(id, 3, pl)},
		{name: "duplicate_sequence", pre: []map[string]any{st, callerChunk(id, 1, pl)}, bad: callerChunk(id, 1, pl)},
		{name: "duplicate_started", pre: []map[string]any{st}, bad: callerFrame(id, 0, "started")},
		{name: "stale_call", pre: []map[string]any{st}, bad: callerChunk("other-call", 1, pl)},
		{name: "wrong_direction", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "direction", "provider_to_caller")},
		// §4.1 lifecycle shape
		{name: "started_sequence_1", bad: callerFrame(id, 1, "started")},
		{name: "chunk_sequence_0", bad: callerChunk(id, 0, pl)},
		{name: "started_with_payload", bad: with(callerFrame(id, 0, "started"), "payload", pl)},
		{name: "chunk_empty", pre: []map[string]any{st}, bad: chunk()},
		{name: "chunk_with_error", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "error", perr("x"))},
		{name: "completed_with_media", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "completed"), "media", inl())},
		{name: "completed_with_error", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "completed"), "error", perr("x"))},
		{name: "failed_without_error", pre: []map[string]any{st}, bad: callerFrame(id, 1, "failed")},
		{name: "failed_code_cancelled", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", map[string]any{"code": "cancelled", "message": "x"})},
		{name: "failed_with_payload", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", perr("x"), "payload", pl)},
		{name: "cancelled_code_timeout", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "cancelled"), "error", map[string]any{"code": "timeout", "message": "x"})},
		{name: "cancelled_code_provider_error", pre: []map[string]any{st, callerChunk(id, 1, pl)}, bad: with(callerFrame(id, 2, "cancelled"), "error", map[string]any{"code": "provider_error"})},
		{name: "cancelled_with_payload", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "cancelled"), "payload", pl)},
		// §3 frame, §4.4: unknown kind or direction, payload not a map, synthetic true
		{name: "unknown_kind", pre: []map[string]any{st}, bad: callerFrame(id, 1, "progress")},
		{name: "unknown_direction", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "direction", "sideways")},
		{name: "payload_array", pre: []map[string]any{st}, bad: with(chunk(), "payload", []any{1, 2})},
		{name: "payload_string", pre: []map[string]any{st}, bad: with(chunk(), "payload", "text")},
		{name: "synthetic_true", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "synthetic", true)},
		{name: "synthetic_true_on_started", bad: with(callerFrame(id, 0, "started"), "synthetic", true)},
		{name: "synthetic_true_on_terminal", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "cancelled"), "synthetic", true)},
		// docs/protocol.md §4.3: payloads have a JSON form
		{name: "payload_bin_value", pre: []map[string]any{st}, bad: with(chunk(), "payload", map[string]any{"b": []byte{1, 2}})},
		{name: "payload_too_deep", pre: []map[string]any{st}, bad: with(chunk(), "payload", deep)},
		{name: "payload_invalid_utf8", pre: []map[string]any{st}, bad: with(chunk(), "payload", map[string]any{"s": "a\xffb"})},
		{name: "payload_int_key", pre: []map[string]any{st}, bad: with(chunk(), "payload", map[int]any{1: "x"})},
		// §3 field constraints
		{name: "sequence_negative", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "sequence", -1)},
		{name: "sequence_missing", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "sequence", removed)},
		{name: "sequence_string", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "sequence", "1")},
		{name: "call_id_129", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "call_id", strings.Repeat("x", 129))},
		{name: "call_id_empty", pre: []map[string]any{st}, bad: with(callerChunk(id, 1, pl), "call_id", "")},
		{name: "error_message_2049", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", perr(strings.Repeat("ü", 2049)))},
		{name: "error_message_invalid_utf8", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", perr("a\xc3"))},
		{name: "error_code_unknown", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", map[string]any{"code": "oops", "message": "x"})},
		{name: "error_code_missing", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "failed"), "error", map[string]any{"message": "x"})},
		{name: "media_type_257", pre: []map[string]any{st}, bad: with(chunk(), "media", inlineMedia(strings.Repeat("a", 257)))},
		{name: "media_type_empty", pre: []map[string]any{st}, bad: with(chunk(), "media", inlineMedia(""))},
		{name: "media_sample_rate_0", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("sample_rate", 0))},
		{name: "media_channels_negative", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("channels", -1))},
		{name: "media_timestamp_negative", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("timestamp_seconds", -0.5))},
		{name: "media_duration_negative", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("duration_seconds", -1))},
		{name: "media_kind_unknown", pre: []map[string]any{st}, bad: with(chunk(), "media", map[string]any{"kind": "stream", "media_type": "a/b"})},
		{name: "blob_sha256_upper_case", pre: []map[string]any{st}, bad: with(chunk(), "media", blob("sha256", strings.Repeat("A", 64)))},
		{name: "blob_sha256_short", pre: []map[string]any{st}, bad: with(chunk(), "media", blob("sha256", strings.Repeat("a", 63)))},
		{name: "blob_size_negative", pre: []map[string]any{st}, bad: with(chunk(), "media", blob("size_bytes", -1))},
		{name: "blob_id_empty", pre: []map[string]any{st}, bad: with(chunk(), "media", blob("blob_id", ""))},
		// §3 inline media: a data key in media; §2 attachment: an invalid inline
		// frame has its attachment read, so the answer stays in step
		{name: "media_data_key", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("data", []byte{1, 2}))},
		{name: "media_data_key_with_attachment", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("data", []byte{1, 2})), att: []byte{1, 2, 3}},
		{name: "invalid_inline_with_attachment", pre: []map[string]any{st}, bad: with(chunk(), "media", inl("sample_rate", 0)), att: []byte("abc")},
		{name: "completed_with_inline_attachment", pre: []map[string]any{st}, bad: with(callerFrame(id, 1, "completed"), "media", inlineMedia("a/b")), att: []byte("abcdef")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, setup{})
			s := c.dial(t)
			s.send(invoke(id, "echo", nil))
			for _, f := range tc.pre {
				s.send(f)
			}
			s.sendAtt(tc.bad, tc.att)
			expectInvalid(t, s, id)
			if err := c.waitCounters(0, 0, atOnce); err != nil {
				t.Errorf("after the invalid frame's end: %v", err)
			}
		})
	}
}

// Contract: docs/protocol.md §2-§4 (§2 Numbers and Optional keys).
// Frames at the edge of the rules are valid: synthetic false, nil optionals,
// unknown keys (even bin), a nil data key, seconds as integers and float32,
// a zero-size blob, a caller cancelled carrying error code cancelled.
func testValidEdgeFrames(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	id := "ok"
	s.send(invoke(id, "echo", nil))
	s.send(with(callerFrame(id, 0, "started"), "synthetic", false, "payload", nil, "media", nil, "error", nil, "zz_unknown", []byte{1}))
	s.send(with(callerChunk(id, 1, map[string]any{"a": 1}), "synthetic", false, "extra", map[string]any{"q": 1}))
	s.send(with(callerFrame(id, 2, "chunk"), "media", with(inlineMedia("a/b"), "data", nil, "sample_rate", nil, "zz", 1)))
	s.send(with(callerFrame(id, 3, "chunk"), "media", with(inlineMedia("a/b"), "timestamp_seconds", 0, "duration_seconds", float32(0.5))))
	s.send(with(callerFrame(id, 4, "chunk"), "media", map[string]any{"kind": "blob", "blob_id": "x", "size_bytes": 0, "sha256": strings.Repeat("0", 64), "media_type": "a/b"}))
	s.send(callerFrame(id, 5, "completed"))
	expectCall(t, s, id, "chunk,chunk,chunk,chunk,completed,end")

	id = "ok2"
	s.send(invoke(id, "echo", nil))
	s.send(callerFrame(id, 0, "started"))
	s.send(with(callerFrame(id, 1, "cancelled"), "error", map[string]any{"code": "cancelled", "message": "bye"}))
	expectCall(t, s, id, "cancelled,end")

	runCall(t, s, "ok3", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
}

// Contract: docs/protocol.md §6 item 2 (frames checked before queued).
// Frames are checked (shape, fence) before they are queued, so a bad frame
// is refused at once even when the handler never reads its input.
func testFramesCheckedBeforeQueued(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.send(invoke("cbq", "sleep", map[string]any{"ms": 20000})) // sleep reads no input
	s.send(callerFrame("cbq", 0, "started"))
	s.send(callerChunk("cbq", 1, map[string]any{"a": 1}))
	t0 := time.Now()
	s.send(callerChunk("cbq", 5, map[string]any{"a": 1})) // a gap
	expectInvalid(t, s, "cbq")
	if el := time.Since(t0); el > atOnce {
		t.Errorf("an invalid frame to a handler that does not read refused after %v", el)
	}
}
