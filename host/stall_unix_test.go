//go:build unix

package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/frame"
)

// TestHostStalledChildNotBlamed: a host and its child kept off the CPU
// for longer than HealthTimeout (here stopped with SIGSTOP; a machine whose
// run queue is long can do the same for seconds), the host sent no ping
// meanwhile. The host runs again first and the child half a second later,
// within the timeout of the ping the host sends once it runs: the child
// stays the same healthy child, and a call in flight ends as its caller
// ends it, not unreachable.
func TestHostStalledChildNotBlamed(t *testing.T) {
	// The shell stops both processes, continues this one 3 s later and
	// the child half a second after it.
	stallHostAndChild(t, "hang", `kill -STOP "$2" "$1"; sleep 3; kill -CONT "$1"; sleep 0.5; kill -CONT "$2"`, false)
}

// TestHostStalledReadsStalePongs: pongs the child wrote while the host was
// stopped reach the host in a burst when it runs again, seconds after the
// call in flight was dispatched. They answer pings sent right after the
// dispatch, before the child had counted the call (latecount counts it
// from the second ping it reads 1.5 s or more after its invoke, as a child
// whose handler waits for a processor while its control reader answers),
// so they say nothing of a call that old: the child, which answers the
// host's next pings as soon as it runs again and counts the call from the
// second, is not blamed for losing it. TestHostStalledChildNotBlamed
// failed so under load ("1 calls not counted by its pong"): a pong written
// before the stall and one written as the child ran again, both before
// the child's stream goroutine had counted hang.
func TestHostStalledReadsStalePongs(t *testing.T) {
	// The child is stopped first, so that the pings of the next 0.45 s
	// (four or five, one every HealthInterval) wait for it; then the host.
	// The child, continued, answers them all, not counting the call, into
	// the stopped host, which reads them 3 s later.
	stallHostAndChild(t, "latecount", `kill -STOP "$2"; sleep 0.45; kill -STOP "$1"; sleep 0.1; kill -CONT "$2"; sleep 3; kill -CONT "$1"`, false)
}

// TestHostStalledWithPingOutstanding: as TestHostStalledChildNotBlamed,
// but the child stops 0.3 s before the host, so that pings it has not
// answered are outstanding through the stall and their timeout fires
// while the host cannot run. The host, running again, gives the child a
// whole HealthTimeout before it judges it, and the child, continued half a
// second later, answers. TestHostStalledChildNotBlamed failed so under
// load ("no pong in time") when a ping was sent just before both stopped.
func TestHostStalledWithPingOutstanding(t *testing.T) {
	// The child counts the call first (so that only its health is
	// judged), and stops 0.3 s before the host.
	logs := stallHostAndChild(t, "hang", `kill -STOP "$2"; sleep 0.3; kill -STOP "$1"; sleep 3; kill -CONT "$1"; sleep 0.5; kill -CONT "$2"`, true)
	// The timeout, due while the host was stopped, fired late and gave
	// the child another; the host says so, with how late (about a second:
	// due about 2 s after the child stopped, run 3.3 s after it).
	m := regexp.MustCompile(`health timeout fired late.* late=(\S+)`).FindStringSubmatch(logs.String())
	require.NotNil(t, m, "no late timeout logged")
	late, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	assert.Greater(t, late, 500*time.Millisecond)
}

// stallHostAndChild starts a host whose child runs tool (in a call made
// after one ok call), has the shell run script with this process's pid as
// $1 and the child's as $2 (stopping and continuing them), and checks that
// the child was not blamed: twice HealthTimeout after the script ended it
// is the same ready child, never restarted, and the call in flight ends as
// its caller cancels it. With counted, the script runs only once the
// child's pongs count the call. It returns the host's log.
func stallHostAndChild(t *testing.T, tool, script string, counted bool) *syncBuffer {
	t.Helper()
	cfg := fastHealth(fakeConfig("serve"))
	cfg.HealthTimeout = 2 * time.Second
	// The fake child's tools never answer a cancel: the call in flight
	// ends with the host's synthetic cancelled, CancelGrace plus 1 s
	// after the test cancels it (a blamed child's call would have ended
	// unreachable before).
	cfg.CancelGrace = 100 * time.Millisecond
	h, logs := testHost(t, cfg, time.Minute)
	callOK(t, h)
	before := h.Children()[0]
	require.Equal(t, "ready", before.State)
	c, err := h.Call(callCtx(t, 30*time.Second), tool, nil)
	require.NoError(t, err)
	if counted {
		require.Eventually(t, func() bool { return h.Children()[0].Streams == 1 }, 10*time.Second, 10*time.Millisecond)
	}

	stall := exec.Command("sh", "-c", script, "sh", strconv.Itoa(os.Getpid()), strconv.Itoa(before.PID))
	require.NoError(t, stall.Run(), "the child was gone before the stall ended")

	// Twice the timeout after the host runs again: a blamed child would
	// have been declared dead and replaced by now.
	time.Sleep(2 * cfg.HealthTimeout)
	after := h.Children()[0]
	assert.Equal(t, before.PID, after.PID, "the child was replaced: %v", after.LastCause)
	assert.Equal(t, "ready", after.State)
	assert.Zero(t, after.Restarts)
	c.Cancel()
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	assert.Equal(t, frame.KindCancelled, term.Kind, "the call in flight ended %v: %v", term.Kind, term.Error)
	return logs
}

// TestHostStalledOftenHungChildFound: a child that hung (stopped for good)
// on a host that is itself stopped again and again, its health timer
// firing late each time, gets one late timeout forgiven, not one per ping
// the host goes on sending it: it is found unhealthy while the stalls go
// on. The pings outstanding outnumber those the host keeps the marks of
// (pingsTimed) before the first timeout, so the oldest of those moves on
// with every ping.
func TestHostStalledOftenHungChildFound(t *testing.T) {
	cfg := fastHealth(fakeConfig("serve"))
	cfg.HealthInterval = 20 * time.Millisecond
	cfg.HealthTimeout = time.Second
	h, _ := testHost(t, cfg, time.Minute)
	callOK(t, h)
	before := h.Children()[0]
	c, err := h.Call(callCtx(t, 30*time.Second), "hang", nil)
	require.NoError(t, err)

	// The child stops for good; 0.4 s later (twenty pings outstanding,
	// its timeout 0.6 s away) the host is stopped for a second at a time
	// and runs 30 ms between, up to ten times: nearly every timeout fires
	// while it is stopped. The stalls end early, before the next one, once
	// the file found exists: a goroutine of the test makes it when the
	// hung child is no longer the slot's ready child.
	found := filepath.Join(t.TempDir(), "found")
	stalled := make(chan struct{})
	watched := make(chan struct{})
	go func() { // stopped by closing stalled, once the shell has ended
		defer close(watched)
		for {
			if now := h.Children()[0]; now.PID != before.PID || now.State != "ready" {
				if err := os.WriteFile(found, nil, 0o600); err != nil {
					t.Errorf("the hung child was found, but its mark could not be made: %v", err)
				}
				return
			}
			select {
			case <-stalled:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	stall := exec.Command("sh", "-c", `kill -STOP "$2"; sleep 0.4; for i in 1 2 3 4 5 6 7 8 9 10; do [ -e "$3" ] && break; kill -STOP "$1"; sleep 1; kill -CONT "$1"; sleep 0.03; done`,
		"sh", strconv.Itoa(os.Getpid()), strconv.Itoa(before.PID), found)
	err = stall.Run()
	close(stalled)
	<-watched
	require.NoError(t, err)
	after := h.Children()[0]
	assert.True(t, after.PID != before.PID || after.State != "ready",
		"the hung child %d is still ready after 10 s of stalls (health timeout 1 s)", before.PID)
	term, _ := recvUntilTerminal(t, c, 10*time.Second)
	require.Equal(t, frame.KindFailed, term.Kind, "the call on the hung child ended %v: %v", term.Kind, term.Error)
	assert.Equal(t, frame.CodeUnreachable, term.Error.Code)
}

// callOK makes one ok call on h and waits for its result, so that the
// child is ready and has served a call.
func callOK(t *testing.T, h *Host) {
	t.Helper()
	ok, err := h.Call(callCtx(t, 30*time.Second), "ok", nil)
	require.NoError(t, err)
	require.NoError(t, ok.CloseSend())
	_, err = ok.Wait()
	require.NoError(t, err)
}
