package host

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lostCalls.check fails only calls unaccounted for at two short pongs in a
// row; a pong that counts enough, or a new set of suspects, starts over.
func TestLostCallsCheck(t *testing.T) {
	a, b, c := &Call{id: "a"}, &Call{id: "b"}, &Call{id: "c"}
	var l lostCalls
	assert.Empty(t, l.check(0, []*Call{a}), "one short pong is not enough")
	assert.Empty(t, l.check(1, []*Call{a}), "a pong that counts the call clears it")
	assert.Empty(t, l.check(0, []*Call{a}))
	assert.Equal(t, []*Call{a}, l.check(0, []*Call{a}), "short twice in a row: lost")
	assert.Empty(t, l.check(0, []*Call{b}), "the suspects were cleared by the loss")
	assert.Empty(t, l.check(0, []*Call{c}), "a different call at the next pong: a new suspect, not a loss")
	assert.Equal(t, []*Call{c}, l.check(1, []*Call{b, c}), "short again with c among them")
	assert.Empty(t, l.check(0, nil))
}

// outputLimit forwards a burst, then the rate, and reports what it
// dropped with the next line it forwards, at most once per reportEvery.
func TestOutputLimit(t *testing.T) {
	l := newOutputLimit()
	now := l.last
	for i := range childLogBurst {
		ok, dropped := l.take(now)
		assert.True(t, ok, "line %d of the burst", i)
		assert.Zero(t, dropped)
	}
	for range 10 {
		ok, _ := l.take(now)
		assert.False(t, ok, "past the burst")
	}
	now = now.Add(time.Second / childLogRate) // one line's worth
	ok, dropped := l.take(now)
	assert.True(t, ok)
	assert.Equal(t, int64(10), dropped, "the loss reported with the next line forwarded")
	ok, _ = l.take(now)
	assert.False(t, ok)
	now = now.Add(time.Second / childLogRate)
	ok, dropped = l.take(now)
	assert.True(t, ok)
	assert.Zero(t, dropped, "a second report within reportEvery waits")
	assert.Equal(t, int64(1), l.dropped)
}
