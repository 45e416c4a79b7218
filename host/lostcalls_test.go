package host

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lostCalls.check fails only calls unaccounted for at two short pongs in a
// row, the second answering a ping sent after the first was taken; a pong
// that counts enough, or a new set of suspects, starts over.
func TestLostCallsCheck(t *testing.T) {
	a, b, c := &Call{id: "a"}, &Call{id: "b"}, &Call{id: "c"}
	var l lostCalls
	base := time.Now()
	k := 0
	// look answers a ping sent after the previous look was taken, as
	// pings one interval apart are.
	look := func(streams int, calls ...*Call) []*Call {
		k++
		asked := base.Add(time.Duration(k) * 10 * time.Millisecond)
		return (&l).check(streams, calls, asked, asked.Add(time.Millisecond))
	}
	assert.Empty(t, look(0, a), "one short pong is not enough")
	assert.Empty(t, look(1, a), "a pong that counts the call clears it")
	assert.Empty(t, look(0, a))
	assert.Equal(t, []*Call{a}, look(0, a), "short twice in a row: lost")
	assert.Empty(t, look(0, b), "the suspects were cleared by the loss")
	assert.Empty(t, look(0, c), "a different call at the next pong: a new suspect, not a loss")
	assert.Equal(t, []*Call{c}, look(1, b, c), "short again with c among them")
	assert.Empty(t, look(0))

	// Pings that waited together, answered in one burst: one look.
	var burst lostCalls
	sent := base.Add(time.Second) // five pings sent before any pong was taken
	taken := sent.Add(500 * time.Millisecond)
	for i := range 5 {
		asked := sent.Add(time.Duration(i) * 100 * time.Millisecond)
		assert.Emptyf(t, burst.check(0, []*Call{a}, asked, taken.Add(time.Duration(i)*time.Microsecond)), "pong %d of a burst", i)
	}
	next := taken.Add(100 * time.Millisecond) // the first ping sent after the burst was taken
	assert.Equal(t, []*Call{a}, burst.check(0, []*Call{a}, next, next.Add(time.Millisecond)), "short again at a later look: lost")

	// A ping sent less than gap after the first short pong was taken is
	// the same look; one sent later is the next.
	g := lostCalls{gap: 50 * time.Millisecond}
	assert.Empty(t, g.check(0, []*Call{a}, base, base))
	assert.Empty(t, g.check(0, []*Call{a}, base, base.Add(time.Millisecond)), "asked at the first pong's time: the same look")
	assert.Empty(t, g.check(0, []*Call{a}, base.Add(50*time.Millisecond), base.Add(51*time.Millisecond)), "asked gap after it: the same look")
	assert.Equal(t, []*Call{a}, g.check(0, []*Call{a}, base.Add(60*time.Millisecond), base.Add(61*time.Millisecond)), "asked more than gap after it: lost")
	// A pong that counts enough within a burst clears the suspects.
	assert.Empty(t, g.check(0, []*Call{b}, base, base))
	assert.Empty(t, g.check(1, []*Call{b}, base, base.Add(time.Millisecond)))
	assert.Empty(t, g.check(0, []*Call{b}, base.Add(time.Second), base.Add(time.Second)), "a new first look after the suspects were cleared")
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
