package host

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/internal/coalesce"
	"github.com/skulkrt/skulk/wire"
)

// firstDeath waits up to limit for the first incarnation of slot 0 to be
// declared dead and returns when the verdict was seen and its cause. The
// verdict is seen when the slot's state turns dead, before the child is
// killed and reaped (KillGrace at most, then the reap: not part of the
// health bounds); the cause, once the stop is over.
func firstDeath(t *testing.T, h *Host, limit time.Duration) (time.Time, error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var dead time.Time
	for {
		info := h.Children()[0]
		stopped := info.Restarts > 0 || info.LastCause != nil
		if dead.IsZero() && (stopped || info.State == "dead") {
			dead = time.Now()
		}
		if stopped {
			return dead, info.LastCause
		}
		require.Falsef(t, time.Now().After(deadline), "the child was not declared dead within %v", limit)
		time.Sleep(5 * time.Millisecond)
	}
}

// stallProbe measures how long the test process, the host included, went
// without running a goroutine woken by a timer on time: it wakes every
// stallTick and adds up the wake-ups that came more than stallSlack late.
// The health bounds are kept by a host that runs; on a machine so loaded
// that the process does not (seconds on a 2-core machine under -race
// beside other work), every look of the host's health timer is that much
// later.
type stallProbe struct {
	once  sync.Once
	done  chan struct{} // closed by Stop
	ended chan struct{} // closed when the probe's goroutine has returned
	total time.Duration // written by the goroutine before ended is closed
	worst time.Duration // the longest single stall; likewise
}

const (
	stallTick = 5 * time.Millisecond
	// stallSlack is above what the host's own goroutines can make a
	// wake-up wait on a busy process (the scheduler preempts a goroutine
	// after 10 ms, so a probe behind both processors' work waits about
	// that long): a later wake-up means the process did not run (the
	// machine's other work, or a stop), which the bounds do not charge
	// to the host, while a host that keeps itself busy is held to them.
	stallSlack = 50 * time.Millisecond
)

// startStallProbe starts a probe that t's cleanup stops, if the test
// did not.
func startStallProbe(t *testing.T) *stallProbe {
	p := &stallProbe{done: make(chan struct{}), ended: make(chan struct{})}
	go func() { // stopped by Stop
		defer close(p.ended)
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
				now := time.Now() // not the tick's own time: that is when it was due, not when it ran
				if late := now.Sub(last) - stallTick; late > stallSlack {
					p.total += late
					p.worst = max(p.worst, late)
				}
				last = now
			}
		}
	}()
	t.Cleanup(func() { p.Stop() })
	return p
}

// Stop ends the probe and returns how long the process stalled in all,
// and its longest single stall. It may be called more than once.
func (p *stallProbe) Stop() (total, worst time.Duration) {
	p.once.Do(func() { close(p.done) })
	<-p.ended
	return p.total, p.worst
}

// TestHealthChildLeavesControlUnread: a child that stops reading its
// control connection ("deaf") while it answers every ping that reaches
// it (it peeks at them), so that its pongs are right, is declared
// unhealthy once the host's control writer has waited a whole
// HealthTimeout for the full socket (here filled with cancels, as
// thousands of cancelled calls would fill it). Without the rule, the
// pings stay in the host's writer and the verdict never comes. The
// timeout is fastHealth's: the child must answer each ping within it, or
// it is rightly declared dead for its silence (a child that gets no CPU
// for a whole timeout is one), which is not what this test is about.
func TestHealthChildLeavesControlUnread(t *testing.T) {
	sideBySide(t)
	cfg := fastHealth(fakeConfig("serve"))
	h, _ := testHost(t, cfg, time.Minute)
	h.mu.Lock()
	ch := h.slots[0].cur
	h.mu.Unlock()
	c, err := h.Call(callCtx(t, 30*time.Second), "deaf", nil)
	require.NoError(t, err)
	defer c.Cancel()
	// The child reads one more ping, then nothing.
	time.Sleep(5 * cfg.HealthInterval)

	var full time.Time
	for i, queued := 0, true; full.IsZero() || queued; i++ {
		var err error
		queued, err = ch.ctrlW.TryWrite(&wire.Cancel{CallID: fmt.Sprintf("fill-%d", i), Reason: "fill"})
		require.NoError(t, err)
		if !queued {
			time.Sleep(time.Millisecond) // the queue is at its bound: let the flusher meet the full socket
		}
		full = ch.ctrlW.FullSince()
		require.Less(t, i, 1<<20, "the control socket never filled")
	}
	probe := startStallProbe(t) // the bound runs from full: stalls before it are not the verdict's
	// A cancel written as the host writes them (Call.sendCancel) waits
	// for room in the full queue, until the child is declared dead and
	// its connection ends.
	cancelDone := make(chan error, 1)
	go func() { // returns when the write ends: room, or the connection's end
		cancelDone <- ch.ctrlW.Write(context.Background(), coalesce.Stream, &wire.Cancel{CallID: "late", Reason: "late"})
	}()
	// Pongs still come meanwhile: the child looks healthy by them.
	dead, cause := firstDeath(t, h, 15*time.Second)
	stalled, _ := probe.Stop()
	require.ErrorIs(t, cause, errControlUnread)
	require.ErrorIs(t, cause, ErrUnhealthy)
	assert.NotContains(t, cause.Error(), "no pong", "the child answered its pings: the cause must not say it did not")
	// The stated bound: HealthTimeout after the write met the full
	// socket, seen at the next tick (one interval, plus one more when
	// the tick's ping waits for room), with a second for a loaded
	// machine under -race and the time the process did not run.
	took := dead.Sub(full)
	t.Logf("declared dead %v after the write met the full socket; the process stalled %v", took, stalled)
	assert.GreaterOrEqual(t, took, cfg.HealthTimeout, "declared before the writer had waited a whole timeout")
	assert.LessOrEqual(t, took, cfg.HealthTimeout+2*cfg.HealthInterval+time.Second+stalled)
	// It returns: with the connection's error, or nil where the queue
	// had room after all (the child read the one packet it was to read
	// only while the test filled the socket, and the flusher took the
	// queue), never waiting on the dead child.
	select {
	case <-cancelDone:
	case <-time.After(cfg.KillGrace + 5*time.Second):
		require.FailNow(t, "a cancel write still waits on the dead child")
	}
}

// TestHealthPongFlood: a child that stops answering pings and writes
// pongs with an old nonce back to back ("pongflood") keeps bytes waiting
// on the control connection at every look of the health timer; they hold
// the verdict only until the host has handled what was written at the
// first look, for one more HealthTimeout at most, so the child is declared
// unhealthy within an interval plus twice the timeout plus healthRecheck,
// and one HealthTimeout more when the timer fired late (the host was
// starved of CPU: docs/operations.md, Health), counted in the time the
// host ran (stallProbe).
func TestHealthPongFlood(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.HealthTimeout = time.Second
	h, logs := testHost(t, cfg, time.Minute)
	probe := startStallProbe(t)
	start := time.Now()
	c, err := h.Call(callCtx(t, 30*time.Second), "pongflood", nil)
	require.NoError(t, err)
	defer c.Cancel()
	called := time.Since(start)
	dead, cause := firstDeath(t, h, 15*time.Second)
	stalled, worst := probe.Stop()
	require.ErrorIs(t, cause, ErrUnhealthy)
	require.False(t, errors.Is(cause, errControlUnread), "cause: %v", cause)
	took := dead.Sub(start)
	bound := cfg.HealthInterval + 2*cfg.HealthTimeout + healthRecheck
	var late time.Duration // how late the host says a timeout fired when it gave the child another
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "health timeout fired late") {
			m := regexp.MustCompile(` late=(\S+)`).FindStringSubmatch(line)
			require.NotNil(t, m, "the late timeout's line has no late: %s", line)
			late, err = time.ParseDuration(m[1])
			require.NoError(t, err)
			bound += cfg.HealthTimeout
			break
		}
	}
	t.Logf("declared dead %v after the call was placed (the call took %v); the process stalled %v (longest %v); a timeout fired %v late", took, called, stalled, worst, late)
	if late > 0 {
		// The host forgives a timeout only when it fired more than
		// healthRecheck late, and only because the process did not run:
		// the probe, in the same process, must have seen a stall of the
		// same order. A host late for its own reasons (its supervisor
		// starved by the flood it reads) gets no allowance.
		assert.Greater(t, late, healthRecheck, "a timeout forgiven that was not late")
		assert.GreaterOrEqual(t, worst, late/2, "the host says its timer fired %v late, but the process ran", late)
	}
	// A second of margin for a loaded machine under -race, and the time
	// the process (the host with it) did not run at all.
	assert.LessOrEqual(t, took, bound+time.Second+stalled)
}

// TestDeadCause: a call whose invoke could not be written, or whose
// stream ended early, asks whether its child died meanwhile
// (deadCause), so that a child that died as the call started makes it
// unreachable, not a transport error: a live child is not taken for
// dead (after exitWait), and a killed one is found, with how it died.
func TestDeadCause(t *testing.T) {
	h, _ := testHost(t, fakeConfig("serve"), time.Minute)
	h.mu.Lock()
	ch := h.slots[0].cur
	h.mu.Unlock()
	start := time.Now()
	assert.Nil(t, ch.deadCause(), "a live child taken for dead")
	assert.GreaterOrEqual(t, time.Since(start), exitWait, "deadCause gave up before exitWait")
	require.NoError(t, syscall.Kill(ch.proc.pid, syscall.SIGKILL))
	require.Eventually(t, ch.proc.gone, 10*time.Second, 5*time.Millisecond)
	cause := ch.deadCause()
	require.NotNil(t, cause, "a killed child not seen dead")
	assert.Equal(t, frame.CodeUnreachable, cause.code)
	assert.Contains(t, cause.msg, "child died")
}
