package host

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/internal/testnet"
)

// TestConnWatch: one connection's watch, armed for wait after wait. A wait
// stopped before the delay calls nothing; a wait longer than it sees the
// peer's hang-up (even behind unread bytes) and calls that wait's
// onHangup, not an earlier one's; once stopped, nothing more is called.
func TestConnWatch(t *testing.T) {
	c, s := testnet.SocketPair(t)
	w := newConnWatch(s, 5*time.Millisecond)
	defer w.close()
	var first, second atomic.Int32

	for range 3 { // waits shorter than the delay: no watch, nothing called
		w.arm(func() { first.Add(1) })
		w.stop()
	}
	_, err := c.Write([]byte("unread"))
	require.NoError(t, err)
	w.arm(func() { second.Add(1) })
	require.Eventually(t, func() bool { // past the delay: the watch began
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.stopWatch != nil
	}, 10*time.Second, time.Millisecond, "the armed wait's watch did not begin")
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return second.Load() == 1 }, 10*time.Second, time.Millisecond, "the hang-up reaches the armed wait")
	w.stop()
	time.Sleep(20 * time.Millisecond)
	assert.EqualValues(t, 0, first.Load(), "a wait stopped before the delay was called")
	assert.EqualValues(t, 1, second.Load(), "the armed wait was called more than once")
}

// TestConnWatchNotEarly: a wait armed while the timer set by an earlier,
// shorter wait is still pending has its watch begin only once it has
// itself waited the delay, not when that earlier timer fires; and it does
// begin.
func TestConnWatchNotEarly(t *testing.T) {
	_, s := testnet.SocketPair(t)
	const d = 200 * time.Millisecond
	w := newConnWatch(s, d)
	defer w.close()
	w.arm(func() {}) // sets the timer for d from now
	w.stop()         // leaves it pending
	time.Sleep(d / 2)
	armed := time.Now() // before arm reads its clock: waited never comes out short
	w.arm(func() {})
	began := func() (bool, time.Duration) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.stopWatch != nil, time.Since(armed)
	}
	// Past the first timer's fire (d after the first arm), before d after
	// the second: the watch must not have begun.
	time.Sleep(3 * d / 4)
	if ok, waited := began(); ok {
		assert.GreaterOrEqual(t, waited, d, "the watch began before the armed wait had waited the delay")
	}
	require.Eventually(t, func() bool { ok, _ := began(); return ok }, 10*time.Second, time.Millisecond, "the armed wait's watch did not begin")
	ok, waited := began()
	require.True(t, ok)
	assert.GreaterOrEqual(t, waited, d)
	w.stop()
}
