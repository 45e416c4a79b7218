package hostconf

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDeadlineBackstop runs a child that ignores its deadline.
// docs/protocol.md §7 "Deadlines": no terminal by timeout_ms plus a grace
// (cancel_grace_ms + 1 s) gives a synthetic failed timeout, and the
// connection is closed. The deadline travels as timeout_ms (docs/cli.md
// --timeout), and the host sends no control cancel at the deadline itself
// (§7 "Deadlines"). Exit status 14.
func TestDeadlineBackstop(t *testing.T) {
	t.Parallel()
	const deadline = 300 * time.Millisecond
	res := runCall(t, "hang", "t", "--timeout", "300ms")
	res.expect(t, outcome{rc: 14, frames: 4, kind: "failed", code: "timeout", synthetic: true})
	inv, ok := res.first(t, "invoke", nil)
	if !ok || len(res.frames) == 0 {
		return
	}
	// What is left of the deadline when the invoke is written.
	if ms := inv.num("timeout_ms"); ms <= deadline.Milliseconds()-100 || ms > deadline.Milliseconds() {
		assert.Fail(t, fmt.Sprintf("invoke timeout_ms %d, want the rest of the %v deadline", ms, deadline))
	}
	backstop := deadline + cancelGrace + time.Second
	// The deadline runs from before the invoke; 500 ms of slack below.
	if d := res.terminal().At.Sub(inv.At); d < backstop-500*time.Millisecond || d > backstop+margin {
		assert.Fail(t, fmt.Sprintf("synthetic timeout %v after the invoke, want about %v (deadline + cancel grace + 1 s)", d, backstop))
	}
	checkAbandoned(t, res)
	if t.Failed() {
		res.dump(t)
	}
	for _, c := range res.find("cancel", nil) {
		if d := c.At.Sub(inv.At); d < deadline+cancelGrace {
			assert.Fail(t, fmt.Sprintf("control cancel %v after the invoke, before the backstop (docs/protocol.md §7 \"Deadlines\": none at the deadline)", d))
		}
	}
}

// TestCancelOnSignal checks docs/cli.md "call": Ctrl-C (or SIGTERM) cancels
// the call — a control cancel (docs/protocol.md §3 cancel, §6 item 4) — the provider's
// cancelled terminal is still printed, and the exit status is 13.
func TestCancelOnSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{
		syscall.SIGINT,  // docs/cli.md call: Ctrl-C cancels the call, status 13
		syscall.SIGTERM, // docs/cli.md call: "(or SIGTERM)"
	} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			r := start(t, "cancel_aware", opts{}, "call", "t", "--json")
			r.awaitLines(prompt+time.Second, 3) // started and both chunks are out
			r.signal(sig)
			res := r.wait()
			res.expect(t, outcome{rc: 13, frames: 4, kind: "cancelled", code: "cancelled"})
			if inv, ok := res.first(t, "invoke", nil); ok && len(res.find("cancel", ofCall(inv.str("call_id")))) == 0 {
				assert.Fail(t, fmt.Sprintf("the child got no control cancel for the call"))
			}
		})
	}
}

// TestSignalDuringStart checks docs/cli.md "call": a Ctrl-C while the child
// is still starting ends the command at once with status 13, and the child
// is stopped (docs/protocol.md §7 "Shutdown").
func TestSignalDuringStart(t *testing.T) {
	t.Parallel()
	r := start(t, "no_hello", opts{}, "call", "t", "--json")
	r.awaitEvent(prompt+time.Second, "sockets", nil)
	sent := r.signal(syscall.SIGINT)
	res := r.wait()
	checkRefused(t, res, 13)
	if d := res.exitAt.Sub(sent); d > prompt+killGrace {
		assert.Fail(t, fmt.Sprintf("skulk-host exited %v after the signal, want at once (the start would have taken %v)", d, startTimeout))
	}
}

// TestCancelIgnored checks docs/protocol.md §7 "A cancel with no answer": a
// cancelled call whose child sends no terminal gets a synthetic cancelled
// cancel_grace_ms + 1 s after the cancel, and its connection is closed
// (§4.4 synthetic frames). Exit status 13.
func TestCancelIgnored(t *testing.T) {
	t.Parallel()
	r := start(t, "hang", opts{}, "call", "t", "--json")
	r.awaitLines(prompt+time.Second, 3)
	sent := r.signal(syscall.SIGINT)
	res := r.wait()
	res.expect(t, outcome{rc: 13, frames: 4, kind: "cancelled", code: "cancelled", synthetic: true})
	if len(res.frames) == 0 {
		return
	}
	grace := cancelGrace + time.Second
	if d := res.terminal().At.Sub(sent); d < grace-500*time.Millisecond || d > grace+margin {
		assert.Fail(t, fmt.Sprintf("synthetic cancelled %v after the signal, want about %v", d, grace))
	}
	checkAbandoned(t, res)
}

// TestSecondSignal checks docs/cli.md "call": after a Ctrl-C the child is
// drained; a second Ctrl-C stops it with signals at once, instead of after
// the drain's wait (0.5 s + cancel grace + 1 s, docs/operations.md).
func TestSecondSignal(t *testing.T) {
	t.Parallel()
	r := start(t, "cancel_aware_ignore_drain", opts{}, "call", "t", "--json")
	r.awaitLines(prompt+time.Second, 3)
	r.signal(syscall.SIGINT)
	r.awaitEvent(prompt+time.Second, "drain", nil)
	second := r.signal(syscall.SIGINT)
	term := r.awaitEvent(prompt+killGrace, "signal", isSignal("terminated"))
	res := r.wait()
	res.expect(t, outcome{rc: 13, frames: 4, kind: "cancelled", code: "cancelled"})
	// The drain alone would wait cliDrainGrace + cancelGrace + 1 s = 2.5 s.
	if d := term.At.Sub(second); d > 1500*time.Millisecond {
		assert.Fail(t, fmt.Sprintf("SIGTERM reached the child %v after the second Ctrl-C, want at once", d))
	}
}

// TestShutdownEscalation runs children that do not leave when drained.
// docs/protocol.md §7 "Shutdown": "`drain`, wait for `bye` and the exit,
// then SIGTERM, then SIGKILL; remove `<dir>`"; the call's outcome stands
// (exit status 0). Each row waits at most the drain's wait (docs/operations.md:
// 0.5 s + cancel grace + 1 s for skulk-host) plus the kill grace.
func TestShutdownEscalation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode    string
		sigterm bool // the host must have sent SIGTERM
		killed  bool // and SIGKILL: the child has no exit of its own
	}{
		{"ignore_drain", true, false},           // §7 "Shutdown": no bye, no exit: SIGTERM
		{"ignore_drain_ignoreterm", true, true}, // §7 "Shutdown": SIGTERM ignored too: SIGKILL after the grace
		{"bye_no_exit", true, false},            // §3 bye: the child then exits with status 0; it does not: SIGTERM
		{"bye_no_exit_ignoreterm", true, true},  // §7 "Shutdown": SIGKILL
		{"bye_leave_grandchild", false, false},  // §7 "Stopping a child": a grandchild left in the group must not outlive the child
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t")
			res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
			drain, ok := res.first(t, "drain", nil)
			if !ok {
				return
			}
			if d := res.exitAt.Sub(drain.At); d > cliDrainGrace+cancelGrace+time.Second+killGrace+margin {
				assert.Fail(t, fmt.Sprintf("skulk-host exited %v after the drain", d))
			}
			st, _ := res.first(t, "start", nil)
			terms := res.find("signal", ofChild(st.Child, isSignal("terminated")))
			if tc.sigterm {
				if len(terms) == 0 {
					assert.Fail(t, fmt.Sprintf("the child got no SIGTERM"))
				} else if terms[0].At.Before(drain.At) {
					assert.Fail(t, fmt.Sprintf("SIGTERM before the drain"))
				}
			}
			if ex := res.find("exit", ofChild(st.Child, nil)); tc.killed && len(ex) > 0 {
				assert.Fail(t, fmt.Sprintf("the child exited by itself (%s), want it SIGKILLed", ex[0].str("why")))
			}
			assert.Falsef(t, tc.mode == "bye_leave_grandchild" && len(res.find("grandchild", nil)) == 0, "no grandchild was started: the case tests nothing")
		})
	}
}

// TestUnsolicitedBye checks docs/protocol.md §7 "`bye` without a `drain`": a bye the host did
// not ask for means the child is leaving; the running call may finish (exit
// status 0, the child's own completed) and a drain is still sent.
func TestUnsolicitedBye(t *testing.T) {
	t.Parallel()
	res := runCall(t, "unsolicited_bye", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	res.first(t, "drain", nil)
}
