package host

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/childstate"
)

// waitClosed fails t unless ch is closed within d.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		require.FailNow(t, what+" within "+d.String())
	}
}

// TestChildrenChanged: ChildrenChanged is closed when a child dies (a
// kill -9), and a channel taken after that is closed when its restart is
// ready; a closed channel is not handed out again, and one taken while
// nothing changes stays open.
func TestChildrenChanged(t *testing.T) {
	h, _ := testHost(t, fastHealth(realConfig()), time.Minute)
	first := h.Children()[0]
	require.Equal(t, "ready", first.State)

	quiet := h.ChildrenChanged()
	select {
	case <-quiet:
		require.FailNow(t, "closed with no change")
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, syscall.Kill(first.PID, syscall.SIGKILL))
	waitClosed(t, quiet, 20*time.Second, "ChildrenChanged not closed after the child died")
	for {
		changed := h.ChildrenChanged()
		require.NotEqual(t, quiet, changed, "a closed channel is not handed out again")
		c := h.Children()[0]
		if c.State == "ready" {
			assert.NotEqual(t, first.ID, c.ID, "the ready child is the restarted one")
			return
		}
		waitClosed(t, changed, 20*time.Second, "ChildrenChanged not closed while the child restarts")
	}
}

// TestChildrenChangedBackToSeenState: a channel taken while a slot is in
// one state is closed when the slot goes back to the state the host last
// saw with an earlier waiter (ready, then dead and starting with nobody
// waiting, then ready again): the change is judged against the states
// when the channel was made. A pool change that changes no state (a slot
// freed) and a state set to what it was leave the channel open.
func TestChildrenChangedBackToSeenState(t *testing.T) {
	s := &slot{state: stateStarting}
	h := &Host{slots: []*slot{s}}
	set := func(st childState) {
		h.mu.Lock()
		h.setStateLocked(s, st)
		h.notifyLocked()
		h.mu.Unlock()
	}

	first := h.ChildrenChanged()
	set(stateReady)
	waitClosed(t, first, time.Second, "ChildrenChanged not closed when the child became ready")

	set(stateDead) // nobody waits for these two
	set(stateStarting)

	second := h.ChildrenChanged() // Children would say "starting" now
	h.mu.Lock()
	h.notifyLocked() // a slot freed, say
	h.mu.Unlock()
	set(stateStarting)
	select {
	case <-second:
		require.FailNow(t, "ChildrenChanged closed with no state changed")
	default:
	}
	set(stateReady)
	waitClosed(t, second, time.Second, "ChildrenChanged not closed when the restarted child became ready")
}

// TestChildStateNames: every state has its own name from the one list
// hostmetrics labels skulk_child_state with, and the list has no name
// without a state.
func TestChildStateNames(t *testing.T) {
	names := childstate.Names()
	var got []string
	for st := stateStarting; st <= stateDown; st++ {
		got = append(got, st.String())
	}
	require.Equal(t, names[:], got)
	assert.Equal(t, "childState(6)", (stateDown + 1).String())
	assert.Equal(t, "childState(0)", childState(0).String())
}
