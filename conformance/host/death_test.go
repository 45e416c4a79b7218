package hostconf

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEarlyEnd runs children whose stream connection, control connection or
// process goes away after two chunks. The chunks must reach the caller,
// then, promptly, a synthetic failed terminal with sequence 3
// (docs/protocol.md §7: "Synthetic terminals carry the next sequence
// number") — unless the child's own terminal was already written, which
// wins (§7 "Frames written before a child died are delivered"). §7 "EOF
// before the terminal": synthetic failed transport_error, or unreachable
// if the child died; "the host waits up to 100 ms for the process's exit".
// Exit statuses 0, 11 and 12 (docs/cli.md).
func TestEarlyEnd(t *testing.T) {
	t.Parallel()
	transport := outcome{rc: 11, frames: 4, kind: "failed", code: "transport_error", synthetic: true}
	unreachable := outcome{rc: 12, frames: 4, kind: "failed", code: "unreachable", synthetic: true}
	cases := []struct {
		mode string
		want outcome
	}{
		{"stream_eof", transport},                                            // §7: EOF before the terminal, the child alive
		{"stream_reset", transport},                                          // §7: a reset counts as EOF
		{"truncated_packet", transport},                                      // §7: EOF in the middle of a packet, the child alive
		{"exit_mid_call", unreachable},                                       // §7: the child died; its chunks are delivered first
		{"exit_mid_call_grandchild", unreachable},                            // §7; "Stopping a child": the grandchild in its group must not survive
		{"exit_mid_call_grandchild_leakfd", unreachable},                     // §7: a grandchild holding fds 3 and 4 does not hide the death
		{"truncated_then_exit", unreachable},                                 // §7: a packet cut short by the death is unreachable
		{"terminal_then_exit", outcome{rc: 0, frames: 4, kind: "completed"}}, // §7: the real terminal in the socket wins
		{"eof_then_exit_soon", unreachable},                                  // §7: EOF, then the exit 10 ms later, within the ≤ 100 ms wait
		{"eof_then_exit_late", transport},                                    // §7: EOF, then the exit 400 ms later, after the wait
		{"control_close", unreachable},                                       // §7; docs/operations.md "Health": the control connection ended
		{"control_garbage", unreachable},                                     // §2 unknown t on the control connection: closed, the child is dead
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t")
			res.expect(t, tc.want)
			checkChunks(t, res, 0, 1)
			if v, ok := res.first(t, "violation", nil); ok && len(res.frames) > 0 {
				if d := res.terminal().At.Sub(v.At); d > prompt {
					assert.Fail(t, fmt.Sprintf("synthetic terminal %v after the child's move, want it promptly (within %v)", d, prompt))
				}
			}
			if tc.mode == "stream_reset" {
				// The case means something only if the child closed with unread input.
				if u, ok := res.first(t, "unread", nil); ok && u.num("bytes") <= 0 {
					assert.Fail(t, fmt.Sprintf("the child had %d unread bytes when it closed: no reset", u.num("bytes")))
				}
			}
		})
	}
}

// TestCrashAfterStartup checks a child that dies right after its startup,
// before it accepts any stream connection: exit status 12, "also when it
// went away just as the call started" (docs/cli.md). Depending on when the
// host sees the death, the call either got its started and then a
// synthetic failed unreachable (docs/protocol.md §7 "Unhealthy or dead
// child"), or was refused with nothing on standard output (§7 "Refused
// calls").
func TestCrashAfterStartup(t *testing.T) {
	t.Parallel()
	res := runCall(t, "crash_after_startup", "t")
	if len(res.frames) == 0 {
		checkRefused(t, res, 12)
		return
	}
	res.expect(t, outcome{rc: 12, frames: 2, kind: "failed", code: "unreachable", synthetic: true})
}
