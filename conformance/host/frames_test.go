package hostconf

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWellBehavedCall checks a call against a child that keeps every rule:
// the provider started first, the chunks in order, the child's own
// terminal (docs/protocol.md §4, §5, §6 item 1 "It gives its caller the
// provider `started` when the invoke is written"), the caller's started
// (0) and terminal on the wire (§6 item 1), and shutdown by drain, bye and
// exit with no signal (§7 "Shutdown").
func TestWellBehavedCall(t *testing.T) {
	t.Parallel()
	res := runCall(t, "ok", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	checkChunks(t, res, 0, 1)
	if n := payloadNum(res.terminal().Payload, "n"); n != 2 {
		assert.Fail(t, fmt.Sprintf("result n = %d, want 2", n))
	}
	inv, ok := res.first(t, "invoke", nil)
	if !ok {
		return
	}
	// §6 item 1: caller started (0) then exactly one caller terminal.
	var caller []string
	for _, e := range res.find("recv", ofConn(inv.Child, inv.num("conn"))) {
		if e.str("t") == "frame" && e.str("call_id") == inv.str("call_id") {
			caller = append(caller, fmt.Sprintf("%s/%s/%d", e.str("kind"), e.str("direction"), e.num("sequence")))
		}
	}
	if want := []string{"started/caller_to_provider/0", "completed/caller_to_provider/1"}; strings.Join(caller, " ") != strings.Join(want, " ") {
		assert.Fail(t, fmt.Sprintf("caller frames on the wire %v, want %v", caller, want))
	}
	if inv.str("call_id") != res.terminal().CallID {
		assert.Fail(t, fmt.Sprintf("invoke call_id %q, printed call_id %q", inv.str("call_id"), res.terminal().CallID))
	}
	// §7 "Shutdown": drain, then bye, then the child exits by itself.
	if _, ok := res.first(t, "drain", nil); !ok {
		return
	}
	if _, ok := res.first(t, "bye", nil); !ok {
		return
	}
	if ex, ok := res.first(t, "exit", nil); ok && ex.num("code") != 0 {
		assert.Fail(t, fmt.Sprintf("child exit %d (%s), want 0 after bye", ex.num("code"), ex.str("why")))
	}
	if sigs := res.find("signal", nil); len(sigs) > 0 {
		assert.Fail(t, fmt.Sprintf("a child that said bye and exited got signals: %v", sigs[0].F))
	}
}

// violation is one invalid-frame case of TestInvalidProviderFrames.
type violation struct {
	mode   string
	args   []string // extra skulk-host arguments
	secret string   // a value that must appear in no output
}

// TestInvalidProviderFrames runs one child per broken provider frame or
// packet, each sent after two good chunks and before any terminal.
// docs/protocol.md §7 "Provider frames that break the rules": a provider
// frame or packet that breaks the rules before the provider terminal gives
// the caller a synthetic failed invalid_frame, and the connection is
// closed. The terminal carries the next sequence, 3 (§7, synthetic
// terminals); exit status 15 (docs/cli.md). §7 "Closing a connection whose
// handler may still run": the close comes with a control cancel.
func TestInvalidProviderFrames(t *testing.T) {
	t.Parallel()
	cases := []violation{
		{mode: "gap"},                     // §4.2 fence: sequence above the expected one
		{mode: "duplicate"},               // §4.2 fence: sequence below it (replay)
		{mode: "started_again"},           // §4.2: the host owns the provider started; the child starts at 1
		{mode: "started_nonzero"},         // §4.2: sequence is 0 exactly when kind is started
		{mode: "negative_sequence"},       // §3: sequence is a uint64
		{mode: "stale_call"},              // §4.2 fence: a frame of another call
		{mode: "wrong_direction"},         // §4.2 fence: a frame of the other direction
		{mode: "synthetic_chunk"},         // §4.4: synthetic frames never travel on the wire
		{mode: "synthetic_terminal"},      // §4.4: synthetic frames never travel on the wire
		{mode: "empty_chunk"},             // §4.1 shape: chunk has payload or media
		{mode: "failed_no_error"},         // §4.1 shape: failed requires error
		{mode: "failed_code_cancelled"},   // §4.1 shape: failed code ≠ cancelled
		{mode: "unknown_error_code"},      // §3: error code is one of six
		{mode: "cancelled_wrong_code"},    // §4.1 shape: cancelled code = cancelled
		{mode: "completed_with_error"},    // §4.1 shape: completed has no error
		{mode: "completed_with_media"},    // §4.1 shape: completed has no media
		{mode: "unknown_kind"},            // §3 frame: an unknown kind
		{mode: "payload_not_map"},         // §4.3: a payload that is not a map
		{mode: "message_too_long"},        // §3: error.message ≤ 2,048 characters
		{mode: "message_bad_utf8"},        // §3: error.message valid UTF-8
		{mode: "call_id_too_long"},        // §3: call_id 1..128 characters
		{mode: "blob_bad_sha256"},         // §3: sha256 matches ^[a-f0-9]{64}$
		{mode: "blob_negative_size"},      // §3: blob size_bytes ≥ 0
		{mode: "inline_sample_rate_zero"}, // §3: sample_rate > 0, an explicit 0 is invalid
		{mode: "inline_negative_time"},    // §3: timestamp_seconds ≥ 0
		{mode: "inline_data_key"},         // §2, §3: an inline media map has no data key
		{mode: "output_schema", args: []string{"-v"}, secret: "SECRET-OUT-VALUE"},    // §7 "Schemas": output_schema on receipt; never the value
		{mode: "result_schema", args: []string{"-v"}, secret: "SECRET-RESULT-VALUE"}, // §7 "Schemas": result_schema on receipt; never the value
		{mode: "header_length_zero"},      // §2: 1 ≤ H
		{mode: "header_length_huge"},      // §2: H checked against max_header before reading
		{mode: "header_over_limit"},       // §2: H ≤ max_header (65,536 by default)
		{mode: "attachment_over_limit"},   // §2: A ≤ max_attachment, checked before reading
		{mode: "small_limits_header"},     // §2: the effective max_header is the smaller side's
		{mode: "small_limits_attachment"}, // §2: the effective max_attachment is the smaller side's
		{mode: "unknown_type"},            // §2: an unknown t is a protocol error
		{mode: "missing_type"},            // §2: a missing t is a protocol error
		{mode: "non_string_key"},          // §2: a non-string header key
		{mode: "header_not_map"},          // §2: the header is exactly one msgpack map
		{mode: "header_trailing_bytes"},   // §2: no bytes after the header's map
		{mode: "attachment_not_inline"},   // §2: an attachment on anything but an inline-media frame
		{mode: "end_before_terminal"},     // §3: end only after the provider terminal (out of order)
		{mode: "invoke_from_child"},       // §3: the child sends frames and end only
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t", tc.args...)
			res.expect(t, outcome{rc: 15, frames: 4, kind: "failed", code: "invalid_frame", synthetic: true})
			checkChunks(t, res, 0, 1)
			checkAbandoned(t, res)
			if v, ok := res.first(t, "violation", nil); ok && len(res.frames) > 0 {
				if d := res.terminal().At.Sub(v.At); d > prompt {
					assert.Fail(t, fmt.Sprintf("synthetic terminal %v after the violation, want it promptly (within %v)", d, prompt))
				}
			}
			assert.Falsef(t, tc.secret != "" && (strings.Contains(res.stderr, tc.secret) || strings.Contains(linesText(res), tc.secret)), "the output shows the offending value %q (docs/protocol.md §7 \"Schemas\": describe the value, never print it)", tc.secret)
		})
	}
}

// TestValidEdgeFrames runs children whose frames are unusual but valid: the
// host must pass them on as the child's own, not refuse them.
func TestValidEdgeFrames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode  string
		want  outcome
		check func(t *testing.T, res *result)
	}{
		// §2 "Unknown keys are ignored" (bin, map, ext); nil optional keys; §3 synthetic false is allowed.
		{mode: "extra_keys", want: outcome{rc: 0, frames: 5, kind: "completed"}, check: func(t *testing.T, res *result) {
			checkChunks(t, res, 0, 1, 2)
		}},
		// §2 1 ≤ H ≤ max_header: a header of exactly 65,536 bytes passes.
		{mode: "header_at_limit", want: outcome{rc: 0, frames: 5, kind: "completed"}, check: func(t *testing.T, res *result) {
			checkChunks(t, res, 0, 1, 2)
			if n, ok := res.first(t, "note", nil); ok && n.num("header_bytes") != 65536 {
				assert.Fail(t, fmt.Sprintf("the header was %d bytes, not 65,536: the case tests nothing", n.num("header_bytes")))
			}
		}},
		// §2 0 ≤ A ≤ max_attachment: an attachment of exactly 16,777,216 bytes passes.
		{mode: "attachment_at_limit", want: outcome{rc: 0, frames: 5, kind: "completed"}, check: func(t *testing.T, res *result) {
			if len(res.frames) != 5 {
				return
			}
			data, _ := res.frames[3].Media["data"].(map[string]any)
			if numOf(data["size"]) != 16777216 {
				assert.Fail(t, fmt.Sprintf("frame 3 media %v, want 16,777,216 bytes of data", res.frames[3].Media))
			}
		}},
		// docs/protocol.md §2 "Numbers": any integer encoding that holds the value.
		{mode: "wide_integers", want: outcome{rc: 0, frames: 6, kind: "completed"}, check: func(t *testing.T, res *result) {
			checkChunks(t, res, 0, 1, 2, 3)
		}},
		// §2 an inline frame with A = 0 has empty data; §3 blob size 0; §4.1 completed payload optional.
		{mode: "empty_media", want: outcome{rc: 0, frames: 6, kind: "completed"}, check: func(t *testing.T, res *result) {
			if len(res.frames) != 6 {
				return
			}
			inline, blob := res.frames[3].Media, res.frames[4].Media
			data, _ := inline["data"].(map[string]any)
			assert.Falsef(t, inline["kind"] != "inline" || numOf(data["size"]) != 0, "frame 3 media %v, want inline with data.size 0", inline)
			assert.Falsef(t, blob["kind"] != "blob" || numOf(blob["size_bytes"]) != 0 || blob["blob_id"] != "b1", "frame 4 media %v, want the blob b1 of size 0", blob)
			if res.frames[5].Payload != nil {
				assert.Fail(t, fmt.Sprintf("completed payload %v, want null", res.frames[5].Payload))
			}
		}},
		// docs/protocol.md §3 Error: an absent error.message is empty. Exit 14 (docs/cli.md).
		{mode: "failed_no_message", want: outcome{rc: 14, frames: 4, kind: "failed", code: "timeout"}},
		// §4.1 shape: the error of cancelled is optional. Exit 13.
		{mode: "cancelled_bare", want: outcome{rc: 13, frames: 4, kind: "cancelled"}},
		// docs/protocol.md §2: duplicate keys, the last wins.
		{mode: "duplicate_keys", want: outcome{rc: 0, frames: 5, kind: "completed"}, check: func(t *testing.T, res *result) {
			checkChunks(t, res, 0, 1, 2)
		}},
		// §3 error.message ≤ 2,048 characters, characters are code points: 2,048 "é" (4,096 bytes) pass. Exit 10.
		{mode: "message_2048", want: outcome{rc: 10, frames: 4, kind: "failed", code: "provider_error"}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t")
			res.expect(t, tc.want)
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

// TestQuietInterval checks docs/protocol.md §6 item 6, the quiet interval: between its
// caller terminal and the child's end the host sends nothing on the
// connection (the child watches for 300 ms after its completed).
func TestQuietInterval(t *testing.T) {
	t.Parallel()
	res := runCall(t, "quiet", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	if q, ok := res.first(t, "quiet", nil); ok {
		if q.str("caller_terminal") != "completed" {
			assert.Fail(t, fmt.Sprintf("the child saw %q before its terminal, want the caller's completed", q.str("caller_terminal")))
		}
		if n := q.num("packets"); n != 0 {
			assert.Fail(t, fmt.Sprintf("the host sent %d packets in the quiet interval, want 0", n))
		}
	}
}

// checkChunks checks that frames 1.. are chunks with payload {"i": want[k]}.
func checkChunks(t *testing.T, res *result, want ...int64) {
	t.Helper()
	for k, i := range want {
		if k+1 >= len(res.frames) {
			assert.Fail(t, fmt.Sprintf("chunk %d missing", k+1))
			return
		}
		f := res.frames[k+1]
		assert.Falsef(t, f.Kind != "chunk" || payloadNum(f.Payload, "i") != i, "frame %d: %s %v, want chunk {\"i\":%d}", k+1, f.Kind, f.Payload, i)
	}
}

// checkAbandoned checks that the host closed the call's stream connection
// and sent a control cancel for the call (docs/protocol.md §7 "Closing a
// connection whose handler may still run").
func checkAbandoned(t *testing.T, res *result) {
	t.Helper()
	inv, ok := res.first(t, "invoke", nil)
	if !ok {
		return
	}
	if len(res.find("conn_eof", ofConn(inv.Child, inv.num("conn")))) == 0 {
		assert.Fail(t, fmt.Sprintf("the host never closed stream connection %d", inv.num("conn")))
	}
	if len(res.find("cancel", ofCall(inv.str("call_id")))) == 0 {
		assert.Fail(t, fmt.Sprintf("no control cancel for call %s, whose connection the host closed (docs/protocol.md §7 \"Closing a connection whose handler may still run\")", inv.str("call_id")))
	}
}

// payloadNum reads a number of a payload (-1 when absent).
func payloadNum(p map[string]any, k string) int64 { return numOf(p[k]) }

// numOf reads a JSON number decoded with UseNumber (-1 when it is none).
func numOf(v any) int64 {
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i
		}
	}
	return -1
}

// linesText is the whole standard output.
func linesText(res *result) string {
	var b strings.Builder
	for _, l := range res.lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}
