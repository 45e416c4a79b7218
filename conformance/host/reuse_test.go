package hostconf

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// benchArgs make `skulk-host bench` a few small calls: a warm-up, one count
// of 10 chunks, one media call, 3 sequential calls, 2 concurrent ones.
var benchArgs = []string{"bench", "--frames", "10", "--media", "1000", "--calls", "3", "--streams", "2"}

// TestConnectionNotReused runs `skulk-host bench` against children whose
// first call misbehaves after its terminal or withholds its end. The
// outcome stands (every call completes: exit status 0) and the connection
// of that first call is closed and never carries another call
// (docs/protocol.md §7 "Provider frames that break the rules": "the
// connection is closed and never reused"; §6 item 7 for a missing end).
func TestConnectionNotReused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode   string
		closed bool // the host must also have closed the connection before the child exited
	}{
		{"after_terminal_chunk", true},        // §7: a frame after the terminal
		{"after_terminal_completed", true},    // §7: a second terminal
		{"after_terminal_garbage", true},      // §7: a packet that breaks §2 after it
		{"after_terminal_unknown_type", true}, // §7: an unknown t after it
		{"no_end", false},                     // §6 item 7: no end, so closed instead of reused
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := start(t, tc.mode, opts{}, benchArgs...).wait()
			assert.EqualValuesf(t, 0, res.rc, "bench exit status %d, want 0 (every call completed)", res.rc)
			first, ok := res.first(t, "invoke", func(e event) bool { return e.num("k") == 1 })
			if !ok {
				res.dump(t)
				return
			}
			invokes := res.find("invoke", nil)
			assert.Falsef(t, len(invokes) < 3, "only %d calls reached the child: the case tests nothing", len(invokes))
			on := res.find("invoke", ofConn(first.Child, first.num("conn")))
			if len(on) != 1 {
				assert.Fail(t, fmt.Sprintf("stream connection %d carried %d calls, want only the misbehaving one", first.num("conn"), len(on)))
			}
			if tc.closed && len(res.find("conn_eof", ofConn(first.Child, first.num("conn")))) == 0 {
				assert.Fail(t, fmt.Sprintf("the host did not close stream connection %d", first.num("conn")))
			}
			if t.Failed() {
				res.dump(t)
			}
		})
	}
}

// TestMaxStreams runs `skulk-host bench` with 8 concurrent streams against
// children that announce max_streams 1 and 2 and hold each call 50 ms:
// docs/protocol.md §7 "Streams": "Never run more than `max_streams` calls
// on one child at once". The child counts a call from its invoke to
// its end, so a host that frees the slot at the terminal, before the end,
// is caught too (§7 "Streams": "A stream slot is held until the call's
// `end`").
func TestMaxStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		max  int64
	}{
		{"max_streams_1", 1},          // §7 "Streams": max_streams
		{"max_streams_2", 2},          // §7 "Streams": max_streams
		{"max_streams_1_late_end", 1}, // docs/protocol.md §7 "Streams": the slot is held until end, not the terminal
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := start(t, tc.mode, opts{}, "bench", "--frames", "80", "--media", "1000", "--calls", "2", "--streams", "8").wait()
			assert.EqualValuesf(t, 0, res.rc, "bench exit status %d, want 0", res.rc)
			invokes := res.find("invoke", nil)
			var peak int64
			for _, e := range invokes {
				peak = max(peak, e.num("active"))
			}
			assert.Falsef(t, peak > tc.max, "%d calls ran on the child at once, its max_streams is %d", peak, tc.max)
			assert.Falsef(t, len(invokes) < 12, "only %d calls reached the child: the case tests nothing", len(invokes))
			if t.Failed() {
				res.dump(t)
			}
		})
	}
}
