package hostconf

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnhealthyChild runs children that stop answering pings properly once
// their call runs. docs/protocol.md §5 item 4: no pong within the health
// timeout (default 5 s) means unhealthy; §7 "Unhealthy or dead child": the in-flight call gets a synthetic
// failed unreachable, the child's process group SIGTERM, then SIGKILL after
// a grace. The failure must not come before the timeout has passed since
// the last real pong.
func TestUnhealthyChild(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode       string
		ignoreTerm bool
	}{
		{"no_pong", false},                      // §5 item 4: no pong at all
		{"no_pong_grandchild_ignoreterm", true}, // §7 "Stopping a child": SIGTERM ignored by child and grandchild, so SIGKILL to the group
		{"stale_nonce", false},                  // docs/protocol.md §5 item 4: an old nonce over and over is no answer
		{"foreign_nonce", false},                // §5 item 4: a nonce the host never sent is ignored
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			res := runCall(t, tc.mode, "t")
			res.expect(t, outcome{rc: 12, frames: 4, kind: "failed", code: "unreachable", synthetic: true})
			checkChunks(t, res, 0, 1)
			changed, ok := res.first(t, "pongs_changed", nil)
			if !ok || len(res.frames) == 0 {
				return
			}
			failedAt := res.terminal().At
			var lastGood time.Time
			for _, p := range res.find("pong", func(e event) bool { return e.flag("genuine") }) {
				lastGood = p.At
			}
			// The event of the last genuine pong may arrive at the test late,
			// never early: 1 s of slack on the lower bound.
			if d := failedAt.Sub(lastGood); d < healthTimeout-time.Second {
				assert.Fail(t, fmt.Sprintf("unreachable %v after the last genuine pong, want no sooner than the %v health timeout", d, healthTimeout))
			}
			if d := failedAt.Sub(changed.At); d > healthTimeout+time.Second+margin {
				assert.Fail(t, fmt.Sprintf("unreachable %v after the pongs stopped, want within about %v", d, healthTimeout+time.Second))
			}
			st, _ := res.first(t, "start", nil)
			assert.NotEqualValuesf(t, 0, len(res.find("signal", ofChild(st.Child, isSignal("terminated")))), "the child got no SIGTERM (§6: SIGTERM to its process group)")
			if tc.ignoreTerm {
				// It ignored SIGTERM and is gone, so it was killed (no exit of its own).
				if ex := res.find("exit", ofChild(st.Child, nil)); len(ex) > 0 {
					assert.Fail(t, fmt.Sprintf("the child exited by itself (%s), want it SIGKILLed", ex[0].str("why")))
				}
				// docs/protocol.md §7 "Stopping a child": SIGTERM is followed by SIGCONT.
				assert.NotEqualValuesf(t, 0, len(res.find("signal", ofChild(st.Child, isSignal("continued")))), "the child got no SIGCONT after SIGTERM (docs/protocol.md §7 \"Stopping a child\")")
				// §7 "Stopping a child": "Signals always go to the whole process group".
				assert.NotEqualValuesf(t, 0, len(res.find("grandchild", nil)), "no grandchild was started: the case tests nothing")
				assert.NotEqualValuesf(t, 0, len(res.find("signal", ofChild(st.Child+"/grandchild", isSignal("terminated")))), "the grandchild in the child's process group got no SIGTERM")
			}
		})
	}
}

// TestStoppedChild stops the child with SIGSTOP mid-call: it answers no
// ping, so it is unhealthy (docs/protocol.md §5 item 4; docs/operations.md:
// "or was stopped with SIGSTOP"), and the host's SIGTERM must be followed by
// SIGCONT so that the stopped child acts on it (docs/protocol.md §7
// "Stopping a child"): the child reports the SIGTERM, which it could not do while stopped.
func TestStoppedChild(t *testing.T) {
	t.Parallel()
	r := start(t, "hang", opts{}, "call", "t", "--json")
	r.awaitLines(prompt+time.Second, 3)
	st := r.awaitEvent(prompt, "start", nil)
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGSTOP))
	stoppedAt := time.Now()
	res := r.wait()
	res.expect(t, outcome{rc: 12, frames: 4, kind: "failed", code: "unreachable", synthetic: true})
	if len(res.frames) > 0 {
		// Pongs after the stop are the continued child answering old pings.
		var lastPong time.Time
		for _, p := range res.find("pong", func(e event) bool { return e.At.Before(stoppedAt) }) {
			lastPong = p.At
		}
		failedAt := res.terminal().At
		// As in TestUnhealthyChild: 1 s of slack below, the margin above.
		if d := failedAt.Sub(lastPong); d < healthTimeout-time.Second {
			assert.Fail(t, fmt.Sprintf("unreachable %v after the last pong, want no sooner than the %v health timeout", d, healthTimeout))
		}
		if d := failedAt.Sub(stoppedAt); d > healthTimeout+time.Second+margin {
			assert.Fail(t, fmt.Sprintf("unreachable %v after SIGSTOP, want within about %v", d, healthTimeout+time.Second))
		}
	}
	assert.NotEqualValuesf(t, 0, len(res.find("signal", isSignal("terminated"))), "the stopped child never handled a SIGTERM: no SIGCONT after it")
}

// TestLatePongsStayHealthy checks the other side of the health timeout:
// pongs 2.5 s late, for 6 s (longer than the 5 s timeout), keep the child
// healthy and the call completes (docs/protocol.md §5 item 4: unhealthy
// when no pong has arrived for the health timeout, default 5 s).
func TestLatePongsStayHealthy(t *testing.T) {
	t.Parallel()
	res := runCall(t, "slow_pong", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	assert.NotEqualValuesf(t, 0, len(res.find("pong", func(e event) bool { return e.flag("late") })), "no late pong was sent: the case tests nothing")
	if changed, ok := res.first(t, "pongs_changed", nil); ok && len(res.frames) > 0 {
		if d := res.terminal().At.Sub(changed.At); d < healthTimeout {
			assert.Fail(t, fmt.Sprintf("the late pongs lasted %v, want longer than the %v health timeout", d, healthTimeout))
		}
	}
}

// TestStuckChildRecycled checks docs/protocol.md §6 item 7 "may recycle a
// child whose `stuck` count grows" as the host decides it (§7 "Unhealthy
// or dead child": recycled gracefully, drained, then replaced; pong.stuck
// reaching Config.StuckLimit, default 1, docs/architecture.md): the child reporting a stuck handler is drained while its call
// runs, and the running call still completes.
func TestStuckChildRecycled(t *testing.T) {
	t.Parallel()
	res := runCall(t, "stuck_pong", "t")
	res.expect(t, outcome{rc: 0, frames: 4, kind: "completed"})
	assert.Falsef(t, len(res.find("pong", func(e event) bool { return e.num("stuck") > 0 })) == 0, "no pong reported a stuck handler: the case tests nothing")
	if seen, ok := res.first(t, "drain_seen", nil); ok && !seen.flag("seen") {
		assert.Fail(t, fmt.Sprintf("the child was not drained while its stuck count was 1"))
	}
}
