//go:build unix

package host

import (
	"os"
	"os/exec"
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
	cfg := fastHealth(fakeConfig("serve"))
	cfg.HealthTimeout = 2 * time.Second
	h, _ := testHost(t, cfg, time.Minute)
	ok, err := h.Call(callCtx(t, 30*time.Second), "ok", nil)
	require.NoError(t, err)
	require.NoError(t, ok.CloseSend())
	_, err = ok.Wait()
	require.NoError(t, err)
	before := h.Children()[0]
	require.Equal(t, "ready", before.State)
	c, err := h.Call(callCtx(t, 30*time.Second), "hang", nil)
	require.NoError(t, err)

	// The shell stops both processes, continues this one 3 s later and
	// the child half a second after it; Run returns once it has exited.
	stall := exec.Command("sh", "-c", `kill -STOP "$2" "$1"; sleep 3; kill -CONT "$1"; sleep 0.5; kill -CONT "$2"`,
		"sh", strconv.Itoa(os.Getpid()), strconv.Itoa(before.PID))
	require.NoError(t, stall.Run())

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
}
