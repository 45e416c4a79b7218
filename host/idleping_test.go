package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// pongs is how many pongs the host has timed so far.
func pongs(h *Host) uint64 {
	var n uint64
	for _, c := range h.Stats().PingRTT.Counts {
		n += c
	}
	return n
}

// TestIdleChildPingedEveryIdleInterval: a child with no call in flight is
// pinged every IdleHealthInterval, not every HealthInterval; one with a
// call in flight every HealthInterval.
func TestIdleChildPingedEveryIdleInterval(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(realConfig()) // pings every 100 ms
	cfg.IdleHealthInterval = time.Second
	h, _ := testHost(t, cfg, time.Minute)
	readyPID(t, h, 0)
	succeeds(t, h)

	// Idle for 2.5 s: pinged 2 or 3 times (the pong of a ping sent
	// before the window may land in it), where every tick would be 25.
	time.Sleep(300 * time.Millisecond) // the pong of the call's last ping
	before := pongs(h)
	time.Sleep(2500 * time.Millisecond)
	idle := pongs(h) - before
	assert.LessOrEqualf(t, idle, uint64(4), "%d pongs in 2.5 s idle, want one a second", idle)
	assert.GreaterOrEqualf(t, idle, uint64(1), "no pong in 2.5 s idle: the idle child is not pinged")

	// A call in flight for 1.5 s: pinged every tick (15), with a margin
	// for ticks a loaded machine drops.
	ctx := callCtx(t, 30*time.Second)
	before = pongs(h)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 1500}))
	require.NoError(t, err)
	require.NoError(t, c.CloseSend())
	_, err = c.Wait()
	require.NoError(t, err)
	busy := pongs(h) - before
	assert.GreaterOrEqualf(t, busy, uint64(6), "%d pongs in a 1.5 s call, want one every 100 ms", busy)
}

// TestHungIdleChildFoundByCall: a child that hung while idle, long before
// its next idle ping, is pinged when a call is routed to it, and the call
// ends unreachable within HealthTimeout of its start, not a tick later.
// The call comes half an interval after a tick: waiting for the next tick
// would find the child 1.5 s later than the ping at the call does.
func TestHungIdleChildFoundByCall(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(realConfig())
	// The timeout must exceed the interval; the test waits it out once,
	// for the verdict, so it is just over it.
	cfg.HealthInterval, cfg.HealthTimeout = 3*time.Second, 3200*time.Millisecond
	cfg.IdleHealthInterval = time.Minute
	h, _ := testHost(t, cfg, time.Minute)
	pid := readyPID(t, h, 0)
	time.Sleep(cfg.HealthInterval + cfg.HealthInterval/2) // a tick went by, the next is 1.5 s away
	sigstop(t, pid)
	defer syscall.Kill(pid, syscall.SIGCONT)

	start := time.Now()
	ctx := callCtx(t, 30*time.Second)
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 20000}))
	require.NoError(t, err)
	term, _ := recvUntilTerminal(t, c, 15*time.Second)
	d := time.Since(start)
	wantSynthetic(t, term, frame.CodeUnreachable)
	assert.Truef(t, strings.Contains(term.Error.Message, "unhealthy"), "message %q does not say unhealthy", term.Error.Message)
	// The margin is for a loaded machine under -race; found at the next
	// tick, it would be 1.5 s late.
	assert.Falsef(t, d > cfg.HealthTimeout+time.Second, "found after %v, want within about %v", d, cfg.HealthTimeout)
	if newPID := readyPID(t, h, pid); newPID == pid {
		require.FailNow(t, fmt.Sprintf("the stopped child %d is still the pool's child", pid))
	}
}

// TestRoutedWakesOnlyWhenAPingIsDue: a call routed to an idle child wakes
// its supervisor when the child has not been pinged yet, or not within
// HealthInterval; within it, the supervisor (which would drop the
// wake-up) is left asleep.
func TestRoutedWakesOnlyWhenAPingIsDue(t *testing.T) {
	h := &Host{}
	h.cfg.HealthInterval = time.Hour
	ch := &child{h: h, wake: make(chan struct{}, 1), born: time.Now().Add(-2 * time.Hour)}
	ch.routed()
	require.Len(t, ch.wake, 1, "never pinged: the supervisor is woken")
	<-ch.wake

	ch.pingedAt.Store(int64(time.Since(ch.born)) + 1) // a ping just now
	ch.routed()
	assert.Len(t, ch.wake, 0, "pinged within HealthInterval: the supervisor is not woken")

	ch.pingedAt.Store(int64(time.Since(ch.born)-90*time.Minute) + 1) // a ping 90 minutes ago
	ch.routed()
	assert.Len(t, ch.wake, 1, "pinged longer ago than HealthInterval: the supervisor is woken")
}

// sigstop stops the process pid with SIGSTOP and returns once every one
// of its threads is stopped: kill returns when the signal is queued, and
// on a loaded machine a thread of the child that was running or about to
// run can still answer what reaches it in the next milliseconds (a ping
// written right after the kill was answered that way).
func sigstop(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if threadsStopped(pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	require.FailNow(t, fmt.Sprintf("process %d not stopped 10 s after SIGSTOP", pid))
}

// threadsStopped reports whether every thread of pid is stopped (state T
// in /proc/PID/task/TID/stat).
func threadsStopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses
		// and may itself hold ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// TestCallEndedByChildAsksNoPing: a call whose end the child wrote (its
// handler returned) leaves an idle child unpinged after it, until
// IdleHealthInterval; a call whose handler may still run (cancelled, its
// handler ignoring the cancel, the connection closed without the child's
// end) keeps the child pinged every HealthInterval after it.
func TestCallEndedByChildAsksNoPing(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(realConfig())
	cfg.HealthInterval, cfg.HealthTimeout = 2*time.Second, 10*time.Second
	cfg.IdleHealthInterval = time.Minute
	cfg.CancelGrace = 100 * time.Millisecond
	cfg.StuckLimit = -1 // the handler that outlives its call is not recycled
	// That handler still sleeps when the test ends: Close's drain abandons
	// it after DrainGrace plus CancelGrace rather than waiting for it.
	cfg.DrainGrace = 100 * time.Millisecond
	h, _ := testHost(t, cfg, time.Minute)
	readyPID(t, h, 0)
	deadline := time.Now().Add(10 * time.Second)
	for pongs(h) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.EqualValues(t, 1, pongs(h), "the supervisor's first ping is not answered")

	// The call comes within HealthInterval of that ping, so it is not
	// pinged at its routing, and ends before the next tick.
	first := time.Now()
	succeeds(t, h)
	if time.Since(first) > cfg.HealthInterval/2 {
		t.Skipf("the call took %v on this machine: it may have spanned a health tick", time.Since(first))
	}
	time.Sleep(2*cfg.HealthInterval + cfg.HealthInterval/2) // two ticks
	assert.EqualValues(t, 1, pongs(h), "the child was pinged after a call it wrote the end of")

	// A handler that outlives its call: pinged at every tick after it.
	ctx, cancel := context.WithCancel(context.Background())
	c, err := h.Call(ctx, "sleep", frame.MustPayload(map[string]any{"ms": 8000, "ignore_cancel": true}))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	cancel()
	_, err = c.Wait()
	require.Error(t, err)
	// Two pongs within two and a half intervals: the wait ends at the
	// second.
	before := pongs(h)
	window := time.Now().Add(2*cfg.HealthInterval + cfg.HealthInterval/2)
	for pongs(h)-before < 2 && time.Now().Before(window) {
		time.Sleep(5 * time.Millisecond)
	}
	after := pongs(h)
	assert.GreaterOrEqualf(t, after-before, uint64(2), "pinged %d times in two ticks after a call whose handler runs on", after-before)
}
