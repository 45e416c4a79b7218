package provider

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exitAfterBye bounds the child's exit after bye ("then the child exits 0").
const exitAfterBye = 3 * time.Second

// drain sends drain with grace_ms and returns when it was sent.
func (c *child) drain(graceMS int) time.Time {
	c.t.Helper()
	t0 := time.Now()
	c.ctl.send(map[string]any{"t": "drain", "grace_ms": graceMS})
	return t0
}

// readBye reads control packets until bye and returns it and when it came;
// anything but pong before it fails the test.
func readBye(t *testing.T, c *child, d time.Duration) (*packet, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		p, err := c.ctl.read(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for bye: %v", err)
		}
		if p.typ == "bye" {
			return p, time.Now()
		}
		if p.typ != "pong" {
			t.Errorf("control packet %v during a drain", p)
		}
	}
}

// expectExitAfterBye checks that after bye the control connection ends and
// the child exits with status 0.
func expectExitAfterBye(t *testing.T, c *child) {
	t.Helper()
	if err := c.ctl.expectClosed(exitAfterBye); err != nil {
		t.Errorf("after bye: %v", err)
	}
	if code, ok := c.waitExit(exitAfterBye); !ok || code != 0 {
		t.Errorf("after bye: exited %v with status %d, want 0 within %v", ok, code, exitAfterBye)
	}
}

// Contract: docs/protocol.md §3 drain and bye.
// An idle child says bye at once (reason, if any, a string), closes the
// control connection and exits 0.
func testDrainIdle(t *testing.T) {
	c := start(t, setup{})
	t0 := c.drain(5000)
	bye, at := readBye(t, c, wait)
	if el := at.Sub(t0); el > atOnce {
		t.Errorf("idle child: bye %v after drain", el)
	}
	if r, ok := bye.header["reason"]; ok && r != nil {
		if _, ok := r.(string); !ok {
			t.Errorf("bye.reason is %T, want a string", r)
		}
	}
	if len(bye.att) != 0 {
		t.Errorf("bye with a %d-byte attachment", len(bye.att))
	}
	expectExitAfterBye(t, c)
}

// Contract: docs/protocol.md §3 drain, §5 item 5, §6 "Unknown tools and draining".
// Running calls finish; the stream listener is closed; pings are answered;
// an invoke on an idle connection ends at once with failed unreachable
// ("draining"); bye comes after the last end.
func testDrainLetsCallsFinish(t *testing.T) {
	c := start(t, setup{})
	idle := c.dial(t)
	runCall(t, idle, "warm", "count", map[string]any{"n": 1}, nil, "chunk,completed,end")
	s := c.dial(t)
	s.send(invoke("long", "sleep", map[string]any{"ms": 1500}))
	s.send(callerFrame("long", 0, "started"))
	s.send(callerFrame("long", 1, "completed"))
	c.mustCounters(1, 0, wait)
	long := readAsync(t, s, wait)
	c.drain(5000)
	p := c.ping(77) // the drain has been read
	if p.int("streams") != 1 {
		t.Errorf("ping during the drain: streams=%v, want 1", p.header["streams"])
	}
	// The contract does not order the listener's close against pongs, so
	// poll: each dial either is refused (closed) or is closed again by us.
	for deadline := time.Now().Add(atOnce); ; time.Sleep(poll) {
		late, err := c.tryDial(t)
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
				t.Errorf("dial after the drain: %v, want it refused", err)
			}
			break
		}
		late.close()
		if time.Now().After(deadline) {
			t.Errorf("the stream listener still accepts %v after the drain", atOnce)
			break
		}
	}
	idle.send(invoke("on-idle", "count", map[string]any{"n": 1}))
	idle.send(callerFrame("on-idle", 0, "started"))
	idle.send(callerFrame("on-idle", 1, "completed"))
	r := expectCall(t, idle, "on-idle", "failed/unreachable,end")
	if tm := r.terminal(); tm != nil && !strings.Contains(tm.errMessage(), "draining") {
		t.Errorf("invoke on an idle connection while draining: message %q, want it to say draining", tm.errMessage())
	}
	_, byeAt := readBye(t, c, wait)
	var frames []string
	var endAt time.Time
	for tp := range long {
		if tp.err != nil {
			t.Errorf("the running call: %v after %v", tp.err, frames)
			break
		}
		frames = append(frames, tp.p.outcome())
		endAt = tp.at
	}
	if got := strings.Join(frames, ","); got != "completed,end" {
		t.Errorf("the running call during the drain: %q, want completed,end", got)
	}
	// Two readers timestamp the two connections; slack covers their noise.
	if !endAt.IsZero() && byeAt.Before(endAt.Add(-slack)) {
		t.Errorf("bye %v before the last end", endAt.Sub(byeAt))
	}
	expectExitAfterBye(t, c)
}

// Contract: docs/protocol.md §6 "Unknown tools and draining".
// A connection accepted before the drain but never used is idle too: an
// invoke on it ends with failed unreachable.
func testDrainFreshIdleConnection(t *testing.T) {
	c := start(t, setup{})
	fresh := c.dial(t)
	keep := c.dial(t)
	keep.send(invoke("k", "sleep", map[string]any{"ms": 800}))
	keep.send(callerFrame("k", 0, "started"))
	keep.send(callerFrame("k", 1, "completed"))
	// keep's handler runs, so keep was accepted, and fresh, dialed before
	// it, was accepted before it.
	c.mustCounters(1, 0, wait)
	c.drain(5000)
	c.ping(1)
	fresh.send(invoke("f", "count", map[string]any{"n": 1}))
	fresh.send(callerFrame("f", 0, "started"))
	fresh.send(callerFrame("f", 1, "completed"))
	r := expectCall(t, fresh, "f", "failed/unreachable,end")
	if tm := r.terminal(); tm != nil && !strings.Contains(tm.errMessage(), "draining") {
		t.Errorf("message %q, want it to say draining", tm.errMessage())
	}
	expectCall(t, keep, "k", "completed,end")
	readBye(t, c, wait)
	expectExitAfterBye(t, c)
}

// Contract: docs/protocol.md §3 drain, §5 item 5 and §6 item 4 (the terminal by cause).
// Past the grace, cooperative handlers are cancelled (provider cancelled,
// end), not before it; bye no later than grace_ms + cancel_grace_ms.
func testDrainPastGrace(t *testing.T) {
	const grace, cancelGrace = 300, 1000
	c := start(t, setup{cancelGraceMS: cancelGrace})
	s := c.dial(t)
	s.send(invoke("g1", "sleep", map[string]any{"ms": 20000}))
	s.send(callerFrame("g1", 0, "started"))
	s.send(callerFrame("g1", 1, "completed"))
	s2 := c.dial(t)
	s2.send(invoke("g2", "echo", nil)) // waits for input
	s2.send(callerFrame("g2", 0, "started"))
	c.mustCounters(2, 0, wait)
	t0 := c.drain(grace)
	for _, x := range []struct {
		s  *conn
		id string
	}{{s, "g1"}, {s2, "g2"}} {
		expectCall(t, x.s, x.id, "cancelled,end")
		if el := time.Since(t0); el < grace*time.Millisecond {
			t.Errorf("%s cancelled %v after the drain, before its grace of %d ms", x.id, el, grace)
		}
	}
	_, byeAt := readBye(t, c, wait)
	if el, limit := byeAt.Sub(t0), (grace+cancelGrace)*time.Millisecond; el > limit+slack {
		t.Errorf("bye %v after the drain, limit %v", el, limit)
	}
	expectExitAfterBye(t, c)
}

// Contract: docs/protocol.md §5 item 5, §6 item 7 (stuck handlers), §3
// startup (cancel_grace_ms 0).
// A handler that ignores the drain's cancellation gets its cancelled
// terminal written for it and no end (it never returns); bye comes no
// earlier than grace_ms and no later than grace_ms + cancel_grace_ms, also
// with small or zero cancel graces; exit 0.
func testDrainStuck(t *testing.T) {
	for _, g := range []struct{ grace, cancelGrace int }{
		{300, 500}, {0, 300}, {200, 1000}, {500, 0}, {200, 2}, {200, 10}, {200, 50},
	} {
		t.Run(fmt.Sprintf("grace%d_cancel%d", g.grace, g.cancelGrace), func(t *testing.T) {
			c := start(t, setup{args: testToolsArgs(), cancelGraceMS: g.cancelGrace})
			s := c.dial(t)
			s.send(invoke("st", "sleep", map[string]any{"ms": 30000, "ignore_cancel": true}))
			s.send(callerFrame("st", 0, "started"))
			s.send(callerFrame("st", 1, "completed"))
			c.mustCounters(1, 0, wait)
			rd := readAsync(t, s, wait)
			t0 := c.drain(g.grace)
			_, byeAt := readBye(t, c, wait)
			el, limit := byeAt.Sub(t0), time.Duration(g.grace+g.cancelGrace)*time.Millisecond
			t.Logf("bye %v after the drain (limit %v)", el, limit)
			if el > limit+slack {
				t.Errorf("bye %v after the drain, limit grace_ms+cancel_grace_ms = %v", el, limit)
			}
			if el < time.Duration(g.grace)*time.Millisecond {
				t.Errorf("bye %v after the drain, before its grace of %d ms", el, g.grace)
			}
			expectExitAfterBye(t, c)
			var got []string
			for tp := range rd {
				if tp.err != nil {
					if !isClosed(tp.err) {
						t.Errorf("stream: %v", tp.err)
					}
					break
				}
				got = append(got, tp.p.outcome())
				if tp.p.typ == "frame" {
					var next uint64 = 1
					var done bool
					for _, p := range checkProviderFrame(tp.p, "st", &next, &done) {
						t.Error(p)
					}
				}
			}
			if strings.Join(got, ",") != "cancelled" {
				t.Errorf("stream of the stuck handler got %v, want its cancelled terminal and no end", got)
			}
		})
	}
}

// Contract: docs/protocol.md §5 item 5; §3 startup (cancel_grace_ms 0).
// With a small or zero cancel grace a cooperative handler cancelled by the
// drain still gets its cancelled terminal (and end before bye if it returns
// in time), and bye still comes by grace_ms + cancel_grace_ms.
func testDrainSmallCancelGrace(t *testing.T) {
	const grace = 200
	for _, cg := range []int{0, 2, 10, 50} {
		t.Run(fmt.Sprint(cg), func(t *testing.T) {
			c := start(t, setup{cancelGraceMS: cg})
			s := c.dial(t)
			s.send(invoke("cg", "sleep", map[string]any{"ms": 30000}))
			s.send(callerFrame("cg", 0, "started"))
			s.send(callerFrame("cg", 1, "completed"))
			c.mustCounters(1, 0, wait)
			rd := readAsync(t, s, wait)
			t0 := c.drain(grace)
			_, byeAt := readBye(t, c, wait)
			el, limit := byeAt.Sub(t0), time.Duration(grace+cg)*time.Millisecond
			t.Logf("bye %v after the drain (limit %v)", el, limit)
			if el > limit+slack {
				t.Errorf("bye %v after the drain, limit %v", el, limit)
			}
			var got []string
			var endAt time.Time
			for tp := range rd {
				if tp.err != nil {
					break
				}
				got = append(got, tp.p.outcome())
				endAt = tp.at
			}
			// A handler that has not returned cancel_grace_ms after its
			// cancellation is stuck (§6 item 7), and with a grace of a few ms a
			// loaded machine can make even a cooperative one late: then its
			// terminal is written for it and it is abandoned without end.
			switch strings.Join(got, ",") {
			case "cancelled,end":
				if byeAt.Before(endAt.Add(-slack)) {
					t.Errorf("bye %v before the end", endAt.Sub(byeAt))
				}
			case "cancelled":
				t.Logf("the handler was not back within %d ms: abandoned as stuck", cg)
			default:
				t.Errorf("cooperative handler cancelled by the drain: %v, want cancelled (then end, if it returned in time)", got)
			}
			expectExitAfterBye(t, c)
		})
	}
}

// Contract: docs/protocol.md §3 drain; §5 items 5 and 6.
// A second drain during a drain does not break it: the running call ends
// (completed, or cancelled by the second drain's zero grace), then bye and
// exit 0.
func testDrainTwice(t *testing.T) {
	c := start(t, setup{})
	s := c.dial(t)
	s.send(invoke("z", "sleep", map[string]any{"ms": 300}))
	s.send(callerFrame("z", 0, "started"))
	s.send(callerFrame("z", 1, "completed"))
	c.mustCounters(1, 0, wait)
	c.drain(5000)
	c.drain(0)
	r := expectCall(t, s, "z", "")
	if got := r.outcomes(); got != "completed,end" && got != "cancelled,end" {
		t.Errorf("the running call: %q, want completed,end or cancelled,end", got)
	}
	readBye(t, c, wait)
	expectExitAfterBye(t, c)
}
